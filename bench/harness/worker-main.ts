/**
 * A Troupe worker in its own process, for the benches: SIMULATED backends only, configured by the
 * JSON in TROUPE_BENCH_WORKER (see WorkerConfigSchema). Prints "ready" once polling; SIGTERM stops it.
 */
import { NativeConnection, Worker } from '@temporalio/worker';
import { createActivities, type BackendRegistry } from '../../activities';
import { DEFAULT_MAX_ACTIVITIES } from '../../src/worker/create-worker';
import { troupeDataConverter } from '../../src/codec/data-converter';
import { SimulatedBackend } from '../../src/backends/simulated/simulated-backend';
import { SharedSimulatedBackend } from './shared-simulated-backend';
import { quietRuntime } from './temporal-env';
import { WorkerConfigSchema } from './worker-config';
import { metricsSinks } from '../../src/worker/metrics-sinks';
import { workerMetrics } from '../../src/metrics/troupe-metrics';

const config = WorkerConfigSchema.parse(JSON.parse(process.env.TROUPE_BENCH_WORKER ?? '{}'));
quietRuntime();
const backends: BackendRegistry = {
  simulated:
    config.backend.kind === 'shared-simulated'
      ? new SharedSimulatedBackend(config.backend.dir, config.backend.job_duration_ms)
      : new SimulatedBackend({ jobDurationMs: config.backend.job_duration_ms, groupProvisioning: true }),
};
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
