import type { GroupPlan } from '../plan/plan-schema';
import type { Decision, Effect } from './effects';
import type { RunEvent } from './events';
import { AUTOSCALE_RESIZE_IDS, beginResize, isDeploymentStep, resizeRefusal, rolloutRefusal, sizeNow } from './scaling';
import { serviceOf } from './rollout-steps';
import type { RunCore, ServiceCore } from './state';
import { ownTraffic, replicaTargets, withReading } from './replica-traffic';
import { scalesFromZero } from '../plan/scale-from-zero';

/**
 * A service's autoscaler: each group with `scaling` (dstack's `scaling: {metric: rps, target, window,
 * scale_up_delay, scale_down_delay}`, or Troupe's `metric: concurrency`) resized within its replicas
 * range from the gateways' own figures, read every AUTOSCALE_READ_MS (AUTOSCALE_RETRY_MS after a
 * reading failed). An entry group (the router
 * group, or every group of a service without one) is sized on its own traffic: the requests the
 * gateways sent it over the window (rps), or those in flight to it now (concurrency); a group behind
 * the entry is sized on the service's traffic through its entry groups, as dstack sizes every group —
 * or, with Troupe's `scaling.replica_metrics`, on its own: its replicas' own Prometheus figures, read
 * beside the gateways' (replica-traffic.ts). A group behind the router scaled to zero takes the
 * entry off the table (routing.ts), so the gateways hold every request of the service; those wake it.
 * It wants ⌈value ÷ target⌉ replicas within its range; it grows once its size is `scale_up_delay`
 * old, shrinks once it is `scale_down_delay` old. An entry group with no replica (`replicas: 0..N`,
 * scaled to zero) gets none of the traffic it would take: the gateways hold its requests instead
 * (routing.ts: hold_s), and a request held now or in the window wakes it at once — at least one
 * replica wanted, no delay, as dstack grows a service from zero. While a rollout by revision is under way its
 * resizes are the new revision's target (scaling.ts: retarget), so a load spike mid-rollout is
 * honoured. Pure: `now` comes in.
 */

/** How often the figures are read while any group autoscales… */
export const AUTOSCALE_READ_MS = 2000;
/** …and after a reading failed (no gateway answered, or none is configured): less often, until one is read again. */
export const AUTOSCALE_RETRY_MS = 10_000;

/** When the next reading is due (epoch ms) after the last one asked; null: none asked yet. */
function nextReadAt(auto: ServiceCore['autoscale']): number | null {
  return auto.read_at_ms === null ? null : auto.read_at_ms + (auto.problem === null ? AUTOSCALE_READ_MS : AUTOSCALE_RETRY_MS);
}

/** Groups the autoscaler sizes: a range of replicas and `scaling`. */
function scaled(core: RunCore): GroupPlan[] {
  return core.plan.groups.filter((g) => g.scaling && g.nodes_range);
}

/** The autoscaler reads now: a live service RUNNING with groups to size, no end asked or decided. */
function active(core: RunCore): boolean {
  return core.service !== null && core.live !== null && core.run.status === 'RUNNING' && core.submission.ending === null && core.stop_request === null && scaled(core).length > 0;
}

