import type { GroupPlan } from '../plan/plan-schema';
import type { ReplicaSample } from '../contract/core-state-schema';
import { isJobFinished } from './jobs';
import type { RunEvent } from './events';
import type { RunCore } from './state';

/**
 * A group's OWN traffic where the gateways do not see it: a group behind the router with Troupe's
 * `scaling.replica_metrics` is read on each of its READY replicas' Prometheus endpoint, a counter of
 * the requests the replica answered (`requests`, for `metric: rps`) and a gauge of those it serves
 * now (`inflight`, for `metric: concurrency`). Each reading is a sample; the group's rps over its
 * window is the sum over its replicas of each one's increase over the window's samples ÷ their span
 * (a counter that went down restarted from 0, as Prometheus' `increase` reads it), its concurrency the
 * sum of the last gauges. Pure: `now` comes in.
 */

/** A replica counts toward its group's rate once two of its samples are this far apart (ms). */
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
 * The samples after a reading: this reading's values added, samples of replicas not read now (gone
 * from the group) dropped, and those older than the longest window (plus one reading) forgotten. A
 * replica that could not be read keeps its earlier samples.
 */
export function withReading(core: RunCore, samples: readonly ReplicaSample[], event: Extract<RunEvent, { kind: 'replica-metrics' }>, now: number, keep_ms: number): ReplicaSample[] {
  const read = new Set(event.replicas.map((r) => r.url));
  const fresh = event.replicas.flatMap((r): ReplicaSample[] => {
    const metrics = core.plan.groups[r.group]?.scaling?.replica_metrics;
    if (!metrics || r.values === null) return [];
    const requests = metrics.requests === null ? null : (r.values[metrics.requests] ?? null);
    const inflight = metrics.inflight === null ? null : (r.values[metrics.inflight] ?? null);
    return [{ url: r.url, group: r.group, at_ms: now, requests, inflight }];
  });
  return [...samples.filter((s) => read.has(s.url) && s.at_ms >= now - keep_ms), ...fresh];
}

/**
 * The group's own traffic from its replicas' samples (urls: the replicas read now), or null while no
 * replica has two samples far enough apart (rps) or none answered (concurrency).
 */
export function ownTraffic(group: GroupPlan, samples: readonly ReplicaSample[], urls: readonly string[], now: number): number | null {
  const scaling = group.scaling;
  if (!scaling?.replica_metrics) return null;
  let total = 0;
  let counted = 0;
  for (const url of urls) {
    const mine = samples.filter((s) => s.url === url && s.group === group.index && s.at_ms >= now - scaling.window_s * 1000);
    if (scaling.metric === 'concurrency') {
      const last = mine.at(-1);
      if (last?.inflight === null || last?.inflight === undefined) continue;
      total += last.inflight;
      counted += 1;
      continue;
    }
    const values = mine.flatMap((s) => (s.requests === null ? [] : [{ at: s.at_ms, v: s.requests }]));
    const first = values[0];
    const last = values.at(-1);
    if (!first || !last || last.at - first.at < MIN_SAMPLE_SPAN_MS) continue;
    let increase = 0;
    values.reduce((before, now_) => {
      increase += now_.v >= before.v ? now_.v - before.v : now_.v;
      return now_;
    });
    total += increase / ((last.at - first.at) / 1000);
    counted += 1;
  }
  return counted === 0 ? null : total;
}
