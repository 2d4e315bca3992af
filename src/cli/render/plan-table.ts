import type { Range, Resources } from '../../config/resources-schema';
import type { OnFailure, Plan, ReadyQuorum } from '../../plan/plan-schema';
import { renderFields, renderTable } from './table';
import { formatDuration } from './time-text';
import type { Style } from './style';

function formatRange(range: Range, unit = ''): string | null {
  const { min, max } = range;
  if (min !== null && min === max) return `${min}${unit}`;
  if (min !== null && max === null) return `${min}${unit}..`;
  if (min === null && max !== null) return `..${max}${unit}`;
  if (min !== null && max !== null) return `${min}${unit}..${max}${unit}`;
  return null;
}

/** `cpu=4 mem=8GB.. disk=100GB.. gpu=L40S:1..` — what a node of the group asks for. */
export function formatResources(resources: Resources): string {
  const parts: string[] = [];
  const cpu = formatRange(resources.cpu.count);
  if (cpu) parts.push(`cpu=${resources.cpu.arch ? `${resources.cpu.arch}:` : ''}${cpu}`);
  const memory = formatRange(resources.memory, 'GB');
  if (memory) parts.push(`mem=${memory}`);
  const disk = resources.disk ? formatRange(resources.disk, 'GB') : null;
  if (disk) parts.push(`disk=${disk}`);
  if (resources.shm_size !== null) parts.push(`shm=${resources.shm_size}GB`);
  const { gpu } = resources;
  // `0..` with no name is dstack's default (a GPU is optional): not worth a column's width.
  if ((gpu.count.min ?? 0) > 0 || (gpu.name?.length ?? 0) > 0) {
    const count = formatRange(gpu.count);
    const label = [gpu.vendor && !gpu.name?.length ? gpu.vendor : null, gpu.name?.length ? gpu.name.join('/') : null]
      .filter((p): p is string => p !== null)
      .join(':');
    const memoryText = gpu.memory ? formatRange(gpu.memory, 'GB') : null;
    parts.push(`gpu=${[label || null, count, memoryText].filter((p): p is string => p !== null && p !== '').join(':')}`);
  }
  return parts.join(' ');
}

function jobRange(plan: Plan, groupIndex: number): string {
  const nums = plan.jobs.filter((j) => j.node_group_index === groupIndex).map((j) => j.job_num);
  const first = nums[0];
  const last = nums[nums.length - 1];
  if (first === undefined || last === undefined) return '-';
  return first === last ? String(first) : `${first}-${last}`;
}

function formatPorts(ports: Plan['groups'][number]['ports']): string {
  return ports.map((p) => (p.local_port === null || p.local_port === p.container_port ? String(p.container_port) : `${p.local_port}:${p.container_port}`)).join(',') || '-';
}

/** `1 (1..3)` for a group `troupe scale` may resize: its size at start, then its bounds. */
export function formatGroupNodes(nodes: number, range: { min: number; max: number } | null | undefined): string {
  return range ? `${nodes} (${range.min}..${range.max})` : String(nodes);
}

/** `min 2` or `min 50%`: how many nodes must be READY before the group's dependents start. */
function formatQuorum(quorum: ReadyQuorum): string {
  return quorum.kind === 'count' ? `min ${quorum.value}` : `min ${quorum.value}%`;
}

/** When a group starts (Troupe's depends_on), how it tells it is ready (its probe, its quorum). */
export function formatStartup(
  plan: { groups: readonly { name: string }[] },
  group: Pick<Plan['groups'][number], 'depends_on' | 'ready' | 'ready_min' | 'on_dependency_restart' | 'on_peers_change'>,
): string {
  const after = (group.depends_on ?? []).map((d) => plan.groups[d]?.name ?? String(d));
  const probe = group.ready?.check;
  const check = !probe ? null : probe.kind === 'http' ? `GET :${probe.port}${probe.path}` : probe.kind === 'tcp' ? `tcp :${probe.port}` : 'command';
  const quorum = group.ready_min ? formatQuorum(group.ready_min) : null;
  const ready = check === null && quorum === null ? null : `ready: ${[check ?? 'running', quorum].filter((p): p is string => p !== null).join(', ')}`;
  const depends = after.length === 0 ? null : `after ${after.join(', ')}${group.on_dependency_restart === 'restart' ? ' (restarts with them)' : ''}`;
  const hook = group.on_peers_change ? 'on_peers_change' : null;
  return [depends, ready, hook].filter((p): p is string => p !== null).join('; ') || '-';
}

