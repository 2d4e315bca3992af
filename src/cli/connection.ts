import { X509Certificate, createPrivateKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createConnection, isIP } from 'node:net';
import { connect as tlsConnect, createSecureContext } from 'node:tls';
import type { TLSConfig } from '@temporalio/client';
import type { NativeConnection } from '@temporalio/worker';
import { TroupeClient } from '../client';
import { DEFAULT_TASK_QUEUE } from '../contract/ids';
import { CliError, EXIT_REFUSED } from './command';
import { cliErrorOf } from './render/client-errors';
import { escapeControlChars, hasControlChars } from './render/control-chars';
import { troupeDataConverter } from '../codec/data-converter';

/**
 * Where the Temporal service is and how to reach it: flags first, then the environment (the
 * Temporal CLI's variable names, so one shell set-up serves both), then the embedded defaults.
 */

export const connectionOptions = {
  address: { type: 'string' },
  namespace: { type: 'string' },
  'task-queue': { type: 'string' },
  'tls-cert': { type: 'string' },
  'tls-key': { type: 'string' },
  'tls-ca': { type: 'string' },
  'tls-server-name': { type: 'string' },
  'api-key': { type: 'string' },
  'ui-address': { type: 'string' },
} as const;

export const connectionHelp: Array<[string, string]> = [
  ['--address HOST:PORT', 'Temporal service (env TEMPORAL_ADDRESS, default 127.0.0.1:7233)'],
  ['--namespace NAME', 'Temporal namespace (env TEMPORAL_NAMESPACE, default "default")'],
  ['--task-queue NAME', 'task queue of the Troupe workers (env TROUPE_TASK_QUEUE, default "troupe")'],
  ['--tls-cert FILE', 'client certificate for mTLS (env TEMPORAL_TLS_CLIENT_CERT_PATH or TEMPORAL_TLS_CERT; needs --tls-key)'],
  ['--tls-key FILE', 'client private key for mTLS (env TEMPORAL_TLS_CLIENT_KEY_PATH or TEMPORAL_TLS_KEY)'],
  ['--tls-ca FILE', "the server's root CA, if not a public one (env TEMPORAL_TLS_SERVER_CA_CERT_PATH or TEMPORAL_TLS_CA)"],
  ['--tls-server-name NAME', "the name the server's certificate must have, if not the address's host (env TEMPORAL_TLS_SERVER_NAME)"],
  ['--api-key KEY', 'API key, e.g. for Temporal Cloud; implies TLS (env TEMPORAL_API_KEY)'],
  ['--ui-address URL', 'Temporal Web UI, for links to runs (env TEMPORAL_UI_ADDRESS)'],
];

export interface ConnectionFlags {
  address?: string | undefined;
  namespace?: string | undefined;
  'task-queue'?: string | undefined;
  'tls-cert'?: string | undefined;
  'tls-key'?: string | undefined;
  'tls-ca'?: string | undefined;
  'tls-server-name'?: string | undefined;
  'api-key'?: string | undefined;
  'ui-address'?: string | undefined;
}

/** A setting and where it was given (`--tls-cert`, `TEMPORAL_TLS_CERT`): errors name it. */
export interface GivenSetting {
  value: string;
  from: string;
}

export interface ConnectionSettings {
  address: string;
  namespace: string;
  taskQueue: string;
  /** Null: plain connection. Files are read when connecting. */
  tls: { certFile: GivenSetting | null; keyFile: GivenSetting | null; caFile: GivenSetting | null; serverName: string | null } | null;
  apiKey: string | null;
  /** Web UI base URL, when known (given, or the dev server's default next to a default address). */
  uiAddress: string | null;
}

const DEFAULT_ADDRESS = '127.0.0.1:7233';

function pick(flag: string | undefined, env: string | undefined): string | null {
  if (flag !== undefined && flag !== '') return flag;
  return env !== undefined && env !== '' ? env : null;
}

/**
 * The TLS settings' flags and variables: the temporal CLI's names first (one shell set-up serves
 * both), then the older ones the Web UI server and earlier CLIs read.
 */
const tlsSources = {
  certFile: { flag: 'tls-cert', env: ['TEMPORAL_TLS_CLIENT_CERT_PATH', 'TEMPORAL_TLS_CERT'] },
  keyFile: { flag: 'tls-key', env: ['TEMPORAL_TLS_CLIENT_KEY_PATH', 'TEMPORAL_TLS_KEY'] },
  caFile: { flag: 'tls-ca', env: ['TEMPORAL_TLS_SERVER_CA_CERT_PATH', 'TEMPORAL_TLS_CA'] },
  serverName: { flag: 'tls-server-name', env: ['TEMPORAL_TLS_SERVER_NAME'] },
} as const;

