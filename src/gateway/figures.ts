import { z } from 'zod';

/**
 * A service's figures over the last seconds, per revision and per entry group: what a run's rollout
 * gates (error rate, p95 against the old revision) and its autoscaler (rps, in flight, requests held)
 * read from `GET /services/<run>/figures`. Kept by the second for {@link MAX_WINDOW_S} s; latencies as
 * counts in fixed buckets, so the figures of a clustered gateway's workers add up and percentiles are
 * taken from the merged counts, never averaged. Prometheus' metrics (gateway-metrics.ts) count since the
 * start and want a server to take rates; a run asks a gateway directly, so the gateway keeps the window.
 */

export const MAX_WINDOW_S = 300;
export const DEFAULT_WINDOW_S = 30;

/** Upper bounds of the latency buckets, ms: 1 ms up to ~10 min, each 20 % above the last (a percentile is off by at most that). */
export const LATENCY_BOUNDS_MS: readonly number[] = (() => {
  const bounds: number[] = [];
  for (let b = 1; b < 600_000; b *= 1.2) bounds.push(Math.round(b * 1000) / 1000);
  return bounds;
})();

/** The bucket a latency falls in; the last one (past every bound) is its own. */
export function latencyBucket(ms: number): number {
  let lo = 0;
  let hi = LATENCY_BOUNDS_MS.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (ms <= (LATENCY_BOUNDS_MS[mid] as number)) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/**
 * The `q` quantile (0..1) of latencies counted in buckets, interpolated linearly inside its bucket as
 * Prometheus' histogram_quantile does; null with nothing counted. Past the last bound: that bound.
 */
export function latencyQuantile(counts: readonly number[], q: number): number | null {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return null;
  const rank = q * total;
  let below = 0;
  for (let i = 0; i < counts.length; i++) {
    const n = counts[i] as number;
    if (n > 0 && below + n >= rank) {
      const upper = LATENCY_BOUNDS_MS[i];
      if (upper === undefined) return LATENCY_BOUNDS_MS.at(-1) as number;
      const lower = i === 0 ? 0 : (LATENCY_BOUNDS_MS[i - 1] as number);
      return lower + ((upper - lower) * (rank - below)) / n;
    }
    below += n;
  }
  return LATENCY_BOUNDS_MS.at(-1) as number;
}

const Count = z.int().min(0);

/** One process's figures of a service over a window, in the form that adds up (a worker's answer to its primary). */
export const FiguresPartSchema = z.strictObject({
  revisions: z.array(z.strictObject({ revision: z.int().min(0), requests: Count, errors: Count, latency: z.array(Count), inflight: Count })),
  groups: z.array(z.strictObject({ revision: z.int().min(0), group: z.string(), requests: Count, inflight: Count })),
  held: Count,
  held_total: Count,
});
export type FiguresPart = z.infer<typeof FiguresPartSchema>;

/** The admin API's `GET /services/<run>/figures?window=<s>` answer. */
export const ServiceFiguresSchema = z.strictObject({
  run: z.string(),
  window_s: z.int().min(1).max(MAX_WINDOW_S),
  revisions: z.array(
    z.strictObject({
      revision: z.int().min(0),
      /** Answers ended in the window (forwarded, or failed to be). */
      requests: Count,
      /** Of those: a status ≥ 500 from the replica, or the gateway could not forward it (connect error, reset, timeout). */
      errors: Count,
      /** errors / requests; 0 with no request. */
      error_rate: z.number().min(0).max(1),
      /** Request received → answer ended, of the answers a replica gave; null with none. */
      latency_p50_ms: z.number().min(0).nullable(),
      latency_p95_ms: z.number().min(0).nullable(),
      /** Requests in flight now. */
      inflight: Count,
    }),
  ),
  groups: z.array(
    z.strictObject({
      revision: z.int().min(0),
      group: z.string(),
      /** Requests that arrived in the window and were sent to this entry group. */
      requests: Count,
      /** requests / window_s. */
      rps: z.number().min(0),
      inflight: Count,
    }),
  ),
  /** Requests waiting now for a ready replica (the table's hold_s). */
  held: Count,
  /** Requests that had to wait, in the window. */
  held_total: Count,
});
export type ServiceFigures = z.infer<typeof ServiceFiguresSchema>;

interface RevisionCounts {
  requests: number;
  errors: number;
  latency: number[];
}

/** One second of one service. */
interface Second {
  at: number;
  revisions: Map<number, RevisionCounts>;
  /** By `revision\0group`: requests that arrived. */
  groups: Map<string, { revision: number; group: string; requests: number }>;
  held: number;
}

/** One service's last {@link MAX_WINDOW_S} seconds, a slot per second reused as time goes round. */
export class ServiceWindow {
  private readonly slots: Array<Second | undefined> = new Array<Second | undefined>(MAX_WINDOW_S);

  private second(nowMs: number): Second {
    const at = Math.floor(nowMs / 1000);
    const i = at % MAX_WINDOW_S;
    let slot = this.slots[i];
    if (slot?.at !== at) {
      slot = { at, revisions: new Map(), groups: new Map(), held: 0 };
      this.slots[i] = slot;
    }
    return slot;
  }

  /** A request sent to an entry group of a revision. */
  arrived(revision: number, group: string, nowMs: number): void {
    const groups = this.second(nowMs).groups;
    const key = `${revision}\0${group}`;
    const counts = groups.get(key);
    if (counts) counts.requests += 1;
    else groups.set(key, { revision, group, requests: 1 });
  }

  /** A request's answer ended; `latencyMs` null when no replica answered it. */
  ended(revision: number, error: boolean, latencyMs: number | null, nowMs: number): void {
    const revisions = this.second(nowMs).revisions;
    let counts = revisions.get(revision);
    if (!counts) {
      counts = { requests: 0, errors: 0, latency: new Array<number>(LATENCY_BOUNDS_MS.length + 1).fill(0) };
      revisions.set(revision, counts);
    }
    counts.requests += 1;
    if (error) counts.errors += 1;
    if (latencyMs !== null) (counts.latency[latencyBucket(latencyMs)] as number) += 1;
  }

  /** A request that found no ready replica and waits for one. */
  held(nowMs: number): void {
    this.second(nowMs).held += 1;
  }

  /** The last `windowS` seconds, this one included. In-flight counts are the caller's to fill in. */
  part(windowS: number, nowMs: number): FiguresPart {
    const now = Math.floor(nowMs / 1000);
    const revisions = new Map<number, FiguresPart['revisions'][number]>();
    const groups = new Map<string, FiguresPart['groups'][number]>();
    let heldTotal = 0;
    for (const slot of this.slots) {
      if (slot === undefined || slot.at <= now - windowS || slot.at > now) continue;
      heldTotal += slot.held;
      for (const [revision, c] of slot.revisions) {
        const into = revisions.get(revision) ?? { revision, requests: 0, errors: 0, latency: new Array<number>(LATENCY_BOUNDS_MS.length + 1).fill(0), inflight: 0 };
        revisions.set(revision, into);
        into.requests += c.requests;
        into.errors += c.errors;
        c.latency.forEach((n, i) => ((into.latency[i] as number) += n));
      }
      for (const [key, g] of slot.groups) {
        const into = groups.get(key) ?? { revision: g.revision, group: g.group, requests: 0, inflight: 0 };
        groups.set(key, into);
        into.requests += g.requests;
      }
    }
    return { revisions: [...revisions.values()], groups: [...groups.values()], held: 0, held_total: heldTotal };
  }
}

/** The parts of every process (one, or a clustered gateway's workers) as one answer: counts added, percentiles of the merged counts. */
export function mergeFigures(run: string, windowS: number, parts: readonly FiguresPart[]): ServiceFigures {
  const revisions = new Map<number, FiguresPart['revisions'][number]>();
  const groups = new Map<string, FiguresPart['groups'][number]>();
  let held = 0;
  let heldTotal = 0;
  for (const part of parts) {
    held += part.held;
    heldTotal += part.held_total;
    for (const r of part.revisions) {
      const into = revisions.get(r.revision);
      if (!into) revisions.set(r.revision, { ...r, latency: [...r.latency] });
      else {
        into.requests += r.requests;
        into.errors += r.errors;
        into.inflight += r.inflight;
        r.latency.forEach((n, i) => (into.latency[i] = (into.latency[i] ?? 0) + n));
      }
    }
    for (const g of part.groups) {
      const key = `${g.revision}\0${g.group}`;
      const into = groups.get(key);
      if (!into) groups.set(key, { ...g });
      else {
        into.requests += g.requests;
        into.inflight += g.inflight;
      }
    }
  }
  return {
    run,
    window_s: windowS,
    revisions: [...revisions.values()]
      .sort((a, b) => b.revision - a.revision)
      .map((r) => ({
        revision: r.revision,
        requests: r.requests,
        errors: r.errors,
        error_rate: r.requests === 0 ? 0 : r.errors / r.requests,
        latency_p50_ms: latencyQuantile(r.latency, 0.5),
        latency_p95_ms: latencyQuantile(r.latency, 0.95),
        inflight: r.inflight,
      })),
    groups: [...groups.values()]
      .sort((a, b) => b.revision - a.revision || a.group.localeCompare(b.group))
      .map((g) => ({ revision: g.revision, group: g.group, requests: g.requests, rps: g.requests / windowS, inflight: g.inflight })),
    held,
    held_total: heldTotal,
  };
}

/** `?window=` as the admin API takes it: whole seconds 1..300, default 30; a string saying what is wrong otherwise. */
export function windowParam(value: string | null): number | string {
  if (value === null) return DEFAULT_WINDOW_S;
  const n = Number(value);
  if (!/^\d+$/.test(value) || n < 1 || n > MAX_WINDOW_S) return `window wants whole seconds from 1 to ${MAX_WINDOW_S}, not ${JSON.stringify(value)}`;
  return n;
}
