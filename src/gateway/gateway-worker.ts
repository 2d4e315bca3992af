import { ToWorkerSchema, WORKER_CONFIG_ENV, WorkerConfigSchema, type ToPrimary } from './cluster-messages';
import { listenDataPlane, type DataPlaneServer } from './gateway';
import { GatewayMetrics } from './gateway-metrics';
import { GatewayServices } from './gateway-services';
import type { RateVerdict } from './rate-limit';

/**
 * One data-plane process of a clustered gateway (`troupe gateway --workers N`): it serves requests from
 * the tables its primary sends, and answers the primary's questions (in-flight counts, metrics). Rate
 * limits are checked with the primary, which holds the buckets. It stops when the primary says so or
 * goes away; a signal to the process group is the primary's to act on.
 */
export async function runGatewayWorker(): Promise<void> {
  const config = WorkerConfigSchema.parse(JSON.parse(process.env[WORKER_CONFIG_ENV] ?? 'null'));
  const services = new GatewayServices({ connectTimeoutMs: config.connectTimeoutMs, tunnels: config.tunnels });
  const metrics = new GatewayMetrics((key) => services.inflightOf(key));
  const send = (message: ToPrimary) => {
    if (process.connected) process.send?.(message);
  };
  const rates = new Map<number, { resolve: (v: RateVerdict) => void; reject: (e: Error) => void }>();
  let nextRate = 0;
  const sharedRates = (run: string, path: string, key: string) =>
    new Promise<RateVerdict>((resolve, reject) => {
      if (!process.connected) return reject(new Error('the primary is gone'));
      const id = nextRate;
      nextRate = (nextRate + 1) % Number.MAX_SAFE_INTEGER;
      rates.set(id, { resolve, reject });
      send({ type: 'rate', id, run, path, key });
    });
  let server: DataPlaneServer | null = null;
  let stopping = false;
  const stop = async (graceMs: number) => {
    if (stopping) return;
    stopping = true;
    for (const { reject } of rates.values()) reject(new Error('the gateway is stopping'));
    rates.clear();
    await server?.close(graceMs);
    await services.close();
    process.exit(0);
  };
  const handle = async (raw: unknown): Promise<void> => {
    const parsed = ToWorkerSchema.safeParse(raw);
    if (!parsed.success) {
      process.stderr.write(`gateway worker ${process.pid}: a message it does not know, ignored: ${parsed.error.message}\n`);
      return;
    }
    const m = parsed.data;
    switch (m.type) {
      case 'tables':
        for (const table of m.tables) services.put(table);
        server = await listenDataPlane(services, metrics, { host: config.host, port: config.port, domain: config.domain, sharedRates });
        send({ type: 'ack', id: m.id });
        send({ type: 'listening', url: server.url });
        return;
      case 'put':
        services.put(m.table);
        return send({ type: 'ack', id: m.id });
      case 'delete':
        services.delete(m.run);
        return send({ type: 'ack', id: m.id });
      case 'inflight':
        return send({ type: 'inflight', id: m.id, rows: services.inflightRows(m.run) });
      case 'figures':
        return send({ type: 'figures', id: m.id, part: services.figuresPart(m.run, m.windowS, Date.now()) });
      case 'metrics':
        return send({ type: 'metrics', id: m.id, metrics: await metrics.registry.getMetricsAsJSON() });
      case 'probes':
        return services.setProbesFailing(m.run, m.failing);
      case 'rate': {
        const waiting = rates.get(m.id);
        rates.delete(m.id);
        return waiting?.resolve(m.allowed ? { allowed: true } : { allowed: false, retryAfterSeconds: m.retryAfterSeconds });
      }
      case 'close':
        return stop(m.graceMs);
    }
  };
  process.on('message', (raw: unknown) => {
    handle(raw).catch((err: unknown) => {
      process.stderr.write(`gateway worker ${process.pid}: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exit(1);
    });
  });
  process.on('disconnect', () => void stop(30_000));
  process.on('SIGINT', () => undefined);
  process.on('SIGTERM', () => undefined);
  send({ type: 'started' });
}
