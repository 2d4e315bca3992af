import type { z } from 'zod';
import type { Plan, RetryPolicy } from '../plan/plan-schema';
import type { RunState } from '../contract/run-state';
import { freshJobsOf } from './jobs';
import { isLivePlan, newLiveCore } from './live';
import type { RunCoreSchema, ServiceCoreSchema, SubmissionCoreSchema } from '../contract/core-state-schema';

/**
 * The run's core state: plain, serialisable data that its policies decide over (its schema, with
 * what each field means: state-schema.ts). Only the run's loop (workflows/run/run-loop.ts) replaces it,
 * with what a policy returned. `run` is what queries answer; its job records are changed in place
 * by the policies (jobs.ts), the rest is replaced.
 */
export type RunCore = z.infer<typeof RunCoreSchema>;
export type SubmissionCore = z.infer<typeof SubmissionCoreSchema>;
/** A service's routing (what each field means: state-schema.ts; the policy: routing.ts). */
export type ServiceCore = z.infer<typeof ServiceCoreSchema>;

export const BACKOFF_MAX_S = 300;

/** A new submission: unlocking, nothing decided yet. */
export function newSubmissionCore(): SubmissionCore {
  return { phase: 'unlocking', addresses_due_ms: null, running_since_ms: null, group_failure: null, ending: null };
}

/** The autoscaler before its first reading. */
export function newAutoscale(): ServiceCore['autoscale'] {
  return { reading: [], read_at_ms: null, sizes: [], last: [], resizes_made: 0, problem: null, scraping: false, held_seen: false, samples: [] };
}

/** A service before its first routing table. */
export function newServiceCore(): ServiceCore {
  return { generation: 0, key: '', pushing: null, delivered_key: null, retry_at_ms: null, pushed_at_ms: null, problem: null, deployment: 0, revision_of: {}, current_revision: 0, last_good: null, resizes_made: 0, rollout: null, autoscale: newAutoscale() };
}

/** Who the run is (from Temporal, never from its input) and where it runs. */
export interface RunIdentity {
  run_id: string;
  run_uid: string;
  backend: string;
}

/** A run's first core state: every job fresh, the first submission unlocking; `now` in epoch ms. */
export function newRunCore(args: {
  plan: Plan;
  identity: RunIdentity;
  limits: RunCore['limits'];
  retry: RetryPolicy | null;
  backoff_s: number;
  now: number;
}): RunCore {
  const { plan, identity, retry, now } = args;
  const iso = new Date(now).toISOString();
  const run: RunState = {
    run_name: plan.run_name,
    ...identity,
    status: 'SUBMITTED',
    termination_reason: null,
    message: null,
    submission: 0,
    submitted_at: iso,
    finished_at: null,
    groups: plan.groups.map((g) => ({ index: g.index, name: g.name, nodes: g.nodes, waiting_for: null, nodes_range: g.nodes_range ?? null, restarts: 0 })),
    jobs: freshJobsOf(plan.jobs, iso),
    jobs_paged: false,
    peers_version: 0,
    service: plan.service ? { endpoints: [], auth: plan.service.auth !== null, table_generation: 0, deployment: 0, rollout: null } : null,
  };
  return {
    run,
    plan,
    limits: args.limits,
    retry,
    retry_deadline_ms: retry ? now + retry.duration_s * 1000 : null,
    backoff_s: args.backoff_s,
    stop_request: null,
    failure_events: {},
    submission: newSubmissionCore(),
    live: isLivePlan(plan) ? newLiveCore(plan) : null,
    service: plan.service ? newServiceCore() : null,
  };
}
