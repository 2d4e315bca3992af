import { buildConnector, Pool } from 'undici';
import { DIRECT_FIRST_TIMEOUT_MS } from '../backends/ssh/jump-host';
import { ServiceWindow, type FiguresPart } from './figures';
import { RateLimiter } from './rate-limit';
import type { Candidate } from './replica-choice';
import { poolKeyOf, ReplicaTunnels, type TunnelOptions } from './replica-tunnels';
import type { ReplicaVia, ServiceTable } from './routing-table';

/** A replica a new request may go to, with what the data plane needs of it worked out once per table. */
export interface EntryCandidate extends Candidate {
  /** Its in-flight count's key (run, revision, group, url). */
  key: string;
  /** Its URL's origin: with the replica's `via`, the pool its requests go through. */
  origin: string;
}

/** A revision's entry groups' replicas: where a new request given to that revision may go. */
export interface Entry {
  revision: number;
  groups: string[];
  candidates: EntryCandidate[];
  /** The percent of new requests it gets: its `traffic`, or for the current revision what the others leave. */
  share: number;
  /** Has a ready replica whose probes pass. */
  ready: boolean;
  /** Has a ready replica, whatever its probes say: what a request falls back to when no revision has a passing one. */
  listed: boolean;
}

/** One service as the gateway serves it: its table and the state that lives beside it. */
export interface ServedService {
  table: ServiceTable;
  limiter: RateLimiter;
  /** Every revision's entry, the current revision's first; worked out when the table is put, not per request. */
  entries: Entry[];
}

export interface InflightRow {
  revision: number;
  group: string;
  url: string;
  /** `removed`: no longer in the table, requests still in flight to it. */
  state: 'ready' | 'draining' | 'removed';
  inflight: number;
}

export interface PoolOptions {
  /** How long a connection to a replica may take before it counts as a connect error. */
  connectTimeoutMs: number;
  /** How to reach replicas behind a jump host (a row's `via`); none: such a replica's requests get 502 saying what to configure. */
  tunnels?: TunnelOptions | undefined;
  /** A replica on its host's private address (`via.direct_first`): how long a straight connect may take before it goes through the host; default DIRECT_FIRST_TIMEOUT_MS. */
  directFirstTimeoutMs?: number | undefined;
}

const NO_URLS: ReadonlySet<string> = new Set();

function inflightKey(run: string, revision: number, group: string, url: string): string {
  return JSON.stringify([run, revision, group, url]);
}

/** `failing`: URLs of replicas whose probes after READY fail (replica-probes.ts). */
function entriesOf(table: ServiceTable, failing: ReadonlySet<string>): Entry[] {
  const others = table.revisions.reduce((sum, r) => sum + (r.number === table.current_revision ? 0 : (r.traffic ?? 0)), 0);
  const entries = table.revisions.map((revision): Entry => {
    const candidates = revision.groups
      .filter((g) => revision.entry.includes(g.name))
      .flatMap((g) =>
        g.replicas.map((replica) => ({ group: g.name, replica, key: inflightKey(table.run, revision.number, g.name, replica.url), origin: new URL(replica.url).origin, probesFailing: failing.has(replica.url) })),
      );
    const share = revision.number === table.current_revision ? 100 - others : (revision.traffic ?? 0);
    const listed = candidates.some((c) => c.replica.state === 'ready');
    return { revision: revision.number, groups: revision.entry, candidates, share, ready: candidates.some((c) => c.replica.state === 'ready' && !c.probesFailing), listed };
  });
  return entries.sort((a, b) => Number(b.revision === table.current_revision) - Number(a.revision === table.current_revision));
}

/**
 * The services a gateway serves, the requests in flight to each replica, and one connection pool per
 * replica origin. A pool is closed (gracefully: its requests in flight finish) once no table names its
 * origin; a replica's in-flight count is kept while it is non-zero, table or not, so a drain can wait on it.
 */
