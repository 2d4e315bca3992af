import type { GroupPlan } from '../plan/plan-schema';
import type { ReplicaSample } from '../contract/core-state-schema';
import { isJobFinished } from './jobs';
import type { RunEvent } from './events';
import type { RunCore } from './state';

/**
 * A group's OWN traffic where the gateways do not see it: a group behind the router with Troupe's
 * `scaling.replica_metrics` is read on each of its READY replicas' Prometheus endpoint, a counter of
 * the requests the replica answered (`requests`, for `metric: rps`) and a gauge of those it serves
 * now (`inflight`, for `metric: concurrency`). Each reading is a sample kept in the run's state; the
 * group's rps is what its replicas answered over the window ÷ the span of its samples there (ownTraffic),
 * its concurrency the sum of the last gauges. Pure: `now` comes in.
 */

/** A group's rate is told once its samples in the window span this long (ms). */
export const MIN_SAMPLE_SPAN_MS = 1000;

/** The replicas to read now: every READY replica of a group with `replica_metrics`, and the metrics to take. */
export function replicaTargets(core: RunCore, groups: readonly GroupPlan[]): Array<{ group: number; url: string; names: string[] }> {
  return groups.flatMap((group) => {
    const metrics = group.scaling?.replica_metrics;
    if (!metrics) return [];
    const names = [metrics.requests, metrics.inflight].flatMap((n) => (n === null ? [] : [n]));
    return core.run.jobs.flatMap((job) => {
      if (job.group_index !== group.index || job.removed || isJobFinished(job) || job.ready_at === null || !job.instance) return [];
      return [{ group: group.index, url: `http://${job.instance.internal_ip}:${metrics.port}${metrics.path}`, names }];
    });
  });
}

/**
 * The samples after a reading: this reading's values added, and those older than the longest window
 * (plus a margin) forgotten. A replica gone from the group, or that could not be read, keeps its
 * earlier samples: what it answered in the window is still the group's traffic.
 */
export function withReading(core: RunCore, samples: readonly ReplicaSample[], event: Extract<RunEvent, { kind: 'replica-metrics' }>, now: number, keep_ms: number): ReplicaSample[] {
  const fresh = event.replicas.flatMap((r): ReplicaSample[] => {
    const metrics = core.plan.groups[r.group]?.scaling?.replica_metrics;
    if (!metrics || r.values === null) return [];
    const requests = metrics.requests === null ? null : (r.values[metrics.requests] ?? null);
    const inflight = metrics.inflight === null ? null : (r.values[metrics.inflight] ?? null);
    return [{ url: r.url, group: r.group, at_ms: now, requests, inflight }];
  });
  return [...samples.filter((s) => s.at_ms >= now - keep_ms), ...fresh];
}

/**
 * The group's own traffic from its replicas' samples, or null while its samples in the window span
 * less than MIN_SAMPLE_SPAN_MS (rps) or none of the replicas read now (`urls`) answered (concurrency).
 * rps: every replica's requests over the window's span, those since gone from the group too — its
 * counter's increase between its samples (a drop is a restart from 0), and, for a replica first read
 * after the span began (it started since), its first reading too — summed, ÷ the span: the group's
 * average over the window however its replicas came and went, as the gateways average an entry group's.
 */
export function ownTraffic(group: GroupPlan, samples: readonly ReplicaSample[], urls: readonly string[], now: number): number | null {
  const scaling = group.scaling;
  if (!scaling?.replica_metrics) return null;
  const mine = samples.filter((s) => s.group === group.index && s.at_ms >= now - scaling.window_s * 1000);
  if (scaling.metric === 'concurrency') {
    const last = urls.flatMap((url) => mine.filter((s) => s.url === url && s.inflight !== null).slice(-1));
    return last.length === 0 ? null : last.reduce((n, s) => n + (s.inflight ?? 0), 0);
  }
  const counted = mine.filter((s) => s.requests !== null);
  if (counted.length === 0) return null;
  const from = Math.min(...counted.map((s) => s.at_ms));
  const to = Math.max(...counted.map((s) => s.at_ms));
  if (to - from < MIN_SAMPLE_SPAN_MS) return null;
  let requests = 0;
  for (const url of new Set(counted.map((s) => s.url))) {
    const values = counted.filter((s) => s.url === url).map((s) => ({ at: s.at_ms, v: s.requests ?? 0 }));
    const first = values[0];
    if (!first) continue;
    if (first.at > from) requests += first.v;
    values.reduce((before, after) => {
      requests += after.v >= before.v ? after.v - before.v : after.v;
      return after;
    });
  }
  return requests / ((to - from) / 1000);
}