export function decideAutoscaling(core: RunCore, event: RunEvent, now: number): Decision<RunCore> {
  const effects: Effect[] = [];
  const service = core.service;
  if (!service || !core.live) return { state: core, effects };
  if (event.kind === 'figures' && event.purpose === 'autoscale') return { state: figuresRead(core, service, event, now, effects), effects };
  if (event.kind === 'replica-metrics') return { state: replicasRead(core, event, now, effects), effects };
  if (event.kind !== 'tick') return { state: core, effects };
  // Its resizes are answered to no one: forgotten once over.
  const forgotten = forgetOwnResizes(core);
  if (!active(forgotten)) return { state: forgotten, effects };
  const auto = serviceOf(forgotten).autoscale;
  const due = nextReadAt(auto);
  if (auto.reading.length > 0 || auto.scraping || (due !== null && now < due)) return { state: forgotten, effects };
  const groups = scaled(forgotten);
  const own = groups.filter((g) => readsOwnReplicas(forgotten, g));
  // The gateways' figures for every group: a group on its replicas' own figures still wakes from zero on the requests they hold.
  const windows = [...new Set(groups.map((g) => g.scaling?.window_s ?? 30))].sort((a, b) => a - b);
  for (const window_s of windows) effects.push({ kind: 'read-figures', window_s, purpose: 'autoscale' });
  const targets = replicaTargets(forgotten, own);
  if (targets.length > 0) effects.push({ kind: 'read-replica-metrics', targets });
  return { state: withAutoscale(forgotten, { ...auto, reading: windows, scraping: targets.length > 0, read_at_ms: now }), effects };
}

/** When the loop must look again for the next reading (epoch ms), or null. */
export function autoscaleDeadline(core: RunCore): number | null {
  if (!active(core)) return null;
  const auto = serviceOf(core).autoscale;
  if (auto.reading.length > 0 || auto.scraping) return null;
  return nextReadAt(auto) ?? 0;
}

/** A reading is in: each group read over its window gets a verdict, and a resize where one is due. */
function figuresRead(core: RunCore, service: ServiceCore, event: Extract<RunEvent, { kind: 'figures' }>, now: number, effects: Effect[]): RunCore {
  const auto = service.autoscale;
  const reading = auto.reading.filter((w) => w !== event.window_s);
  if (event.error !== null) return withAutoscale(core, { ...auto, reading, problem: `the gateways' figures could not be read: ${event.error}` });
  let next = withAutoscale(core, { ...auto, reading, problem: null });
  if (!active(next)) return next;
  const held = event.held > 0 || event.held_total > 0;
  next = withAutoscale(next, { ...serviceOf(next).autoscale, held_seen: held });
  for (const group of scaled(next)) {
    if (group.scaling?.window_s !== event.window_s) continue;
    // A group with no replica wakes on the requests the gateways hold (an entry group's, or every request where it sleeps behind the router).
    const waking = sizeNow(next, group.index) === 0 && scalesFromZero(next.plan, group) && held;
    // A group on its replicas' own figures is sized when they are read (replicasRead); here only woken.
    const own = readsOwnReplicas(next, group);
    if (own && !waking) continue;
    next = sizeGroup(next, group, own ? 0 : metricOf(next, group, event), waking ? event.held_total : null, now, effects);
  }
  return next;
}

/** A group behind the router that reads its own traffic on its replicas (Troupe's `scaling.replica_metrics`; an entry group's is the gateways'). */
function readsOwnReplicas(core: RunCore, group: GroupPlan): boolean {
  return Boolean(group.scaling?.replica_metrics) && !(core.plan.service?.entry ?? []).includes(group.index);
}

/** Replicas' own figures are in: kept as samples; each such group gets a verdict once its traffic can be told. */
function replicasRead(core: RunCore, event: Extract<RunEvent, { kind: 'replica-metrics' }>, now: number, effects: Effect[]): RunCore {
  const auto = serviceOf(core).autoscale;
  const own = scaled(core).filter((g) => readsOwnReplicas(core, g));
  const keep_ms = Math.max(0, ...own.map((g) => (g.scaling?.window_s ?? 30) * 1000)) + AUTOSCALE_RETRY_MS;
  const failed = event.replicas.filter((r) => r.error !== null);
  const problem = failed[0] ? `${failed.length} of ${event.replicas.length} replicas' metrics could not be read: ${failed[0].url}: ${failed[0].error}` : null;
  let next = withAutoscale(core, { ...auto, scraping: false, samples: withReading(core, auto.samples, event, now, keep_ms), problem: problem ?? auto.problem });
  if (!active(next)) return next;
  for (const group of own) {
    const urls = event.replicas.filter((r) => r.group === group.index).map((r) => r.url);
    const value = ownTraffic(group, serviceOf(next).autoscale.samples, urls, now);
    if (value !== null) next = sizeGroup(next, group, value, null, now, effects);
  }
  return next;
}

