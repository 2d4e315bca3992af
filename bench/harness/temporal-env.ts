import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, Worker, bundleWorkflowCode, type WorkerOptions } from '@temporalio/worker';
import { createActivities, type BackendRegistry } from '../../activities';
import { defaultDevServerOptions, startDevServer, stopDevServer } from '../../src/devserver/dev-server';
import { quietBundler, workflowsPath } from '../../src/worker/create-worker';
import { failureConverterPath, troupeDataConverter } from '../../src/codec/data-converter';
import { freePort } from '../../test/helpers/free-port';
import { childrenOf, cpuSeconds, reapedChildrenCpuSeconds } from './cpu';
import { metricsSinks } from '../../src/worker/metrics-sinks';
import { workerMetrics } from '../../src/metrics/troupe-metrics';

/**
 * A bench's Temporal: its own dev server on free ports (in-memory), or the deployment that
 * BENCH_TEMPORAL_ADDRESS names (scripts/deploy-local.sh's; BENCH_TEMPORAL_DEPLOY_DIR is its state
 * dir, to read the CPU of its services and of PostgreSQL). Also a client, bundled workflows, workers.
 */

let runtimeInstalled = false;

/** Workers log warnings only; must run before the first connection. */
export function quietRuntime(): void {
  if (runtimeInstalled) return;
  Runtime.install({ logger: new DefaultLogger('WARN') });
  runtimeInstalled = true;
}

export interface BenchTemporal {
  address: string;
  /** What serves it, for the benches' output: "dev server" or "deployment (…)". */
  kind: string;
  /** CPU seconds the Temporal server (and its database) has used so far. */
  serverCpuSeconds(): number;
  client: Client;
  /** Troupe's workflows, bundled once; also written to `bundlePath` for worker processes. */
  bundleCode: string;
  bundlePath: string;
  stateDir: string;
  close(): Promise<void>;
}

export async function startBenchTemporal(label: string): Promise<BenchTemporal> {
  quietRuntime();
  const stateDir = mkdtempSync(join(tmpdir(), `troupe-bench-${label}-`));
  const external = process.env.BENCH_TEMPORAL_ADDRESS;
  if (external) return connectBenchTemporal(external, stateDir);
  // BENCH_SERVER_DEFAULTS=1: the dev server as it comes, without Troupe's latency settings.
  const tuning = process.env.BENCH_SERVER_DEFAULTS !== '1';
  const opts = defaultDevServerOptions({ stateDir, port: await freePort(), uiPort: await freePort(), dbFile: null, tuning });
  const server = await startDevServer(opts);
  // A bench stopped with Ctrl-C or SIGTERM must not leave its dev server behind.
  const killServer = () => {
    try {
      process.kill(server.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  };
  const onSignal = (signal: NodeJS.Signals) => {
    killServer();
    process.kill(process.pid, signal);
  };
  process.once('exit', killServer);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const { connection, code, bundlePath } = await connectAndBundle(server.address, stateDir);
  return {
    address: server.address,
    kind: 'dev server',
    serverCpuSeconds: () => cpuSeconds(server.pid),
    client: new Client({ connection, dataConverter: troupeDataConverter() }),
    bundleCode: code,
    bundlePath,
    stateDir,
    close: async () => {
      process.off('exit', killServer);
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      await connection.close();
      await stopDevServer(opts);
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}

async function connectAndBundle(address: string, stateDir: string) {
  // The benches read whole histories: a page of a 4,096-node run's is larger than gRPC's default 4 MB.
  const connection = await Connection.connect({ address, channelArgs: { 'grpc.max_receive_message_length': 64 * 1024 * 1024 } });
  const { code } = await bundleWorkflowCode({ workflowsPath, failureConverterPath, logger: quietBundler });
  const bundlePath = join(stateDir, 'workflow-bundle.js');
  writeFileSync(bundlePath, code);
  return { connection, code, bundlePath };
}

/** The pids of a scripts/deploy-local.sh deployment: its Temporal services, PostgreSQL and its backends. */
function deploymentPids(deployDir: string): number[] {
  const services = ['frontend', 'history', 'matching', 'worker'].map((s) => Number(readFileSync(join(deployDir, `${s}.pid`), 'utf8').trim()));
  const pgdata = readFileSync(join(deployDir, 'pgdata.path'), 'utf8').trim();
  const postmaster = Number(readFileSync(join(pgdata, 'postmaster.pid'), 'utf8').split('\n')[0]);
  return [...services, postmaster, ...childrenOf(postmaster)];
}

/** CPU seconds of a deployment so far, its ended PostgreSQL backends included (the postmaster reaped them). */
function deploymentCpuSeconds(deployDir: string): number {
  const pids = deploymentPids(deployDir);
  const live = pids.reduce((sum, pid) => sum + (cpuSeconds(pid) || 0), 0);
  return live + (reapedChildrenCpuSeconds(pids[4] ?? 0) || 0);
}

/** A Temporal service the bench did not start: connects to it and leaves it running at the end. */
async function connectBenchTemporal(address: string, stateDir: string): Promise<BenchTemporal> {
  const deployDir = process.env.BENCH_TEMPORAL_DEPLOY_DIR;
  const { connection, code, bundlePath } = await connectAndBundle(address, stateDir);
  return {
    address,
    kind: `deployment at ${address}`,
    // PostgreSQL starts a backend per connection: its children are read again each time.
    serverCpuSeconds: () => (deployDir ? deploymentCpuSeconds(deployDir) : Number.NaN),
    client: new Client({ connection, dataConverter: troupeDataConverter() }),
    bundleCode: code,
    bundlePath,
    stateDir,
    close: async () => {
      await connection.close();
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}

export type ExtraWorkerOptions = Pick<
  WorkerOptions,
  'maxConcurrentActivityTaskExecutions' | 'maxConcurrentWorkflowTaskExecutions' | 'maxCachedWorkflows'
>;

/** A Troupe worker in this process (the same workflows and activities as `troupe worker`). */
export async function startInProcessWorker(env: BenchTemporal, taskQueue: string, backends: BackendRegistry, extra: ExtraWorkerOptions = {}) {
  const connection = await NativeConnection.connect({ address: env.address });
  const worker = await Worker.create({
    connection,
    taskQueue,
    workflowBundle: { code: env.bundleCode },
    dataConverter: troupeDataConverter(),
    activities: createActivities(backends),
    sinks: metricsSinks(workerMetrics),
    ...extra,
  });
  const running = worker.run();
  return {
    worker,
    stop: async () => {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await running;
      await connection.close();
    },
  };
}
