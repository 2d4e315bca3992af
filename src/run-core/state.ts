import type { Plan, RetryEvent, RetryPolicy } from '../plan/plan-schema';
import type { RunState } from '../../workflows/run-state';
import type { Ending } from './ending';
import { freshJobsOf } from './jobs';
import { isLivePlan, newLiveCore, type LiveCore } from './live';

/**
 * The run's core state: plain, serialisable data that its policies decide over. Only the run's loop
 * (workflows/run-loop.ts) replaces it, with what a policy returned. `run` is what queries answer;
 * its job records are changed in place by the loop's own steps (jobs.ts), so that a policy not yet
 * moved into the core still sees the same records.
 */
export interface RunCore {
  run: RunState;
  plan: Plan;
  limits: {
    /** How long after the other groups are unlocked every job may take to get its address. */
    address_deadline_s: number;
    /** One provisioning attempt's limit (added to what is left of a no-capacity retry). */
    provision_attempt_timeout_s: number;
  };
  retry: RetryPolicy | null;
  /** Epoch ms when `retry.duration` runs out (null: no retry). */
  retry_deadline_ms: number | null;
  /** The next back-off before a resubmission (doubles each time, up to BACKOFF_MAX_S). */
  backoff_s: number;
  /** Asked to stop (`abort`: without grace). Outlives a submission. */
  stop_request: { abort: boolean } | null;
  /** The retry event each failed job counts as, by job_num (exits with an error count as `error`). */
  failure_events: Record<number, RetryEvent | null>;
  submission: SubmissionCore;
  /** Healing and resizing (null: the run uses none of Troupe's live extensions). */
  live: LiveCore | null;
}

/**
 * Where a submission is: `unlocking` until job 0 has its machine; `addressing` until every job has
 * an address (by `addresses_due_ms`); `started` once the book went out and jobs start in order.
 */
export type SubmissionPhase = 'unlocking' | 'addressing' | 'started';

export interface SubmissionCore {
  phase: SubmissionPhase;
  addresses_due_ms: number | null;
  /** When its first job ran (epoch ms): `max_duration` counts from it. */
  running_since_ms: number | null;
  /** The first group child that failed on its own, as the run's message. */
  group_failure: string | null;
  /** How it ends, once decided: from then on its jobs are teardown's, their events no longer count. */
  ending: Ending | null;
}

export const BACKOFF_MAX_S = 300;

export function newSubmissionCore(phase: SubmissionPhase = 'unlocking', runningSinceMs: number | null = null): SubmissionCore {
  return { phase, addresses_due_ms: null, running_since_ms: runningSinceMs, group_failure: null, ending: null };
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
  };
}
