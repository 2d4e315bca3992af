import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { BackendRegistry } from '../../../activities/types';
import type { Backend } from '../../backends/backend';
import { LOCAL_BACKEND } from '../../backends/backend-names';
import { isolationNotice } from '../../backends/local/isolation-mode';
import { parseSubnet } from '../../backends/local/address-pool';
import { closeAllSshSessions } from '../../backends/ssh/connect';
import { projectRoot } from '../../devserver/dev-server';
import { createRunReaper, createTroupeWorker, defaultBackends, runWorkerWithReaper, DEFAULT_BACKEND_NAMES, DEFAULT_MAX_ACTIVITIES } from '../../worker/create-worker';
import { troupeDataConverter } from '../../codec/data-converter';
import { CliError, type Command } from '../command';
import { GATEWAY_TOKEN_ENV, GATEWAYS_ENV, workerGateways } from '../gateway-admin';
import { connectionHelp, connectionOptions, connectionSettings, connectWorker, describeConnection } from '../connection';
import { parseOrUsage, renderUsage } from '../render/usage';
import { Client } from '@temporalio/client';
import { parseListenAddress } from '../../metrics/metrics-server';
import { installSdkMetrics, serveWorkerMetrics } from '../../worker/worker-metrics';
import { startTracing } from '../../tracing/tracing';

const options = {
  backend: { type: 'string', multiple: true },
  'state-dir': { type: 'string' },
  identity: { type: 'string' },
  'max-activities': { type: 'string' },
  metrics: { type: 'string' },
  'local-subnet': { type: 'string' },
  'local-capacity': { type: 'string' },
  gateway: { type: 'string', multiple: true },
  'gateway-token-file': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
  ...connectionOptions,
} as const;

const help = renderUsage(
  'troupe worker [--backend NAME]... [--state-dir DIR] [--gateway ADMIN_URL]... [--gateway-token-file FILE]',
  [
    "Runs a Troupe worker: it executes runs' workflows and drives the backends that provision nodes.",
    'Start as many as you like, on as many machines, on one task queue. Ctrl-C (or SIGTERM) shuts it',
    'down gracefully; runs go on with the other workers, or with this one when it comes back.',
    'Every worker also reaps: what a run closed without its teardown (terminated in Temporal, timed',
    'out) left on its backends is torn down within a minute, one "reaper:" line per run on stderr.',
  ].join('\n'),
  [
    ['--backend NAME', 'only these backends (repeatable; default: all the worker has, at least local)'],
    ['--state-dir DIR', "backends' state on this machine (env TROUPE_STATE_DIR, default <project>/.troupe/state)"],
    ['--identity ID', 'how the Web UI names this worker (default host and pid)'],
    ['--max-activities N', `activities at once (default ${DEFAULT_MAX_ACTIVITIES}): each batch of running jobs holds one`],
    ['--metrics HOST:PORT', 'serve Prometheus metrics (Troupe\'s and the Temporal SDK\'s) and job usage here (env TROUPE_METRICS_ADDRESS, e.g. 127.0.0.1:9464)'],
    ['--local-subnet CIDR', "the local fleet's addresses (env TROUPE_LOCAL_SUBNET; default a /22 of 10.213.0.0/16 or 127.213.0.0/16: 1,022 nodes)"],
    ['--local-capacity N', "the local fleet's most nodes at once (env TROUPE_LOCAL_CAPACITY; default the whole subnet)"],
    ['--gateway ADMIN_URL', `a gateway's admin API (troupe gateway --admin) that services' routing tables are pushed to (repeatable; env ${GATEWAYS_ENV}, comma-separated)`],
    ['--gateway-token-file FILE', `the gateways' admin token (or env ${GATEWAY_TOKEN_ENV}, as troupe gateway reads it)`],
    ...connectionHelp,
  ],
);

function chooseBackends(all: BackendRegistry, wanted: string[] | undefined): BackendRegistry {
  if (!wanted || wanted.length === 0) return all;
  const chosen: Record<string, Backend> = {};
  for (const name of wanted) {
    const backend = all[name];
    if (!backend) throw new CliError(`unknown backend "${name}" (this worker has: ${Object.keys(all).join(', ')})`, 2);
    chosen[name] = backend;
  }
  return chosen;
}