/** `restart-node, 3 in 10m 00s`, `restart-group, 3 per run`, `fail-run`: what a failed node does. */
export function formatOnFailure(policy: OnFailure | null | undefined): string {
  if (!policy || policy.action === 'fail-run') return 'fail-run';
  const budget = policy.within_s === null ? 'per run' : `in ${formatDuration(policy.within_s * 1000)}`;
  return `${policy.action}, ${policy.max_restarts} ${budget}`;
}

function roleOf(job: Plan['jobs'][number]): string {
  if (job.global_master) return 'global master';
  return job.group_master ? 'group master' : 'worker';
}

export interface PlanViewOptions {
  /** The backend that will provision the nodes (apply), if known. */
  backend?: string;
  /** A row per job as well (the whole rank space). */
  jobs?: boolean;
}

/** The run's settings, a row per group (ranks, resources, ports, start-up), optionally a row per job. */
export function renderPlan(plan: Plan, style: Style, options: PlanViewOptions = {}): string[] {
  const retry = plan.retry ? `on ${plan.retry.on_events.join(', ')} for ${formatDuration(plan.retry.duration_s * 1000)}` : 'no';
  const usesDependencies = plan.groups.some((g) => (g.depends_on ?? []).length > 0 || g.ready || g.ready_min);
  const usesOnFailure = plan.groups.some((g) => g.on_failure);
  const fields: Array<[string, string]> = [
    ['Run', plan.run_name],
    ...(options.backend ? [['Backend', options.backend] as [string, string]] : []),
    ...(plan.fleets?.length ? [['Fleets', plan.fleets.join(', ')] as [string, string]] : []),
    ['Nodes', `${plan.nodes_num} in ${plan.groups.length} group${plan.groups.length === 1 ? '' : 's'}`],
    ['Startup order', usesDependencies && plan.startup_order === 'any' ? 'by depends_on and readiness' : plan.startup_order],
    ['Stop criteria', plan.stop_criteria === 'group-done' ? `group-done: ${plan.groups[plan.stop_group ?? -1]?.name ?? '?'}` : plan.stop_criteria],
    ['Retry', retry],
    ['Max duration', plan.max_duration_s === null ? 'off' : formatDuration(plan.max_duration_s * 1000)],
    ['Image', plan.image ?? '- (commands run on the host)'],
  ];
  const rows = plan.groups.map((group) => [
    group.name,
    formatGroupNodes(group.nodes, group.nodes_range),
    jobRange(plan, group.index),
    formatResources(group.resources),
    formatPorts(group.ports),
    ...(usesDependencies ? [formatStartup(plan, group)] : []),
    ...(usesOnFailure ? [formatOnFailure(group.on_failure)] : []),
  ]);
  const jobRows = plan.jobs.map((j) => [String(j.job_num), j.job_name, j.node_group_name, String(j.node_group_job_index), roleOf(j)]);
  return [
    ...renderFields(fields, style),
    '',
    ...renderTable(['GROUP', 'NODES', 'JOBS', 'RESOURCES', 'PORTS', ...(usesDependencies ? ['STARTS'] : []), ...(usesOnFailure ? ['ON FAILURE'] : [])], rows, style, {
      alignRight: new Set([1]),
    }),
    ...(options.jobs ? ['', ...renderTable(['JOB', 'NAME', 'GROUP', 'NODE', 'ROLE'], jobRows, style, { alignRight: new Set([0, 3]) })] : []),
  ];
}
