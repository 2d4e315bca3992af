import type { RunState } from '../contract/run-state';

/** A replica group of a service: how many of its replicas are READY (their probe passed) of the group's size. */
export interface ReplicaGroupSummary {
  group: string;
  ready: number;
  wanted: number;
  /** `replicas: MIN..MAX`: the bounds `troupe scale` may resize the group within (null: a fixed size). */
  range: { min: number; max: number } | null;
  /** Its replicas by revision (the deployment that started each), oldest first: more than one while a rollout is under way. */
  revisions: Array<{ revision: number; ready: number; replicas: number }>;
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
    groups: state.groups.map((group) => {
      const members = state.jobs.filter((job) => job.group_index === group.index && !job.removed);
      const revisions = [...new Set(members.map((job) => job.revision ?? 0))].sort((a, b) => a - b);
      return {
        group: group.name,
        ready: members.filter((job) => job.status === 'READY').length,
        wanted: group.nodes,
        range: group.nodes_range,
        revisions: revisions.map((revision) => {
          const of = members.filter((job) => (job.revision ?? 0) === revision);
          return { revision, ready: of.filter((job) => job.status === 'READY').length, replicas: of.length };
        }),
      };
    }),
  };
}
