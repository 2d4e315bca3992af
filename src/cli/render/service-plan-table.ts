import type { ServicePlan } from '../../plan/service-plan-schema';
import { formatOnFailure, formatResources, formatStartup } from './plan-table';
import type { Style } from './style';
import { renderFields, renderTable } from './table';
import { formatDuration } from './time-text';
import { SCALE_FROM_ZERO_HOLD_S } from '../../plan/scale-from-zero';

/** `2`, or `1..4 (rps 10/replica)` (`concurrency 4/replica`) for a group that scales. */
function formatReplicas(group: ServicePlan['groups'][number]): string {
  const { min, max } = group.replicas;
  if (min === max) return String(min);
  return group.scaling ? `${min}..${max} (${group.scaling.metric} ${group.scaling.target}/replica)` : `${min}..${max}`;
}

function formatProbes(group: ServicePlan['groups'][number]): string {
  return group.probes.map((p) => `${p.method.toUpperCase()} ${p.url} every ${p.interval_s}s`).join(', ') || '-';
}

const seconds = (s: number): string => formatDuration(s * 1000);

/** `revision: surge 50%, 2 steps; canary 10% for 5m 00s; …`, or what `independent` does. */
function formatRollout({ rollout }: ServicePlan): string {
  const tail = `rollback ${rollout.rollback}; drain ${seconds(rollout.drain_timeout_s)}`;
  if (rollout.coherence === 'independent') return `independent (each group on its own, one replica at a time); ${tail}`;
  const surge = rollout.max_surge.kind === 'count' ? `${rollout.max_surge.n} replica(s)` : `${rollout.max_surge.p}%`;
  const canary = rollout.canary ? `canary ${rollout.canary.traffic_percent}% for ${seconds(rollout.canary.soak_s)}; ` : '';
  const { error_rate, p95_factor, progress_deadline_s } = rollout.gates;
  return (
    `revision: surge ${surge}, ${rollout.steps} step(s); ${canary}` +
    `gates: errors <= ${Number((error_rate * 100).toFixed(4))}%, p95 <= ${p95_factor}x the old, progress within ${seconds(progress_deadline_s)}; ${tail}`
  );
}

/** A service's endpoint settings and a row per replica group: replicas, router, resources, probes, start-up. */
export function renderServicePlan(plan: ServicePlan, style: Style): string[] {
  const router = plan.router_group === null ? null : plan.groups[plan.router_group];
  const limits = plan.rate_limits.map((l) => `${l.prefix} ${l.rps} rps burst ${l.burst} per ${l.key.type === 'header' ? `header ${l.key.header}` : 'client address'}`);
  const usesDependencies = plan.groups.some((g) => (g.depends_on ?? []).length > 0 || g.ready || g.ready_min);
  const usesOnFailure = plan.groups.some((g) => g.on_failure);
  const scaled = plan.groups.filter((g) => g.scaling);
  const fields: Array<[string, string]> = [
    ['Service', plan.run_name],
    ['Revision', plan.revision],
    ['Port', String(plan.port)],
    ['Auth', plan.auth ? 'token required' : 'off'],
    ['Strip prefix', plan.strip_prefix ? 'yes' : 'no'],
    ['Model', plan.model ? `${plan.model.name} (OpenAI API at ${plan.model.prefix})` : '-'],
    ['Rate limits', limits.join('; ') || '-'],
    ['Router', router ? `group ${router.name} (${router.router ?? '?'})` : '- (requests go to every group\'s replicas)'],
    ['Rollout', formatRollout(plan)],
    ...(plan.fleets?.length ? [['Fleets', plan.fleets.join(', ')] as [string, string]] : []),
    ...scaled.map(
      (g): [string, string] => [
        `Scaling ${g.name}`,
        `${g.scaling?.metric ?? 'rps'} target ${g.scaling?.target ?? '?'} over ${g.scaling?.window_s ?? '?'}s; up after ${formatDuration((g.scaling?.scale_up_delay_s ?? 0) * 1000)}, down after ${formatDuration((g.scaling?.scale_down_delay_s ?? 0) * 1000)}${g.replicas.min === 0 ? `; at zero, requests held up to ${formatDuration((g.scaling?.hold_s ?? SCALE_FROM_ZERO_HOLD_S) * 1000)}` : ''}${ownTraffic(g.scaling?.replica_metrics)}`,
      ],
    ),
  ];
  const rows = plan.groups.map((group) => [
    group.name,
    formatReplicas(group),
    group.router ?? '-',
    group.image ?? '-',
    formatResources(group.resources),
    formatProbes(group),
    ...(usesDependencies ? [formatStartup(plan, group)] : []),
    ...(usesOnFailure ? [formatOnFailure(group.on_failure)] : []),
  ]);
  return [
    ...renderFields(fields, style),
    '',
    ...renderTable(
      ['GROUP', 'REPLICAS', 'ROUTER', 'IMAGE', 'RESOURCES', 'PROBES', ...(usesDependencies ? ['STARTS'] : []), ...(usesOnFailure ? ['ON FAILURE'] : [])],
      rows,
      style,
    ),
  ];
}

/** Where a group reads its own traffic (Troupe's `scaling.replica_metrics`), or nothing: the gateways' figures. */
function ownTraffic(metrics: { port: number; path?: string | null; requests?: string | null; inflight?: string | null } | null | undefined): string {
  if (!metrics) return '';
  const names = [metrics.requests, metrics.inflight].filter((n): n is string => typeof n === 'string');
  return `; its own traffic: ${names.join(', ')} on each replica's :${metrics.port}${metrics.path ?? '/metrics'}`;
}