/** A TLS setting from its flag, else its variables; two variables naming different values are refused. */
function pickTls(which: keyof typeof tlsSources, flags: ConnectionFlags, env: Record<string, string | undefined>): GivenSetting | null {
  const { flag, env: names } = tlsSources[which];
  const given = flags[flag];
  if (given !== undefined && given !== '') return { value: given, from: `--${flag}` };
  const set = names.flatMap((name) => (env[name] ? [{ value: env[name], from: name }] : []));
  const [first, second] = set;
  if (first && second && first.value !== second.value) {
    throw new CliError(`${first.from}=${first.value} and ${second.from}=${second.value} disagree; set one of them`, 2);
  }
  return first ?? null;
}

export function connectionSettings(
  flags: ConnectionFlags,
  env: Record<string, string | undefined> = process.env,
): ConnectionSettings {
  for (const [flag, value] of Object.entries(flags)) {
    if (typeof value === 'string' && hasControlChars(value)) {
      throw new CliError(`--${flag}: ${JSON.stringify(escapeControlChars(value))} holds control or bidi characters; give it without them`, 2);
    }
  }
  const address = pick(flags.address, env.TEMPORAL_ADDRESS) ?? DEFAULT_ADDRESS;
  const certFile = pickTls('certFile', flags, env);
  const keyFile = pickTls('keyFile', flags, env);
  const caFile = pickTls('caFile', flags, env);
  const serverName = pickTls('serverName', flags, env)?.value ?? null;
  const apiKey = pick(flags['api-key'], env.TEMPORAL_API_KEY);
  if ((certFile === null) !== (keyFile === null)) {
    const [given, missing] = certFile ? [certFile, 'a key (--tls-key, or TEMPORAL_TLS_CLIENT_KEY_PATH)'] : [keyFile!, 'a certificate (--tls-cert, or TEMPORAL_TLS_CLIENT_CERT_PATH)'];
    throw new CliError(`mTLS needs both a certificate and a key: ${given.from} is set, give ${missing} too`, 2);
  }
  const tlsWanted =
    certFile !== null || caFile !== null || serverName !== null || apiKey !== null || /^(1|true)$/i.test(env.TEMPORAL_TLS ?? '');
  return {
    address,
    namespace: pick(flags.namespace, env.TEMPORAL_NAMESPACE) ?? 'default',
    taskQueue: pick(flags['task-queue'], env.TROUPE_TASK_QUEUE) ?? DEFAULT_TASK_QUEUE,
    tls: tlsWanted ? { certFile, keyFile, caFile, serverName } : null,
    apiKey,
    uiAddress:
      pick(flags['ui-address'], env.TEMPORAL_UI_ADDRESS)?.replace(/\/+$/, '') ??
      (address === DEFAULT_ADDRESS ? 'http://127.0.0.1:8233' : null),
  };
}

/** `Temporal at 127.0.0.1:7233, namespace "default", task queue "troupe"` */
export function describeConnection(settings: ConnectionSettings): string {
  return `Temporal at ${settings.address}, namespace "${settings.namespace}", task queue "${settings.taskQueue}"`;
}

/** Link to a workflow in the Web UI, when its address is known. */
export function workflowUrl(settings: ConnectionSettings, workflowId: string): string | null {
  if (!settings.uiAddress) return null;
  return `${settings.uiAddress}/namespaces/${encodeURIComponent(settings.namespace)}/workflows/${encodeURIComponent(workflowId)}`;
}

/** A refusal that names the setting and its file: bad usage (exit 2), before any connection. */
function badFile(file: GivenSetting, what: string): CliError {
  return new CliError(`${file.from} ${file.value}: ${what}`, 2);
}

function readGivenSetting(file: GivenSetting): Buffer {
  try {
    return readFileSync(file.value);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw badFile(file, code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'not readable by this user' : err instanceof Error ? err.message : String(err));
  }
}

/** A PEM certificate file (one or more), checked and in date: a bad one is named before connecting. */
function readCertificate(file: GivenSetting, now: Date): Buffer {
  const pem = readGivenSetting(file);
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(pem);
  } catch {
    throw badFile(file, 'not a PEM certificate');
  }
  if (new Date(cert.validTo) < now) throw badFile(file, `the certificate expired on ${new Date(cert.validTo).toISOString()}`);
  if (new Date(cert.validFrom) > now) throw badFile(file, `the certificate is not valid before ${new Date(cert.validFrom).toISOString()}`);
  return pem;
}

function readPrivateKey(file: GivenSetting): Buffer {
  const pem = readGivenSetting(file);
  try {
    createPrivateKey(pem);
  } catch {
    throw badFile(file, 'not a PEM private key (or one with a passphrase, which Temporal clients cannot use)');
  }
  return pem;
}

