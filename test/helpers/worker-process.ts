/**
 * A Troupe worker in its own process, so a test can kill -9 it. Configured by environment:
 * TEMPORAL_ADDRESS, TROUPE_TASK_QUEUE, TROUPE_LOCAL_STATE_DIR, and TEST_PROVISION_DELAY_MS /
 * TEST_ONE_JOB_PER_CALL to make provisioning slow enough to be interrupted, TEST_LOCAL_CAPACITY to
 * give the local fleet fewer nodes, TEST_REAPER_INTERVAL_MS for its reaper's passes,
 * TEST_LOCAL_NETWORK=loopback for loopback addresses (no namespaces), and TROUPE_GATEWAYS with
 * TROUPE_GATEWAY_ADMIN_TOKEN for the gateways services are pushed to (as `troupe worker` reads them).
 */
import { DefaultLogger, NativeConnection, Runtime, makeTelemetryFilterString } from '@temporalio/worker';
import { LocalBackend } from '../../src/backends/local/local-backend';
import { createRunReaper, createTroupeWorker, runWorkerWithReaper } from '../../src/worker/create-worker';
import { RecordingBackend } from './recording-backend';
import { workerGateways } from '../../src/cli/gateway-admin';

const required = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

// Quiet, like the in-process test workers: the test reads the run's state, not the worker's log.
Runtime.install({
  logger: new DefaultLogger('ERROR'),
  telemetryOptions: { logging: { filter: makeTelemetryFilterString({ core: 'ERROR', other: 'ERROR' }) } },
});

const capacity = process.env.TEST_LOCAL_CAPACITY;
const network = process.env.TEST_LOCAL_NETWORK === 'loopback' ? 'loopback' : 'auto';
const local = new LocalBackend({ stateDir: required('TROUPE_LOCAL_STATE_DIR'), network, ...(capacity ? { capacity: Number(capacity) } : {}) });
const backend = new RecordingBackend(local, {
  provisionDelayMs: Number(process.env.TEST_PROVISION_DELAY_MS ?? 0),
  groupProvisioning: process.env.TEST_ONE_JOB_PER_CALL === '1' ? false : undefined,
});
const connection = await NativeConnection.connect({ address: required('TEMPORAL_ADDRESS') });
const worker = await createTroupeWorker({
  connection,
  namespace: 'default',
  taskQueue: required('TROUPE_TASK_QUEUE'),
  backends: { local: backend },
  gateways: workerGateways(undefined, undefined),
});
process.once('SIGTERM', () => worker.shutdown());
console.log('worker ready');
// TEST_REAPER_INTERVAL_MS: how often its reaper looks for closed runs (default: the worker's).
const reaperInterval = Number(process.env.TEST_REAPER_INTERVAL_MS ?? 0);
const reaper = createRunReaper({ connection, namespace: 'default', backends: { local }, ...(reaperInterval ? { intervalMs: reaperInterval } : {}), log: (line) => console.log(line) });
await runWorkerWithReaper(worker, reaper);
await connection.close();
