import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliError } from '../../src/cli/command';
import { connectionSettings, describeConnection, tlsConfig, workflowUrl, type ConnectionFlags } from '../../src/cli/connection';

function refusal(f: () => unknown): CliError {
  try {
    f();
  } catch (e) {
    if (e instanceof CliError) return e;
    throw e;
  }
  throw new Error('not refused');
}

describe('connection settings', () => {
  it('defaults to the embedded dev server, its namespace, the troupe task queue and its Web UI', () => {
    const s = connectionSettings({}, {});
    expect(s).toEqual({
      address: '127.0.0.1:7233',
      namespace: 'default',
      taskQueue: 'troupe',
      tls: null,
      apiKey: null,
      uiAddress: 'http://127.0.0.1:8233',
    });
    expect(describeConnection(s)).toBe('Temporal at 127.0.0.1:7233, namespace "default", task queue "troupe"');
    expect(workflowUrl(s, 'run/pd')).toBe('http://127.0.0.1:8233/namespaces/default/workflows/run%2Fpd');
  });

  it('takes the environment, and flags over the environment', () => {
    const env = {
      TEMPORAL_ADDRESS: 'temporal.example:7233',
      TEMPORAL_NAMESPACE: 'prod',
      TROUPE_TASK_QUEUE: 'gpu',
      TEMPORAL_API_KEY: 'k',
    };
    const fromEnv = connectionSettings({}, env);
    expect(fromEnv).toMatchObject({ address: 'temporal.example:7233', namespace: 'prod', taskQueue: 'gpu', apiKey: 'k' });
    // An API key implies TLS; a non-default address has no known Web UI.
    expect(fromEnv.tls).toEqual({ certFile: null, keyFile: null, caFile: null, serverName: null });
    expect(fromEnv.uiAddress).toBeNull();
    expect(workflowUrl(fromEnv, 'run/pd')).toBeNull();
    const fromFlags = connectionSettings({ namespace: 'dev', 'task-queue': 'cpu', 'ui-address': 'https://ui.example/' }, env);
    expect(fromFlags).toMatchObject({ address: 'temporal.example:7233', namespace: 'dev', taskQueue: 'cpu', uiAddress: 'https://ui.example' });
  });

  it("reads TLS from the temporal CLI's variables, the older ones the Web UI reads, and flags over both", () => {
    const cliNames = {
      TEMPORAL_TLS_CLIENT_CERT_PATH: '/c.pem',
      TEMPORAL_TLS_CLIENT_KEY_PATH: '/k.pem',
      TEMPORAL_TLS_SERVER_CA_CERT_PATH: '/ca.pem',
      TEMPORAL_TLS_SERVER_NAME: 'localhost',
    };
    expect(connectionSettings({}, cliNames).tls).toEqual({
      certFile: { value: '/c.pem', from: 'TEMPORAL_TLS_CLIENT_CERT_PATH' },
      keyFile: { value: '/k.pem', from: 'TEMPORAL_TLS_CLIENT_KEY_PATH' },
      caFile: { value: '/ca.pem', from: 'TEMPORAL_TLS_SERVER_CA_CERT_PATH' },
      serverName: 'localhost',
    });
    expect(connectionSettings({}, { TEMPORAL_TLS_CERT: '/c.pem', TEMPORAL_TLS_KEY: '/k.pem', TEMPORAL_TLS_CA: '/ca.pem' }).tls).toEqual({
      certFile: { value: '/c.pem', from: 'TEMPORAL_TLS_CERT' },
      keyFile: { value: '/k.pem', from: 'TEMPORAL_TLS_KEY' },
      caFile: { value: '/ca.pem', from: 'TEMPORAL_TLS_CA' },
      serverName: null,
    });
    // Both names for one setting, the same file: fine.
    expect(connectionSettings({}, { TEMPORAL_TLS_CA: '/ca.pem', TEMPORAL_TLS_SERVER_CA_CERT_PATH: '/ca.pem' }).tls?.caFile?.value).toBe('/ca.pem');
    const flags: ConnectionFlags = { 'tls-cert': '/f.pem', 'tls-key': '/fk.pem', 'tls-ca': '/fca.pem', 'tls-server-name': 'temporal.internal' };
    expect(connectionSettings(flags, cliNames).tls).toEqual({
      certFile: { value: '/f.pem', from: '--tls-cert' },
      keyFile: { value: '/fk.pem', from: '--tls-key' },
      caFile: { value: '/fca.pem', from: '--tls-ca' },
      serverName: 'temporal.internal',
    });
    // A server name alone, or TEMPORAL_TLS=1, is TLS without a client certificate; nothing is a plain connection.
    expect(connectionSettings({}, { TEMPORAL_TLS_SERVER_NAME: 'x' }).tls).toEqual({ certFile: null, keyFile: null, caFile: null, serverName: 'x' });
    expect(connectionSettings({}, { TEMPORAL_TLS: 'true' }).tls).not.toBeNull();
    expect(connectionSettings({}, {}).tls).toBeNull();
  });

  it('refuses, as bad usage, a certificate without its key and two variables that disagree', () => {
    const noKey = refusal(() => connectionSettings({ 'tls-cert': '/c.pem' }, {}));
    expect(noKey).toMatchObject({ exitCode: 2 });
    expect(noKey.message).toBe('mTLS needs both a certificate and a key: --tls-cert is set, give a key (--tls-key, or TEMPORAL_TLS_CLIENT_KEY_PATH) too');
    const noCert = refusal(() => connectionSettings({}, { TEMPORAL_TLS_KEY: '/k.pem' }));
    expect(noCert.message).toBe('mTLS needs both a certificate and a key: TEMPORAL_TLS_KEY is set, give a certificate (--tls-cert, or TEMPORAL_TLS_CLIENT_CERT_PATH) too');
    const disagree = refusal(() => connectionSettings({}, { TEMPORAL_TLS_SERVER_CA_CERT_PATH: '/a.pem', TEMPORAL_TLS_CA: '/b.pem' }));
    expect(disagree).toMatchObject({ exitCode: 2 });
    expect(disagree.message).toBe('TEMPORAL_TLS_SERVER_CA_CERT_PATH=/a.pem and TEMPORAL_TLS_CA=/b.pem disagree; set one of them');
    // The flag decides: no disagreement to settle.
    expect(connectionSettings({ 'tls-ca': '/c.pem' }, { TEMPORAL_TLS_SERVER_CA_CERT_PATH: '/a.pem', TEMPORAL_TLS_CA: '/b.pem' }).tls?.caFile?.value).toBe('/c.pem');
  });
});

