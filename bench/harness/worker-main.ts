/**
 * A Troupe worker in its own process, for the benches: a simulated backend, or the real local
 * fleet (as `local`) with the gateways services are pushed to, configured by the JSON in
 * TROUPE_BENCH_WORKER (see WorkerConfigSchema).
 * Prints "ready" once polling; SIGTERM stops it.
 */
import { Client } from '@temporalio/client';
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
import { parseListenAddress } from '../../src/metrics/metrics-server';
import { installSdkMetrics, serveWorkerMetrics } from '../../src/worker/worker-metrics';

const config = WorkerConfigSchema.parse(JSON.parse(process.env.TROUPE_BENCH_WORKER ?? '{}'));
// With metrics the runtime is the one `troupe worker --metrics` installs (its exporter on), so not the quiet one.
const listen = config.metrics ? parseListenAddress(config.metrics) : null;
const sdkMetricsUrl = listen ? await installSdkMetrics() : null;
if (!listen) quietRuntime();
const { backend } = config;
const backends: BackendRegistry =
  backend.kind === 'local'
    ? {
        local: new LocalBackend({
          stateDir: backend.state_dir,
          network: backend.network,
          ...(backend.subnet ? { subnet: backend.subnet } : {}),
          ...(backend.gpus !== undefined ? { gpus: backend.gpus } : {}),
          ...(backend.release_grace_s !== undefined ? { releaseGraceSeconds: backend.release_grace_s } : {}),
        }),
      }
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
  activities: createActivities(backends, { gateways: config.gateways ?? [] }),
  sinks: metricsSinks(workerMetrics),
  maxConcurrentActivityTaskExecutions: config.max_concurrent_activities ?? DEFAULT_MAX_ACTIVITIES,
});
const metricsServer = listen ? await serveWorkerMetrics(listen, new Client({ connection }), sdkMetricsUrl) : null;
process.once('SIGTERM', () => worker.shutdown());
console.log('ready');
await worker.run();
await metricsServer?.close();
await connection.close();
