import { readFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import type { TLSConfig } from '@temporalio/client';
import type { NativeConnection } from '@temporalio/worker';
import { TroupeClient } from '../client';
import { DEFAULT_TASK_QUEUE } from '../../workflows/ids';
import { CliError } from './command';
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
  'api-key': { type: 'string' },
  'ui-address': { type: 'string' },
} as const;

export const connectionHelp: Array<[string, string]> = [
  ['--address HOST:PORT', 'Temporal service (env TEMPORAL_ADDRESS, default 127.0.0.1:7233)'],
  ['--namespace NAME', 'Temporal namespace (env TEMPORAL_NAMESPACE, default "default")'],
  ['--task-queue NAME', 'task queue of the Troupe workers (env TROUPE_TASK_QUEUE, default "troupe")'],
  ['--tls-cert FILE', 'client certificate for mTLS (env TEMPORAL_TLS_CERT; needs --tls-key)'],
  ['--tls-key FILE', 'client private key for mTLS (env TEMPORAL_TLS_KEY)'],
  ['--tls-ca FILE', "the server's root CA, if not a public one (env TEMPORAL_TLS_CA)"],
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
  'api-key'?: string | undefined;
  'ui-address'?: string | undefined;
}

export interface ConnectionSettings {
  address: string;
  namespace: string;
  taskQueue: string;
  /** Null: plain connection. Files are paths, read when connecting. */
  tls: { certFile: string | null; keyFile: string | null; caFile: string | null } | null;
  apiKey: string | null;
  /** Web UI base URL, when known (given, or the dev server's default next to a default address). */
  uiAddress: string | null;
}

const DEFAULT_ADDRESS = '127.0.0.1:7233';

function pick(flag: string | undefined, env: string | undefined): string | null {
  if (flag !== undefined && flag !== '') return flag;
  return env !== undefined && env !== '' ? env : null;
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
  const certFile = pick(flags['tls-cert'], env.TEMPORAL_TLS_CERT);
  const keyFile = pick(flags['tls-key'], env.TEMPORAL_TLS_KEY);
  const caFile = pick(flags['tls-ca'], env.TEMPORAL_TLS_CA);
  const apiKey = pick(flags['api-key'], env.TEMPORAL_API_KEY);
  if ((certFile === null) !== (keyFile === null)) {
    throw new CliError('mTLS needs both a certificate and a key (--tls-cert and --tls-key, or TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY)', 2);
  }
  const tlsWanted = certFile !== null || caFile !== null || apiKey !== null || /^(1|true)$/i.test(env.TEMPORAL_TLS ?? '');
  return {
    address,
    namespace: pick(flags.namespace, env.TEMPORAL_NAMESPACE) ?? 'default',
    taskQueue: pick(flags['task-queue'], env.TROUPE_TASK_QUEUE) ?? DEFAULT_TASK_QUEUE,
    tls: tlsWanted ? { certFile, keyFile, caFile } : null,
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

function readPem(file: string, what: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new CliError(`cannot read the ${what} ${file}: ${err instanceof Error ? err.message : String(err)}`);
  }
}

function tlsConfig(settings: ConnectionSettings): TLSConfig | null {
  if (!settings.tls) return null;
  const { certFile, keyFile, caFile } = settings.tls;
  return {
    ...(certFile && keyFile
      ? { clientCertPair: { crt: readPem(certFile, 'TLS certificate'), key: readPem(keyFile, 'TLS key') } }
      : {}),
    ...(caFile ? { serverRootCACertificate: readPem(caFile, 'TLS root CA') } : {}),
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

function connectFailure(settings: ConnectionSettings, err: unknown): CliError {
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
    throw connectFailure(settings, err);
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
    throw connectFailure(settings, err);
  }
}