describe('TLS files, read when connecting', () => {
  let dir = '';
  const path = (name: string) => join(dir, name);
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  const env = () => ({
    TEMPORAL_TLS_CLIENT_CERT_PATH: path('client.pem'),
    TEMPORAL_TLS_CLIENT_KEY_PATH: path('client.key'),
    TEMPORAL_TLS_SERVER_CA_CERT_PATH: path('ca.pem'),
  });

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'troupe-tls-unit-'));
    const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
    openssl('req', '-x509', ...ec, '-subj', '/CN=ca', '-days', '30', '-keyout', 'ca.key', '-out', 'ca.pem');
    openssl('req', '-x509', ...ec, '-subj', '/CN=client', '-days', '30', '-keyout', 'client.key', '-out', 'client.pem');
    openssl('genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', 'other.key');
    writeFileSync(path('garbage.pem'), 'not pem\n');
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('gives the certificate pair, the CA and the server name to the connection', () => {
    const tls = tlsConfig(connectionSettings({ 'tls-server-name': 'localhost' }, env()));
    expect(Buffer.from(tls!.clientCertPair!.crt).toString()).toMatch(/^-----BEGIN CERTIFICATE-----/);
    expect(Buffer.from(tls!.clientCertPair!.key).toString()).toMatch(/^-----BEGIN PRIVATE KEY-----/);
    expect(Buffer.from(tls!.serverRootCACertificate!).toString()).toMatch(/^-----BEGIN CERTIFICATE-----/);
    expect(tls!.serverNameOverride).toBe('localhost');
    expect(tlsConfig(connectionSettings({}, {}))).toBeNull();
  });

  it('names the setting and the file of a missing, malformed, mismatched or expired one, as bad usage', () => {
    const refused = (overrides: Record<string, string>, now?: Date) =>
      refusal(() => tlsConfig(connectionSettings({}, { ...env(), ...overrides }), now));
    const missing = refused({ TEMPORAL_TLS_SERVER_CA_CERT_PATH: path('nope.pem') });
    expect(missing).toMatchObject({ exitCode: 2, message: `TEMPORAL_TLS_SERVER_CA_CERT_PATH ${path('nope.pem')}: no such file` });
    expect(refused({ TEMPORAL_TLS_CLIENT_CERT_PATH: path('client.key') }).message).toBe(
      `TEMPORAL_TLS_CLIENT_CERT_PATH ${path('client.key')}: not a PEM certificate`,
    );
    expect(refused({ TEMPORAL_TLS_CLIENT_KEY_PATH: path('garbage.pem') }).message).toMatch(
      new RegExp(`^TEMPORAL_TLS_CLIENT_KEY_PATH ${path('garbage.pem')}: not a PEM private key`),
    );
    expect(refused({ TEMPORAL_TLS_CLIENT_KEY_PATH: path('other.key') }).message).toBe(
      `TEMPORAL_TLS_CLIENT_KEY_PATH ${path('other.key')}: not the key of the certificate TEMPORAL_TLS_CLIENT_CERT_PATH ${path('client.pem')}`,
    );
    const later = new Date(Date.now() + 400 * 86_400_000);
    expect(refused({}, later).message).toMatch(new RegExp(`^TEMPORAL_TLS_SERVER_CA_CERT_PATH ${path('ca.pem')}: the certificate expired on 20`));
    const earlier = new Date(Date.now() - 86_400_000);
    expect(refused({}, earlier).message).toMatch(/: the certificate is not valid before 20/);
  });
});