/** The TLS options of a connection, its files read and checked: a bad or missing one is one line naming its setting. */
export function tlsConfig(settings: ConnectionSettings, now = new Date()): TLSConfig | null {
  if (!settings.tls) return null;
  const { certFile, keyFile, caFile, serverName } = settings.tls;
  const ca = caFile ? readCertificate(caFile, now) : null;
  const pair = certFile && keyFile ? { crt: readCertificate(certFile, now), key: readPrivateKey(keyFile) } : null;
  if (pair && certFile && keyFile) {
    try {
      createSecureContext({ cert: pair.crt, key: pair.key });
    } catch {
      throw badFile(keyFile, `not the key of the certificate ${certFile.from} ${certFile.value}`);
    }
  }
  return {
    ...(pair ? { clientCertPair: pair } : {}),
    ...(ca ? { serverRootCACertificate: ca } : {}),
    ...(serverName ? { serverNameOverride: serverName } : {}),
  };
}

/** How long the CLI waits for the service: to accept a connection, to answer it, to answer a first request. */
const CONNECT_TIMEOUT_S = 5;
const FIRST_ANSWER_TIMEOUT_S = 10;
const WHAT_TO_DO = 'start the embedded one with `npm run dev-server -- start`, or point Troupe at yours with --address / TEMPORAL_ADDRESS';

/** One line: what failed at which address, and what to check. */
function unreachable(settings: ConnectionSettings, reason: string, advice = WHAT_TO_DO): CliError {
  return new CliError(`cannot reach the Temporal service at ${settings.address}: ${reason.replaceAll('\n', ' ')}; ${advice}`);
}

/**
 * Whether anything accepts a TCP connection at the address: a refused port is told at once
 * (gRPC would try again until its deadline), and a port that accepts but never answers is told
 * apart from one where nothing listens.
 */
function tcpProbe(address: string, timeoutMs: number): Promise<'open' | string> {
  const match = /^\[?(.*?)\]?:(\d+)$/.exec(address);
  if (!match) return Promise.resolve('open');
  return new Promise((resolve) => {
    const socket = createConnection({ host: match[1] ?? '', port: Number(match[2]) });
    const done = (result: string) => {
      socket.destroy();
      resolve(result);
    };
    socket.setTimeout(timeoutMs, () => done(`no answer to a connection within ${timeoutMs / 1000} s`));
    socket.once('connect', () => done('open'));
    socket.once('error', (err: NodeJS.ErrnoException) =>
      done(err.code === 'ECONNREFUSED' ? 'connection refused (nothing listens there)' : err.code === 'ENOTFOUND' ? 'no such host' : err.message),
    );
  });
}

async function refuseUnlessListening(settings: ConnectionSettings): Promise<void> {
  const probe = await tcpProbe(settings.address, CONNECT_TIMEOUT_S * 1000);
  if (probe !== 'open') throw unreachable(settings, probe);
}

const TLS_ADVICE =
  "give the deployment's CA and a client certificate: --tls-ca, --tls-cert, --tls-key (or TEMPORAL_TLS_SERVER_CA_CERT_PATH, TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_CLIENT_KEY_PATH)";

/** TLS alerts a server sends a client it will not serve, as Node names them. */
const refusals: Array<[RegExp, string]> = [
  [/CERTIFICATE_REQUIRED|HANDSHAKE_FAILURE/, 'it requires a client certificate and this client showed none'],
  [/UNKNOWN_CA|BAD_CERTIFICATE|CERTIFICATE_UNKNOWN|DECRYPT_ERROR/, 'it refused the client certificate (not signed by a CA it trusts)'],
  [/CERTIFICATE_EXPIRED/, 'it refused the client certificate as expired'],
  // And what this client finds wrong with the server's certificate.
  [/UNABLE_TO_VERIFY|SELF_SIGNED|UNABLE_TO_GET_ISSUER/, "its certificate is not signed by a CA this client trusts (the CA given, or a public one)"],
  [/ALTNAME/, 'its certificate is not for this host name (--tls-server-name, or TEMPORAL_TLS_SERVER_NAME, gives the name it has)'],
];

/**
 * Why a connection that TCP accepted got no answer, when TLS is the reason: one handshake the way
 * the client made it (gRPC only says it timed out, or that the stream closed). Null when the
 * handshake tells nothing (the service may just be slow).
 */