/** The metric's value for `group` over the reading: its own traffic where the gateways send it requests, else the service's through its entry groups. */
export function metricOf(core: RunCore, group: GroupPlan, event: Extract<RunEvent, { kind: 'figures' }>): number {
  const scaling = group.scaling;
  const entry = core.plan.service?.entry ?? [];
  const names = entry.includes(group.index) ? [group.name] : entry.flatMap((i) => core.plan.groups[i]?.name ?? []);
  const rows = event.groups.filter((g) => names.includes(g.group));
  if (scaling?.metric === 'concurrency') return rows.reduce((n, g) => n + g.inflight, 0);
  return rows.reduce((n, g) => n + g.requests, 0) / event.window_s;
}

/** A verdict for `group` on its metric's `value` (`held`: requests held that wake it from zero, else null), and a resize where one is due. */
function sizeGroup(core: RunCore, group: GroupPlan, value: number, held: number | null, now: number, effects: Effect[]): RunCore {
  const scaling = group.scaling;
  const range = group.nodes_range;
  if (!scaling || !range) return core;
  const auto = serviceOf(core).autoscale;
  const nodes = sizeNow(core, group.index);
  const seen = auto.sizes[group.index];
  const size = seen && seen.nodes === nodes ? seen : { nodes, since_ms: now };
  // Requests held (now or in the window) keep a group that scales from zero at one replica at least: the
  // one they woke may still be starting, its traffic not counted yet.
  const floor = held !== null || (scalesFromZero(core.plan, group) && auto.held_seen) ? 1 : 0;
  const wanted = Math.min(range.max, Math.max(range.min, floor, Math.ceil(value / scaling.target - 1e-9)));
  const sizes = withIndex(auto.sizes, group.index, size);
  const last = withIndex(auto.last, group.index, { value, wanted, at_ms: now, ...(held !== null ? { held } : {}) });
  const noted = withAutoscale(core, { ...auto, sizes, last });
  const delay = wanted > nodes ? (nodes === 0 ? 0 : scaling.scale_up_delay_s) : scaling.scale_down_delay_s;
  if (wanted === nodes || now < size.since_ms + delay * 1000) return noted;
  // A resize of it under way (a rollout's own steps aside), a restart, dstack's rolling: the next reading judges again.
  const busy = core.live?.resizes.some((r) => r.group === group.index && r.phase !== 'over' && !isDeploymentStep(r));
  if (busy || rolloutRefusal(noted) || resizeRefusal(noted, group, false)) return noted;
  const id = AUTOSCALE_RESIZE_IDS + auto.resizes_made;
  const counted = withAutoscale(noted, { ...serviceOf(noted).autoscale, resizes_made: auto.resizes_made + 1 });
  return beginResize(counted, { id, group: group.index, nodes: wanted }, now, effects);
}

function forgetOwnResizes(core: RunCore): RunCore {
  const live = core.live;
  if (!live || !live.resizes.some((r) => r.id >= AUTOSCALE_RESIZE_IDS && r.phase === 'over')) return core;
  return { ...core, live: { ...live, resizes: live.resizes.filter((r) => r.id < AUTOSCALE_RESIZE_IDS || r.phase !== 'over') } };
}

function withIndex<T>(list: ReadonlyArray<T | null>, index: number, value: T): Array<T | null> {
  const out = [...list];
  while (out.length <= index) out.push(null);
  out[index] = value;
  return out;
}

function withAutoscale(core: RunCore, autoscale: ServiceCore['autoscale']): RunCore {
  return core.service ? { ...core, service: { ...core.service, autoscale } } : core;
}
