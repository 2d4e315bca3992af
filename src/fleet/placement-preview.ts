import type { Resources } from '../config/resources-schema';
import type { Plan } from '../plan/plan-schema';
import type { FleetHostState, FleetState } from '../contract/fleet-schemas';
import { describeResources, hostShortfalls, pickHosts } from './host-match';

export interface JobPlacement {
  job_num: number;
  group_name: string;
  group_job_index: number;
  /** The host the job would get, or null when none is free and fits. */
  host: FleetHostState | null;
  /** Why no host, when `host` is null. */
  reason: string | null;
}

/**
 * Which host each job of the plan would get from the fleet as it is now, by the fleet's own rule
 * (smallest free host that fits), without taking any: job 0 first, then the others in rank order.
 * A preview: other runs, or groups provisioned in parallel, may change the outcome.
 */
export function previewPlacement(plan: Plan, fleet: FleetState): JobPlacement[] {
  const taken = new Set<number>();
  return plan.jobs.map((job): JobPlacement => {
    const group = plan.groups[job.node_group_index];
    const base = { job_num: job.job_num, group_name: job.node_group_name, group_job_index: job.node_group_job_index };
    if (!group) return { ...base, host: null, reason: 'no such group' };
    const [host] = pickHosts(fleet.hosts, group.resources, 1, taken) ?? [];
    if (host) {
      taken.add(host.index);
      return { ...base, host, reason: null };
    }
    return { ...base, host: null, reason: noHostReason(fleet, group.resources, taken) };
  });
}

function noHostReason(fleet: FleetState, resources: Resources, taken: ReadonlySet<number>): string {
  return `no free host with ${describeResources(resources)} (${hostsFor(fleet, resources, taken)})`;
}

/** Each host of the fleet and what it is to a node with these resources: `gpu-1 held by run-a; gpu-2: fits; cpu-1: no GPU, needs 1.. GPU`. */
export function hostsFor(fleet: FleetState, resources: Resources, taken: ReadonlySet<number>): string {
  const each = fleet.hosts.map((h) => {
    const name = h.spec.target.hostname;
    if (h.status !== 'ready') return `${name} ${h.status}`;
    if (h.holder) return `${name} held by ${h.holder.run_name}`;
    if (taken.has(h.index)) return `${name} taken by an earlier job of this run`;
    const short = h.facts ? hostShortfalls(h.facts, resources) : [];
    return `${name}: ${short.join(', ') || 'fits'}`;
  });
  return each.join('; ');
}