function tlsDiagnosis(settings: ConnectionSettings, tls: TLSConfig | null, timeoutMs = 2000): Promise<string | null> {
  const match = /^\[?(.*?)\]?:(\d+)$/.exec(settings.address);
  if (!match) return Promise.resolve(null);
  const host = match[1] ?? '';
  const name = tls?.serverNameOverride ?? (isIP(host) ? undefined : host);
  return new Promise((resolve) => {
    const socket = tlsConnect({
      host,
      port: Number(match[2]),
      ALPNProtocols: ['h2'],
      // A plain client only asks whether the service speaks TLS at all.
      rejectUnauthorized: tls !== null,
      ...(name ? { servername: name } : {}),
      ...(tls?.serverRootCACertificate ? { ca: Buffer.from(tls.serverRootCACertificate) } : {}),
      ...(tls?.clientCertPair ? { cert: Buffer.from(tls.clientCertPair.crt), key: Buffer.from(tls.clientCertPair.key) } : {}),
    });
    let timer: NodeJS.Timeout | undefined;
    const done = (result: string | null) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(result);
    };
    timer = setTimeout(() => done(null), timeoutMs);
    socket.once('secureConnect', () => {
      if (tls === null) done('it speaks TLS and this client connected without');
      // TLS 1.3: the server judges the client's certificate after the client's handshake is done,
      // and says so with an alert right after; a server content with it says nothing.
      else timer = setTimeout(() => done(null), 500);
    });
    socket.once('error', (err: NodeJS.ErrnoException) => {
      const text = `${err.code ?? ''} ${err.message}`;
      const known = refusals.find(([pattern]) => pattern.test(text));
      if (known) done(known[1]);
      else if (tls === null) done(null);
      else done(`the TLS handshake failed: ${err.message}`);
    });
  });
}

async function connectFailure(settings: ConnectionSettings, tls: TLSConfig | null, err: unknown): Promise<CliError> {
  const refused = cliErrorOf(err);
  if (refused instanceof CliError && refused.exitCode === EXIT_REFUSED) return refused;
  const diagnosis = await tlsDiagnosis(settings, tls);
  if (diagnosis !== null) return unreachable(settings, diagnosis, TLS_ADVICE);
  const reason = err instanceof Error ? err.message : String(err);
  if (/deadline|timeout expired/i.test(reason)) {
    return unreachable(
      settings,
      `it accepts connections but no Temporal service answered within ${CONNECT_TIMEOUT_S} s`,
      'check that this is the frontend\'s gRPC port (not the Web UI) and its TLS settings (--tls-*, --api-key)',
    );
  }
  return unreachable(settings, reason);
}

/**
 * A first request with a deadline: a service whose frontend is up while its database is not
 * (PostgreSQL down) accepts the connection and then leaves every call waiting; the CLI says so
 * instead of hanging. Any other answer, even an error, is left to the command.
 */
async function firstAnswer(settings: ConnectionSettings, client: TroupeClient): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const request = client.temporal.workflowService
    .listWorkflowExecutions({ namespace: settings.namespace, pageSize: 1 })
    .then(() => 'answered' as const, () => 'answered' as const);
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), FIRST_ANSWER_TIMEOUT_S * 1000);
  });
  const outcome = await Promise.race([request, late]);
  clearTimeout(timer);
  if (outcome === 'late') {
    await client.close();
    throw unreachable(
      settings,
      `it accepted the connection but did not answer a request within ${FIRST_ANSWER_TIMEOUT_S} s`,
      "check the service's health and its database (e.g. PostgreSQL): its logs say why",
    );
  }
}

/** A Troupe client over a connection of its own (close it with `close()`). */
export async function connectClient(settings: ConnectionSettings): Promise<TroupeClient> {
  const tls = tlsConfig(settings);
  const dataConverter = troupeDataConverter();
  await refuseUnlessListening(settings);
  let client: TroupeClient;
  try {
    client = await TroupeClient.connect({
      dataConverter,
      address: settings.address,
      namespace: settings.namespace,
      taskQueue: settings.taskQueue,
      connectTimeout: `${CONNECT_TIMEOUT_S}s`,
      ...(tls ? { tls } : {}),
      ...(settings.apiKey ? { apiKey: settings.apiKey } : {}),
    });
  } catch (err) {
    throw await connectFailure(settings, tls, err);
  }
  await firstAnswer(settings, client);
  return client;
}

/** The worker's connection (the native one the Worker needs). */
export async function connectWorker(settings: ConnectionSettings): Promise<NativeConnection> {
  const { NativeConnection } = await import('@temporalio/worker');
  const tls = tlsConfig(settings);
  await refuseUnlessListening(settings);
  try {
    return await NativeConnection.connect({
      address: settings.address,
      ...(tls ? { tls } : {}),
      ...(settings.apiKey ? { apiKey: settings.apiKey } : {}),
    });
  } catch (err) {
    throw await connectFailure(settings, tls, err);
  }
}
