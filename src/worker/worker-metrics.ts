import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { Runtime } from '@temporalio/worker';
import type { Client } from '@temporalio/client';
import { startMetricsServer, type MetricsServer } from '../metrics/metrics-server';
import { workerMetrics } from '../metrics/troupe-metrics';
import { runStatusCounter } from './run-status-counter';

/** A port free on loopback now (for the SDK's exporter, which only this process scrapes). */
async function freeLoopbackPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * Turns on the Temporal SDK's own metrics (its Prometheus exporter, named by Prometheus's
 * conventions: `_total` counters, seconds) on a loopback port; returns the URL the worker's
 * endpoint relays. Must run before any connection exists (Runtime.install's rule).
 */
export async function installSdkMetrics(): Promise<string> {
  const port = await freeLoopbackPort();
  Runtime.install({
    telemetryOptions: {
      metrics: { prometheus: { bindAddress: `127.0.0.1:${port}`, countersTotalSuffix: true, unitSuffix: true, useSecondsForDurations: true } },
    },
  });
  return `http://127.0.0.1:${port}/metrics`;
}

/** Serves the worker's metrics at `host:port`; runs by status are counted through `client`. */
export async function serveWorkerMetrics(listen: { host: string; port: number }, client: Client, sdkMetricsUrl: string | null, worker?: string): Promise<MetricsServer> {
  workerMetrics.countRunsWith(runStatusCounter(client));
  return await startMetricsServer({ metrics: workerMetrics, ...listen, sdkMetricsUrl, ...(worker ? { worker } : {}) });
}