export const command: Command = async (args) => {
  const { values } = parseOrUsage(() => parseArgs({ args, options }), help);
  if (values.help) {
    process.stdout.write(`${help}\n`);
    return 0;
  }
  const settings = connectionSettings(values);
  const stateDir = values['state-dir'] ?? process.env.TROUPE_STATE_DIR ?? join(projectRoot, '.troupe', 'state');
  for (const name of values.backend ?? []) {
    if (!(DEFAULT_BACKEND_NAMES as readonly string[]).includes(name)) {
      throw new CliError(`unknown backend "${name}" (this worker has: ${DEFAULT_BACKEND_NAMES.join(', ')})`, 2);
    }
  }
  const maxActivities = values['max-activities'] === undefined ? undefined : Number(values['max-activities']);
  if (maxActivities !== undefined && (!Number.isInteger(maxActivities) || maxActivities < 10)) {
    throw new CliError(`--max-activities must be a whole number of at least 10 (got "${values['max-activities']}")`, 2);
  }
  const metricsAddress = values.metrics ?? process.env.TROUPE_METRICS_ADDRESS;
  let listen: { host: string; port: number } | null = null;
  try {
    listen = metricsAddress ? parseListenAddress(metricsAddress) : null;
  } catch (err) {
    throw new CliError(`--metrics: ${(err as Error).message}`, 2);
  }
  // The SDK's exporter is set up before the connection (Runtime.install's rule).
  const sdkMetricsUrl = listen ? await installSdkMetrics() : null;
  const localSubnet = values['local-subnet'] ?? process.env.TROUPE_LOCAL_SUBNET;
  if (localSubnet !== undefined) {
    try {
      parseSubnet(localSubnet);
    } catch (err) {
      throw new CliError(`--local-subnet / TROUPE_LOCAL_SUBNET: ${err instanceof Error ? err.message : String(err)}`, 2);
    }
  }
  const capacityText = values['local-capacity'] ?? process.env.TROUPE_LOCAL_CAPACITY;
  const localCapacity = capacityText === undefined ? undefined : Number(capacityText);
  if (capacityText !== undefined && !(/^\d+$/.test(capacityText) && Number.isSafeInteger(localCapacity))) {
    throw new CliError(`--local-capacity / TROUPE_LOCAL_CAPACITY must be a whole number ≥ 0 (got "${capacityText}")`, 2);
  }
  const gateways = workerGateways(values.gateway, values['gateway-token-file']);
  const dataConverter = troupeDataConverter();
  // OTEL_EXPORTER_OTLP_ENDPOINT: the runs' workflows, activities and job starts traced.
  const tracing = startTracing('troupe-worker');
  const connection = await connectWorker(settings);
  try {
    const temporal = { connection, namespace: settings.namespace, taskQueue: settings.taskQueue, dataConverter };
    const local = { ...(localSubnet !== undefined ? { localSubnet } : {}), ...(localCapacity !== undefined ? { localCapacity } : {}) };
    const backends = chooseBackends(defaultBackends({ stateDir, temporal, ...local }), values.backend);
    const worker = await createTroupeWorker({
      connection,
      namespace: settings.namespace,
      taskQueue: settings.taskQueue,
      backends,
      gateways,
      dataConverter,
      tracing,
      ...(values.identity ? { identity: values.identity } : {}),
      ...(maxActivities !== undefined ? { maxConcurrentActivities: maxActivities } : {}),
    });
    const metricsServer = listen ? await serveWorkerMetrics(listen, new Client({ connection, namespace: settings.namespace }), sdkMetricsUrl, values.identity) : null;
    let stopping = false;
    const shutdown = (signal: NodeJS.Signals) => {
      if (stopping) {
        process.stderr.write(`${signal} again: exiting without waiting for running tasks\n`);
        process.exit(130);
      }
      stopping = true;
      process.stderr.write(`${signal}: shutting down once running tasks finish (again to exit now)\n`);
      worker.shutdown();
    };
    process.on('SIGINT', shutdown);
    process.on('SIGTERM', shutdown);
    process.stderr.write(
      `Troupe worker on ${describeConnection(settings)}, backends ${Object.keys(backends).join(', ')}; state in ${stateDir}; gateways ${gateways.map((g) => g.url).join(', ') || 'none'}\n`,
    );
    const notice = LOCAL_BACKEND in backends ? isolationNotice('Warning: the local fleet') : null;
    if (notice) process.stderr.write(`${notice}\n`);
    const reaper = createRunReaper({ connection, namespace: settings.namespace, backends, dataConverter });
    if (metricsServer) process.stderr.write(`Metrics on ${metricsServer.url}/metrics\n`);
    try {
      await runWorkerWithReaper(worker, reaper);
    } finally {
      process.off('SIGINT', shutdown);
      process.off('SIGTERM', shutdown);
      await metricsServer?.close();
    }
    // Pooled SSH connections to fleet hosts would keep the process alive until they idle out.
    await closeAllSshSessions();
    process.stderr.write('Worker stopped.\n');
    return 0;
  } finally {
    await connection.close();
    await tracing?.shutdown();
  }
};
