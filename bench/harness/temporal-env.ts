import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, Worker, bundleWorkflowCode, type WorkerOptions } from '@temporalio/worker';
import { createActivities, type BackendRegistry } from '../../activities';
import { defaultDevServerOptions, startDevServer, stopDevServer } from '../../src/devserver/dev-server';
import { quietBundler, workflowsPath } from '../../src/worker/create-worker';
import { freePort } from '../../test/helpers/free-port';

/** A bench's own Temporal: a dev server on free ports (in-memory), a client, bundled workflows, workers. */

let runtimeInstalled = false;

/** Workers log warnings only; must run before the first connection. */
export function quietRuntime(): void {
  if (runtimeInstalled) return;
  Runtime.install({ logger: new DefaultLogger('WARN') });
  runtimeInstalled = true;
}

export interface BenchTemporal {
  address: string;
  /** The dev server's pid (to read its CPU time). */
  serverPid: number;
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
  // The benches read whole histories: a page of a 4,096-node run's is larger than gRPC's default 4 MB.
  const connection = await Connection.connect({ address: server.address, channelArgs: { 'grpc.max_receive_message_length': 64 * 1024 * 1024 } });
  const { code } = await bundleWorkflowCode({ workflowsPath, logger: quietBundler });
  const bundlePath = join(stateDir, 'workflow-bundle.js');
  writeFileSync(bundlePath, code);
  return {
    address: server.address,
    serverPid: server.pid,
    client: new Client({ connection }),
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
    activities: createActivities(backends),
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
