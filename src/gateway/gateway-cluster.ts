import cluster, { type Worker } from 'node:cluster';
import { fileURLToPath } from 'node:url';
import { AggregatorRegistry, type MetricObjectWithValues, type MetricValue } from 'prom-client';
import type { WorkerLink } from './admin-plane';
import { ToPrimarySchema, WORKER_CONFIG_ENV, type ToPrimary, type ToWorker, type WorkerConfig } from './cluster-messages';
import { probesOf, withAdminPlane, type GatewayOptions, type RunningGateway } from './gateway';
import { GatewayMetrics } from './gateway-metrics';
import { GatewayServices, type InflightRow } from './gateway-services';
import { GatewayStateWriter, readGatewayState } from './state-file';

/**
 * `troupe gateway --workers N`: the data plane served by N processes (node:cluster, connections handed
 * out in turn), because one event loop uses one core and the data plane's throughput is CPU per request
 * (BENCHMARKS.md §7). The primary keeps what must be one: the tables (its admin API, the generation
 * check, the state file), the rate limits' buckets (workers ask it, per request under a limit), and the
 * answers an operator or a drain reads — in-flight counts and metrics, added up over the workers. A table
 * pushed is answered once every worker serves it. A worker that dies is replaced, with the tables.
 * The primary probes the replicas after READY, once for the gateway, and tells every worker which
 * replicas its probes take out. What differs from one process: each worker picks the least loaded replica by its own in-flight counts,
 * and a dead worker's counters start again from 0.
 */

const WORKER_ENTRY = fileURLToPath(new URL('../../bin/troupe-gateway-worker.js', import.meta.url));
/** A worker that answers nothing in this time is taken for hung, and replaced. */
const ANSWER_MS = 10_000;

type Reply = Exclude<ToPrimary, { type: 'started' | 'listening' | 'rate' }>;
type Question = { type: 'put' | 'delete' | 'inflight' | 'metrics' | 'figures' | 'tables' } & ToWorker;

interface Member {
  worker: Worker;
  /** Said `started`: its message handler is in place. */
  started: boolean;
  listening: ((url: string) => void) | null;
}

