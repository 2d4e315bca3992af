import { Pool } from 'undici';
import { RateLimiter } from './rate-limit';
import type { Candidate } from './replica-choice';
import type { ServiceTable } from './routing-table';

/** A replica a new request may go to, with what the data plane needs of it worked out once per table. */
export interface EntryCandidate extends Candidate {
  /** Its in-flight count's key (run, revision, group, url). */
  key: string;
  /** Its URL's origin: the pool its requests go through. */
  origin: string;
}

/** The current revision's entry groups' replicas: where a new request may go. */
export interface Entry {
  revision: number;
  groups: string[];
  candidates: EntryCandidate[];
}

/** One service as the gateway serves it: its table and the state that lives beside it. */
export interface ServedService {
  table: ServiceTable;
  limiter: RateLimiter;
  /** Worked out when the table is put, not per request. */
  entry: Entry;
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
}

function inflightKey(run: string, revision: number, group: string, url: string): string {
  return JSON.stringify([run, revision, group, url]);
}

function entryOf(table: ServiceTable): Entry {
  const revision = table.revisions.find((r) => r.number === table.current_revision);
  if (!revision) return { revision: table.current_revision, groups: [], candidates: [] };
  const candidates = revision.groups
    .filter((g) => revision.entry.includes(g.name))
    .flatMap((g) => g.replicas.map((replica) => ({ group: g.name, replica, key: inflightKey(table.run, revision.number, g.name, replica.url), origin: new URL(replica.url).origin })));
  return { revision: revision.number, groups: revision.entry, candidates };
}

/**
 * The services a gateway serves, the requests in flight to each replica, and one connection pool per
 * replica origin. A pool is closed (gracefully: its requests in flight finish) once no table names its
 * origin; a replica's in-flight count is kept while it is non-zero, table or not, so a drain can wait on it.
 */
export class GatewayServices {
  private readonly services = new Map<string, ServedService>();
  private readonly inflight = new Map<string, number>();
  private readonly pools = new Map<string, Pool>();
  private turn = 0;

  constructor(private readonly poolOptions: PoolOptions) {}

  put(table: ServiceTable): void {
    this.services.set(table.run, { table, limiter: new RateLimiter(table.rate_limits), entry: entryOf(table) });
    this.closeUnusedPools();
  }

  delete(run: string): boolean {
    const had = this.services.delete(run);
    this.closeUnusedPools();
    return had;
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

  /** The pool for a replica's origin (`EntryCandidate.origin`). */
  pool(origin: string): Pool {
    let pool = this.pools.get(origin);
    if (!pool) {
      pool = new Pool(origin, { connectTimeout: this.poolOptions.connectTimeoutMs, keepAliveTimeout: 30_000 });
      this.pools.set(origin, pool);
    }
    return pool;
  }

  async close(): Promise<void> {
    const pools = [...this.pools.values()];
    this.pools.clear();
    this.services.clear();
    await Promise.all(pools.map((p) => p.close()));
  }

  private closeUnusedPools(): void {
    const used = new Set(this.tables().flatMap((t) => t.revisions.flatMap((r) => r.groups.flatMap((g) => g.replicas.map((x) => new URL(x.url).origin)))));
    for (const [origin, pool] of this.pools) {
      if (used.has(origin)) continue;
      this.pools.delete(origin);
      void pool.close().catch(() => undefined);
    }
  }
}
