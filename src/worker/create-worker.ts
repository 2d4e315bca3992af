import { hostname } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { DataConverter } from '@temporalio/common';
import type { NativeConnection, WorkflowBundle } from '@temporalio/worker';
import { Worker, bundleWorkflowCode } from '@temporalio/worker';
import { Client, type ConnectionLike } from '@temporalio/client';
import { createActivities, type BackendRegistry } from '../../activities';
import { LOCAL_BACKEND, SSH_BACKEND, workerIdentity } from '../backends/backend-names';
import type { Backend } from '../backends/backend';
import { LocalBackend } from '../backends/local/local-backend';
import { SshBackend } from '../fleet/ssh-backend';
import { pidsMaxFrom } from '../backends/cgroup-limits';
import { FleetClient } from '../fleet/fleet-client';
import { failureConverterPath, troupeDataConverter } from '../codec/data-converter';
import { RunReaper } from './run-reaper';
import { workerMetrics } from '../metrics/troupe-metrics';
import { metricsSinks } from './metrics-sinks';
import { OpenTelemetryPlugin } from '@temporalio/interceptors-opentelemetry';
import { tracingWorkflowModules, type Tracing } from '../tracing/tracing';
import { raiseFileLimit } from './file-limit';
import type { GatewayAdmin } from '../gateway/admin-client';

export const workflowsPath = fileURLToPath(new URL('../../workflows/index.ts', import.meta.url));

export interface TroupeWorkerOptions {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  backends: BackendRegistry;
  /** A pre-built bundle (tests bundle once per file); bundled from source when absent. */
  workflowBundle?: WorkflowBundle;
  /** An identity shown in the Web UI (default: pid and host); ` backends=…` is added to it (workerIdentity). */
  identity?: string;
  /** Activities at once (default DEFAULT_MAX_ACTIVITIES). */
  maxConcurrentActivities?: number;
  /** Default: troupeDataConverter() with the key file of this process (TROUPE_CODEC_KEY_FILE). */
  dataConverter?: DataConverter;
  /** The gateways services' routing tables are pushed to (`troupe worker --gateway`); none: a service cannot start here. */
  gateways?: readonly GatewayAdmin[];
  /** Traces (startTracing): workflows and activities traced, the bundle with the tracing interceptors. */
  tracing?: Tracing | null;
}

/**
 * Every batch of running jobs holds one activity for as long as its jobs run (it mostly sleeps
 * between checks), so a worker allows far more than the SDK's default of 100.
 */
export const DEFAULT_MAX_ACTIVITIES = 2_000;

/** webpack's statistics are noise to a worker's user; its warnings and errors are not. */
export const quietBundler = {
  log: () => undefined,
  trace: () => undefined,
  debug: () => undefined,
  info: () => undefined,
  warn: (message: string, meta?: Record<string, unknown>) => console.warn(message, meta ?? ''),
  error: (message: string, meta?: Record<string, unknown>) => console.error(message, meta ?? ''),
};

/** A worker that runs Troupe's workflows and drives the given backends. */
export async function createTroupeWorker(opts: TroupeWorkerOptions): Promise<Worker> {
  await raiseFileLimit();
  return await Worker.create({
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue,
    workflowBundle:
      opts.workflowBundle ??
      (await bundleWorkflowCode({ workflowsPath, failureConverterPath, logger: quietBundler, ...(opts.tracing ? { workflowInterceptorModules: tracingWorkflowModules() } : {}) })),
    ...(opts.tracing ? { plugins: [new OpenTelemetryPlugin({ resource: opts.tracing.resource, spanProcessor: opts.tracing.spanProcessor })] } : {}),
    dataConverter: opts.dataConverter ?? troupeDataConverter(),
    activities: createActivities(opts.backends, { gateways: opts.gateways ?? [] }),
    // Runs tell the worker's metrics of status changes, launches, restarts and resizes (never in history).
    sinks: metricsSinks(workerMetrics),
    maxConcurrentActivityTaskExecutions: opts.maxConcurrentActivities ?? DEFAULT_MAX_ACTIVITIES,
    identity: workerIdentity(opts.identity ?? `${process.pid}@${hostname()}`, Object.keys(opts.backends)),
  });
}

/**
 * The worker's reaper (run-reaper.ts): it tears down what runs closed without their teardown left
 * in these backends. Every worker runs one; `intervalMs` between passes.
 */
export function createRunReaper(opts: {
  connection: ConnectionLike;
  namespace: string;
  backends: BackendRegistry;
  dataConverter?: DataConverter;
  intervalMs?: number;
  log?: (line: string) => void;
}): RunReaper {
  const client = new Client({ connection: opts.connection, namespace: opts.namespace, dataConverter: opts.dataConverter ?? troupeDataConverter() });
  return new RunReaper({ client, backends: opts.backends, ...(opts.intervalMs ? { intervalMs: opts.intervalMs } : {}), ...(opts.log ? { log: opts.log } : {}) });
}

/** Runs the worker, with its reaper beside it, until the worker stops. */
export async function runWorkerWithReaper(worker: Worker, reaper: RunReaper): Promise<void> {
  reaper.start();
  try {
    await worker.run();
  } finally {
    await reaper.stop();
  }
}

/** The backends defaultBackends() makes (`ssh` needs the Temporal connection), so a CLI can check names before connecting. */
export const DEFAULT_BACKEND_NAMES = [LOCAL_BACKEND, SSH_BACKEND] as const;

export interface DefaultBackendsOptions {
  stateDir: string;
  /** The local fleet's addresses (`troupe worker --local-subnet`, TROUPE_LOCAL_SUBNET); default: a /22 per state directory. */
  localSubnet?: string;
  /** The local fleet's most nodes at once (`--local-capacity`, TROUPE_LOCAL_CAPACITY); default: the whole subnet. */
  localCapacity?: number;
  /** Where the fleets' workflows run: given, the worker also has `ssh` (SSH fleets, which it reaches through them). */
  temporal?: { connection: ConnectionLike; namespace: string; taskQueue: string; dataConverter?: DataConverter };
}

/** GPUs each local node pretends to have (TROUPE_LOCAL_GPUS, default 0): what a GPU group asks of the local fleet, e.g. for MPI slots. */
function localGpus(): number {
  const text = process.env.TROUPE_LOCAL_GPUS ?? '0';
  const n = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(n)) throw new Error(`TROUPE_LOCAL_GPUS must be a whole number ≥ 0, not ${JSON.stringify(text)}`);
  return n;
}

/** The backends a worker has: the local fleet (processes on this machine), and SSH fleets when it can reach their workflows. */
export function defaultBackends(opts: DefaultBackendsOptions): BackendRegistry {
  const backends: Record<string, Backend> = {
    [LOCAL_BACKEND]: new LocalBackend({
      stateDir: join(opts.stateDir, 'local'),
      network: 'auto',
      gpus: localGpus(),
      ...(opts.localSubnet !== undefined ? { subnet: opts.localSubnet } : {}),
      ...(opts.localCapacity !== undefined ? { capacity: opts.localCapacity } : {}),
    }),
  };
  if (opts.temporal) {
    const client = new Client({ connection: opts.temporal.connection, namespace: opts.temporal.namespace, dataConverter: opts.temporal.dataConverter ?? troupeDataConverter() });
    backends[SSH_BACKEND] = new SshBackend({ fleets: new FleetClient(client, { taskQueue: opts.temporal.taskQueue }), pidsMax: pidsMaxFrom(process.env, 'TROUPE_SSH_PIDS_MAX') });
  }
  return backends;
}
