import { describe, expect, it } from 'vitest';
import { CliError } from '../../src/cli/command';
import { connectionSettings, describeConnection, workflowUrl } from '../../src/cli/connection';

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
    expect(fromEnv.tls).toEqual({ certFile: null, keyFile: null, caFile: null });
    expect(fromEnv.uiAddress).toBeNull();
    expect(workflowUrl(fromEnv, 'run/pd')).toBeNull();
    const fromFlags = connectionSettings({ namespace: 'dev', 'task-queue': 'cpu', 'ui-address': 'https://ui.example/' }, env);
    expect(fromFlags).toMatchObject({ address: 'temporal.example:7233', namespace: 'dev', taskQueue: 'cpu', uiAddress: 'https://ui.example' });
  });

  it('mTLS needs both certificate and key', () => {
    expect(connectionSettings({}, { TEMPORAL_TLS_CERT: '/c.pem', TEMPORAL_TLS_KEY: '/k.pem' }).tls).toEqual({
      certFile: '/c.pem',
      keyFile: '/k.pem',
      caFile: null,
    });
    const err = (() => {
      try {
        connectionSettings({ 'tls-cert': '/c.pem' }, {});
        return null;
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(CliError);
    expect(err).toMatchObject({ exitCode: 2 });
    expect(connectionSettings({}, { TEMPORAL_TLS: 'true' }).tls).not.toBeNull();
    expect(connectionSettings({}, {}).tls).toBeNull();
  });
});