export class GatewayServices {
  private readonly services = new Map<string, ServedService>();
  private readonly inflight = new Map<string, number>();
  /** By poolKeyOf: origin, and the jump host for a replica behind one. */
  private readonly pools = new Map<string, Pool>();
  private readonly tunnels: ReplicaTunnels;
  /** Requests waiting for a ready replica, by run: each called with the service once a table brings one, or undefined once the service is removed. */
  private readonly holds = new Map<string, Set<(served: ServedService | undefined) => void>>();
  private readonly windows = new Map<string, ServiceWindow>();
  /** By run: URLs of its ready replicas whose probes after READY fail, as the prober last said. */
  private readonly failing = new Map<string, ReadonlySet<string>>();
  private readonly watchers = new Set<(run: string, table: ServiceTable | undefined) => void>();
  private turn = 0;

  constructor(private readonly poolOptions: PoolOptions) {
    this.tunnels = new ReplicaTunnels(poolOptions.tunnels ?? {});
  }

  put(table: ServiceTable): void {
    const served: ServedService = { table, limiter: new RateLimiter(table.rate_limits), entries: entriesOf(table, this.failing.get(table.run) ?? NO_URLS) };
    this.services.set(table.run, served);
    this.closeUnusedPools();
    if (served.entries.some((e) => e.ready)) this.release(table.run, served);
    for (const watcher of this.watchers) watcher(table.run, table);
  }

  delete(run: string): boolean {
    const had = this.services.delete(run);
    this.windows.delete(run);
    this.failing.delete(run);
    this.closeUnusedPools();
    this.release(run, undefined);
    for (const watcher of this.watchers) watcher(run, undefined);
    return had;
  }

  /** Calls `watcher` after each table put (with it) or service deleted (undefined); answers the function that stops. */
  watch(watcher: (run: string, table: ServiceTable | undefined) => void): () => void {
    this.watchers.add(watcher);
    return () => this.watchers.delete(watcher);
  }

  /**
   * The replicas of `run` whose probes after READY fail (by URL): they get no new request, as if not ready,
   * until a later call leaves them out. Kept whether or not the run's table is here yet (a clustered
   * gateway's worker may hear of them first).
   */
  setProbesFailing(run: string, urls: Iterable<string>): void {
    const failing = new Set(urls);
    if (failing.size > 0) this.failing.set(run, failing);
    else this.failing.delete(run);
    const served = this.services.get(run);
    if (!served) return;
    served.entries = entriesOf(served.table, failing);
    if (served.entries.some((e) => e.ready)) this.release(run, served);
  }

  /** Every run's replicas whose probes after READY fail, for a clustered gateway's new worker. */
  probesFailing(): Array<{ run: string; urls: string[] }> {
    return [...this.failing].map(([run, urls]) => ({ run, urls: [...urls] }));
  }

  /**
   * Holds a request of `run` until a table brings a ready entry replica (`then` called with the service)
   * or the service is removed (`then(undefined)`). Answers the function that stops holding it.
   */
  hold(run: string, then: (served: ServedService | undefined) => void): () => void {
    let waiting = this.holds.get(run);
    if (!waiting) {
      waiting = new Set();
      this.holds.set(run, waiting);
    }
    waiting.add(then);
    this.window(run).held(Date.now());
    return () => {
      waiting.delete(then);
      if (waiting.size === 0 && this.holds.get(run) === waiting) this.holds.delete(run);
    };
  }

  private release(run: string, served: ServedService | undefined): void {
    const waiting = this.holds.get(run);
    if (!waiting) return;
    this.holds.delete(run);
    for (const then of waiting) then(served);
  }

  /** The figures window of a service, made on its first request. */
  window(run: string): ServiceWindow {
    let window = this.windows.get(run);
    if (!window) {
      window = new ServiceWindow();
      this.windows.set(run, window);
    }
    return window;
  }

