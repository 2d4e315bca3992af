import { readFileSync } from 'node:fs';
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

function unreachable(settings: ConnectionSettings, err: unknown): CliError {
  const reason = err instanceof Error ? err.message : String(err);
  return new CliError(
    `cannot reach the Temporal service at ${settings.address}: ${reason}\n` +
      'Start the embedded one with `npm run dev-server -- start`, or point Troupe at yours with ' +
      '--address / TEMPORAL_ADDRESS (and --namespace, TLS or API key as it needs).',
  );
}

/** A Troupe client over a connection of its own (close it with `close()`). */
export async function connectClient(settings: ConnectionSettings): Promise<TroupeClient> {
  const tls = tlsConfig(settings);
  const dataConverter = troupeDataConverter();
  try {
    return await TroupeClient.connect({
      dataConverter,
      address: settings.address,
      namespace: settings.namespace,
      taskQueue: settings.taskQueue,
      connectTimeout: '5s',
      ...(tls ? { tls } : {}),
      ...(settings.apiKey ? { apiKey: settings.apiKey } : {}),
    });
  } catch (err) {
    throw unreachable(settings, err);
  }
}

/** The worker's connection (the native one the Worker needs). */
export async function connectWorker(settings: ConnectionSettings): Promise<NativeConnection> {
  const { NativeConnection } = await import('@temporalio/worker');
  const tls = tlsConfig(settings);
  try {
    return await NativeConnection.connect({
      address: settings.address,
      ...(tls ? { tls } : {}),
      ...(settings.apiKey ? { apiKey: settings.apiKey } : {}),
    });
  } catch (err) {
    throw unreachable(settings, err);
  }
}
