import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import type { RunUsage } from '../backends/job-usage';
import type { TroupeMetrics } from './troupe-metrics';

/**
 * The worker's HTTP endpoint: `/metrics` in Prometheus's text format (Troupe's metrics, then the
 * Temporal SDK's own, which the SDK serves on a loopback port of its own and this endpoint
 * relays, so one scrape target has both), and `/v1/runs/RUN/usage[?group=G]`: the samples of
 * that run's jobs this worker holds (what `troupe metrics` shows). Figures only, no job output.
 */

/** `HOST:PORT` → its parts; a bare port means loopback. */
export function parseListenAddress(text: string): { host: string; port: number } {
  const match = /^(?:\[?([^\]]*?)\]?:)?(\d{1,5})$/.exec(text.trim());
  const port = Number(match?.[2]);
  if (!match || !Number.isInteger(port) || port > 65535) throw new Error(`a metrics address is HOST:PORT (e.g. 127.0.0.1:9464), not ${JSON.stringify(text)}`);
  return { host: match[1] || '127.0.0.1', port };
}

export interface MetricsServerOptions {
  metrics: TroupeMetrics;
  host: string;
  port: number;
  /** Where the SDK's Prometheus exporter listens (`http://127.0.0.1:PORT/metrics`), if it does. */
  sdkMetricsUrl?: string | null;
  /** The worker's name in answers (default host and pid). */
  worker?: string;
}

export interface MetricsServer {
  url: string;
  close(): Promise<void>;
}

const RUN_USAGE_PATH = /^\/v1\/runs\/([A-Za-z0-9][A-Za-z0-9._-]{0,127})\/usage$/;

async function sdkMetrics(url: string): Promise<string> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
    return res.ok ? await res.text() : '';
  } catch {
    // The SDK's figures are missing from this scrape; Troupe's are still good.
    return '';
  }
}

export async function startMetricsServer(opts: MetricsServerOptions): Promise<MetricsServer> {
  const worker = opts.worker ?? `${hostname()}:${process.pid}`;
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://metrics');
    const reply = (status: number, type: string, body: string) => {
      res.writeHead(status, { 'content-type': type }).end(body);
    };
    if (req.method !== 'GET') return reply(405, 'text/plain', 'GET only\n');
    if (url.pathname === '/metrics') {
      void Promise.all([opts.metrics.registry.metrics(), opts.sdkMetricsUrl ? sdkMetrics(opts.sdkMetricsUrl) : ''])
        .then(([ours, sdk]) => reply(200, opts.metrics.registry.contentType, sdk ? `${ours}\n${sdk}` : ours))
        .catch((err: unknown) => reply(500, 'text/plain', `metrics failed: ${err instanceof Error ? err.message : String(err)}\n`));
      return;
    }
    const run = RUN_USAGE_PATH.exec(url.pathname)?.[1];
    if (run) {
      const group = url.searchParams.get('group') ?? undefined;
      const body: RunUsage = { run_name: run, worker, jobs: opts.metrics.usage.series(run, group) };
      return reply(200, 'application/json', JSON.stringify(body));
    }
    return reply(404, 'text/plain', 'not found: /metrics or /v1/runs/RUN/usage\n');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  opts.metrics.served = true;
  return {
    url: `http://${host}:${port}`,
    close: () => {
      opts.metrics.served = false;
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