export async function startGatewayCluster(options: GatewayOptions, workers: number): Promise<RunningGateway> {
  if (options.adminToken.length < 16) throw new Error('the admin token must be at least 16 characters');
  if (!Number.isInteger(workers) || workers < 2) throw new Error(`a clustered gateway has 2 workers or more, not ${workers}`);
  // The primary's services hold the tables and the rate limits; it forwards no request.
  // Its tunnels are its probes' (replicas behind a jump host).
  const services = new GatewayServices({ connectTimeoutMs: options.connectTimeoutMs ?? 3000, tunnels: options.tunnels });
  const metrics = new GatewayMetrics(() => 0);
  const members = new Map<number, Member>();
  const probes = probesOf(services, metrics, (run, urls) => {
    services.setProbesFailing(run, urls);
    for (const member of members.values()) if (member.started) member.worker.send({ type: 'probes', run, failing: [...urls] } satisfies ToWorker);
  });
  try {
    if (options.stateFile !== undefined) {
      for (const table of await readGatewayState(options.stateFile)) services.put(table);
    }
  } catch (err) {
    probes.close();
    throw err;
  }
  const state = options.stateFile !== undefined ? new GatewayStateWriter(options.stateFile) : null;
  const tunnels = options.tunnels && { identityFile: options.tunnels.identityFile, knownHostsFile: options.tunnels.knownHostsFile };
  const config: WorkerConfig = { host: options.listen.host, port: options.listen.port, domain: options.domain, connectTimeoutMs: options.connectTimeoutMs ?? 3000, ...(tunnels ? { tunnels } : {}) };
  cluster.setupPrimary({ exec: WORKER_ENTRY, args: [] });

  const waiting = new Map<number, { member: Member; resolve: (reply: Reply | null) => void; timer: NodeJS.Timeout }>();
  let nextId = 0;
  let closing = false;
  let closeGraceMs = 0;

  /** Asks one worker; null when it died or hung (then it is replaced, and its successor gets the tables). */
  const ask = (member: Member, build: (id: number) => Question): Promise<Reply | null> =>
    new Promise((resolve) => {
      const id = nextId;
      nextId = (nextId + 1) % Number.MAX_SAFE_INTEGER;
      const timer = setTimeout(() => {
        waiting.delete(id);
        resolve(null);
        member.worker.process.kill('SIGKILL');
      }, ANSWER_MS);
      waiting.set(id, { member, resolve, timer });
      member.worker.send(build(id));
    });
  const askAll = async (build: (id: number) => Question): Promise<Reply[]> => {
    const started = [...members.values()].filter((m) => m.started);
    return (await Promise.all(started.map((m) => ask(m, build)))).filter((r): r is Reply => r !== null);
  };

  const onMessage = (member: Member, raw: unknown) => {
    const parsed = ToPrimarySchema.safeParse(raw);
    if (!parsed.success) return;
    const m = parsed.data;
    if (m.type === 'started') {
      member.started = true;
      // A close sent before its handler was in place was lost: say it again.
      if (closing) return member.worker.send({ type: 'close', graceMs: closeGraceMs } satisfies ToWorker);
      // The tables as they are now; a change after this reaches it as a `put`/`delete`, in order.
      void ask(member, (id) => ({ type: 'tables', id, tables: services.tables() }));
      for (const { run, urls } of services.probesFailing()) member.worker.send({ type: 'probes', run, failing: urls } satisfies ToWorker);
      return;
    }
    if (m.type === 'listening') {
      member.listening?.(m.url);
      member.listening = null;
      return;
    }
    if (m.type === 'rate') {
      const served = services.get(m.run);
      const verdict = served ? served.limiter.check(m.path, () => m.key, Date.now()) : { allowed: true as const };
      member.worker.send({ type: 'rate', id: m.id, allowed: verdict.allowed, retryAfterSeconds: verdict.allowed ? 0 : verdict.retryAfterSeconds } satisfies ToWorker);
      return;
    }
    const pending = waiting.get(m.id);
    if (!pending || pending.member !== member) return;
    waiting.delete(m.id);
    clearTimeout(pending.timer);
    pending.resolve(m);
  };

  const fork = (): Promise<string> =>
    new Promise((resolve, reject) => {
      const worker = cluster.fork({ [WORKER_CONFIG_ENV]: JSON.stringify(config) });
      const member: Member = { worker, started: false, listening: resolve };
      members.set(worker.id, member);
      worker.on('message', (raw: unknown) => onMessage(member, raw));
      worker.once('exit', (code, signal) => {
        members.delete(worker.id);
        for (const [id, pending] of waiting) {
          if (pending.member !== member) continue;
          waiting.delete(id);
          clearTimeout(pending.timer);
          pending.resolve(null);
        }
        if (member.listening) return reject(new Error(`a gateway worker exited (${signal ?? code}) before it listened`));
        if (closing) return;
        process.stderr.write(`gateway: data-plane worker ${worker.process.pid} exited (${signal ?? code}); starting another\n`);
        setTimeout(() => {
          if (!closing) fork().catch((err: unknown) => process.stderr.write(`gateway: ${err instanceof Error ? err.message : String(err)}\n`));
        }, 1000).unref();
      });
    });

  const stopWorkers = async (graceMs: number) => {
    closing = true;
    probes.close();
    closeGraceMs = graceMs;
    await Promise.all(
      [...members.values()].map(
        ({ worker }) =>
          new Promise<void>((resolve) => {
            if (worker.isDead()) return resolve();
            const kill = setTimeout(() => worker.process.kill('SIGKILL'), graceMs + 5000);
            worker.once('exit', () => {
              clearTimeout(kill);
              resolve();
            });
            worker.send({ type: 'close', graceMs } satisfies ToWorker);
          }),
      ),
    );
  };
  let url: string;
  // Every worker listens with the same arguments, so they share the primary's one listening handle (and
  // its port, for port 0) — a replacement too, while any worker lives.
  try {
    const urls = await Promise.all(Array.from({ length: workers }, () => fork()));
    url = urls[0] as string;
  } catch (err) {
    await stopWorkers(0);
    throw err;
  }

  const link: WorkerLink = {
    put: async (table) => void (await askAll((id) => ({ type: 'put', id, table }))),
    delete: async (run) => void (await askAll((id) => ({ type: 'delete', id, run }))),
    inflightRows: async (run) => {
      const merged = new Map<string, InflightRow>();
      for (const reply of await askAll((id) => ({ type: 'inflight', id, run }))) {
        if (reply.type !== 'inflight') continue;
        for (const row of reply.rows) {
          const key = JSON.stringify([row.revision, row.group, row.url]);
          const had = merged.get(key);
          if (!had) merged.set(key, { ...row });
          else {
            had.inflight += row.inflight;
            if (had.state === 'removed') had.state = row.state;
          }
        }
      }
      return [...merged.values()];
    },
    figures: async (run, windowS) => (await askAll((id) => ({ type: 'figures', id, run, windowS }))).flatMap((r) => (r.type === 'figures' ? [r.part] : [])),
    metrics: async () => {
      const each = (await askAll((id) => ({ type: 'metrics', id }))).flatMap((r) => (r.type === 'metrics' ? [r.metrics as MetricObjectWithValues<MetricValue<string>>[]] : []));
      // The probes' metrics are the primary's own.
      return AggregatorRegistry.aggregate([...each, (await metrics.registry.getMetricsAsJSON()) as MetricObjectWithValues<MetricValue<string>>[]]).metrics();
    },
  };

  return withAdminPlane(options, { url, services, metrics, state, workers: link }, stopWorkers);
}