  /** This process's figures of a service over the last `windowS` s: every revision and entry group of its table listed, counted or not. */
  figuresPart(run: string, windowS: number, nowMs: number): FiguresPart {
    const part = this.window(run).part(windowS, nowMs);
    const revisions = new Map(part.revisions.map((r) => [r.revision, r]));
    const groups = new Map(part.groups.map((g) => [`${g.revision}\0${g.group}`, g]));
    const served = this.services.get(run);
    for (const entry of served?.entries ?? []) {
      if (!revisions.has(entry.revision)) revisions.set(entry.revision, { revision: entry.revision, requests: 0, errors: 0, latency: [], inflight: 0 });
      for (const group of entry.groups) {
        const key = `${entry.revision}\0${group}`;
        if (!groups.has(key)) groups.set(key, { revision: entry.revision, group, requests: 0, inflight: 0 });
      }
    }
    for (const row of this.inflightRows(run)) {
      const revision = revisions.get(row.revision);
      if (revision) revision.inflight += row.inflight;
      else if (row.inflight > 0) revisions.set(row.revision, { revision: row.revision, requests: 0, errors: 0, latency: [], inflight: row.inflight });
      const group = groups.get(`${row.revision}\0${row.group}`);
      if (group) group.inflight += row.inflight;
    }
    return { revisions: [...revisions.values()], groups: [...groups.values()], held: this.holds.get(run)?.size ?? 0, held_total: part.held_total };
  }

  get(run: string): ServedService | undefined {
    return this.services.get(run);
  }

  tables(): ServiceTable[] {
    return [...this.services.values()].map((s) => s.table);
  }

  nextTurn(): number {
    this.turn = (this.turn + 1) % 1_000_000_007;
    return this.turn;
  }

  /** Requests in flight to a candidate (by its `key`). */
  inflightOf(key: string): number {
    return this.inflight.get(key) ?? 0;
  }

  /** Counts a request in flight to a candidate; `leave` counts it out (once per `enter`). Both answer the count after. */
  enter(key: string): number {
    const n = (this.inflight.get(key) ?? 0) + 1;
    this.inflight.set(key, n);
    return n;
  }

  leave(key: string): number {
    const n = (this.inflight.get(key) ?? 1) - 1;
    if (n <= 0) this.inflight.delete(key);
    else this.inflight.set(key, n);
    return Math.max(0, n);
  }

  inflightRows(run: string): InflightRow[] {
    const rows: InflightRow[] = [];
    const listed = new Set<string>();
    for (const revision of this.services.get(run)?.table.revisions ?? []) {
      for (const group of revision.groups) {
        for (const replica of group.replicas) {
          const key = inflightKey(run, revision.number, group.name, replica.url);
          listed.add(key);
          rows.push({ revision: revision.number, group: group.name, url: replica.url, state: replica.state, inflight: this.inflight.get(key) ?? 0 });
        }
      }
    }
    for (const [key, n] of this.inflight) {
      if (listed.has(key)) continue;
      const [r, revision, group, url] = JSON.parse(key) as [string, number, string, string];
      if (r === run) rows.push({ revision, group, url, state: 'removed', inflight: n });
    }
    return rows;
  }

  /** The pool for a replica's origin (`EntryCandidate.origin`) and `via`: through the jump host's SSH connection when it has one. */
  pool(origin: string, via?: ReplicaVia): Pool {
    const key = poolKeyOf(origin, via);
    let pool = this.pools.get(key);
    if (!pool) {
      const direct = via?.direct_first ? buildConnector({ timeout: this.poolOptions.directFirstTimeoutMs ?? DIRECT_FIRST_TIMEOUT_MS }) : undefined;
      const connect = via ? { connect: this.tunnels.connector(via, direct) } : {};
      pool = new Pool(origin, { connectTimeout: this.poolOptions.connectTimeoutMs, keepAliveTimeout: 30_000, ...connect });
      this.pools.set(key, pool);
    }
    return pool;
  }

  async close(): Promise<void> {
    const pools = [...this.pools.values()];
    this.pools.clear();
    for (const run of [...this.holds.keys()]) this.release(run, undefined);
    this.services.clear();
    await Promise.all(pools.map((p) => p.close()));
    await this.tunnels.close();
  }

  private closeUnusedPools(): void {
    const replicas = this.tables().flatMap((t) => t.revisions.flatMap((r) => r.groups.flatMap((g) => g.replicas)));
    this.tunnels.retain(replicas.flatMap((x) => (x.via ? [x.via] : [])));
    const used = new Set(replicas.map((x) => poolKeyOf(new URL(x.url).origin, x.via)));
    for (const [key, pool] of this.pools) {
      if (used.has(key)) continue;
      this.pools.delete(key);
      void pool.close().catch(() => undefined);
    }
  }
}
