import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort } from './free-port';
import { startReadyProcess } from './ready-process';

/** Debian's Prometheus, installed by `scripts/setup.sh --test`. */
export const PROMETHEUS = '/usr/bin/prometheus';
export const prometheusInstalled = (): boolean => existsSync(PROMETHEUS);

export interface PromSample {
  metric: Record<string, string>;
  value: [number, string];
}

export interface Prometheus {
  url: string;
  /** An instant query through the HTTP API; throws unless Prometheus answers `success`. */
  query(promql: string): Promise<PromSample[]>;
  stop(): Promise<void>;
}

/**
 * A real Prometheus on a free loopback port scraping `targets` (HOST:PORT) every second, its
 * configuration and database in `dir`; resolved once it serves queries.
 */
export async function startPrometheus(dir: string, targets: string[]): Promise<Prometheus> {
  const port = await freePort();
  const config = join(dir, 'prometheus.yml');
  const list = targets.map((t) => `'${t}'`).join(', ');
  writeFileSync(config, ['global:', '  scrape_interval: 1s', 'scrape_configs:', '  - job_name: troupe-worker', '    static_configs:', `      - targets: [${list}]`, ''].join('\n'));
  const server = await startReadyProcess('prometheus', PROMETHEUS, [`--config.file=${config}`, `--storage.tsdb.path=${join(dir, 'tsdb')}`, `--web.listen-address=127.0.0.1:${port}`], /Server is ready to receive web requests/);
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    async query(promql) {
      const res = await fetch(`${url}/api/v1/query?query=${encodeURIComponent(promql)}`);
      const body = (await res.json()) as { status: string; data: { result: PromSample[] } };
      if (body.status !== 'success') throw new Error(`prometheus: ${JSON.stringify(body)}`);
      return body.data.result;
    },
    stop: () => server.stop(),
  };
}
