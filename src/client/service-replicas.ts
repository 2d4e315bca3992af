import type { RunState } from '../contract/run-state';

/** A replica group of a service: how many of its replicas are READY (their probe passed) of the group's size. */
export interface ReplicaGroupSummary {
  group: string;
  ready: number;
  wanted: number;
  /** `replicas: MIN..MAX`: the bounds `troupe scale` may resize the group within (null: a fixed size). */
  range: { min: number; max: number } | null;
}

/** A service as `troupe ps` shows it: its deployment, where it is called, and its replica groups. */
export interface ServiceSummary {
  /** The deployment running (dstack's `deployment=N`): 0 as submitted. */
  deployment: number;
  /** Empty until the service's first routing table is on a gateway. */
  endpoints: string[];
  groups: ReplicaGroupSummary[];
}

/** The service's summary, from its run's state; null for a task. */
export function serviceSummary(state: Pick<RunState, 'service' | 'groups' | 'jobs'>): ServiceSummary | null {
  const service = state.service;
  if (service === null) return null;
  return {
    deployment: service.deployment,
    endpoints: service.endpoints,
    groups: state.groups.map((group) => ({
      group: group.name,
      ready: state.jobs.filter((job) => job.group_index === group.index && job.status === 'READY').length,
      wanted: group.nodes,
      range: group.nodes_range,
    })),
  };
}
