/**
 * A Troupe worker in its own process, for the benches: a simulated backend, or the real local
 * fleet (as `local`), configured by the JSON in TROUPE_BENCH_WORKER (see WorkerConfigSchema).
 * Prints "ready" once polling; SIGTERM stops it.
 */
import { NativeConnection, Worker } from '@temporalio/worker';
import { createActivities, type BackendRegistry } from '../../activities';
import { DEFAULT_MAX_ACTIVITIES } from '../../src/worker/create-worker';
import { troupeDataConverter } from '../../src/codec/data-converter';
import { SimulatedBackend } from '../../src/backends/simulated/simulated-backend';
import { LocalBackend } from '../../src/backends/local/local-backend';
import { raiseFileLimit } from '../../src/worker/file-limit';
import { SharedSimulatedBackend } from './shared-simulated-backend';
import { quietRuntime } from './temporal-env';
import { WorkerConfigSchema } from './worker-config';
import { metricsSinks } from '../../src/worker/metrics-sinks';
import { workerMetrics } from '../../src/metrics/troupe-metrics';

const config = WorkerConfigSchema.parse(JSON.parse(process.env.TROUPE_BENCH_WORKER ?? '{}'));
quietRuntime();
const { backend } = config;
const backends: BackendRegistry =
  backend.kind === 'local'
    ? { local: new LocalBackend({ stateDir: backend.state_dir, network: backend.network, ...(backend.subnet ? { subnet: backend.subnet } : {}) }) }
    : {
        simulated:
          backend.kind === 'shared-simulated'
            ? new SharedSimulatedBackend(backend.dir, backend.job_duration_ms)
            : new SimulatedBackend({ jobDurationMs: backend.job_duration_ms, groupProvisioning: true }),
      };
await raiseFileLimit();
const connection = await NativeConnection.connect({ address: config.address });
const worker = await Worker.create({
  connection,
  taskQueue: config.task_queue,
  workflowBundle: { codePath: config.bundle_path },
  dataConverter: troupeDataConverter(),
  activities: createActivities(backends),
  sinks: metricsSinks(workerMetrics),
  maxConcurrentActivityTaskExecutions: config.max_concurrent_activities ?? DEFAULT_MAX_ACTIVITIES,
});
process.once('SIGTERM', () => worker.shutdown());
console.log('ready');
await worker.run();
await connection.close();
