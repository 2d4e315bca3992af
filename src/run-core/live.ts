import type { z } from 'zod';
import type { GroupPlan, JobPlan, Plan } from '../plan/plan-schema';
import type { LiveCoreSchema, ResizeSchema } from '../contract/core-state-schema';
import type { JobState } from '../contract/run-state';
import type { Effect } from './effects';

/**
 * What a live run (one that heals, resizes or keeps live peers: Troupe's extensions) keeps in its
 * core: the restart budgets, each group's restart phase, the new attempts not yet let start, the
 * ranks and plans resizes added, and the resizes under way (what each field means:
 * state-schema.ts). Changed only by the policies, each returning a new core.
 */
export type LiveCore = z.infer<typeof LiveCoreSchema>;
export type Resize = z.infer<typeof ResizeSchema>;

/** A run heals, resizes or keeps live peers when any group asks for it; a service always does (it lives until stopped). */
export function isLivePlan(plan: Plan): boolean {
  return plan.service !== undefined || plan.groups.some((g) => (g.on_failure && g.on_failure.action !== 'fail-run') || g.nodes_range || g.on_peers_change || g.ready_min);
}

export function newLiveCore(plan: Plan): LiveCore {
  return {
    restart_times: plan.groups.map(() => []),
    groups: plan.groups.map(() => ({ restarting: false, restart_after_dependencies: false })),
    attempts_to_start: {},
    added_by_resize: [],
    added_plans: {},
    resizes: [],
    peers: { book: null, key: '', sent: {}, seen: {}, publishing: null, problem: null },
  };
}

/** Groups that list `index` in their depends_on. */
export function dependentsOf(plan: Plan, index: number): GroupPlan[] {
  return plan.groups.filter((g) => (g.depends_on ?? []).includes(index));
}

/**
 * The ranks a resize is draining (a scale-down, a deployment's old replica): off the gateways' table
 * and not ready in the address book, so neither a gateway nor a router sends them new requests.
 */
export function drainingRanks(live: LiveCore | null): ReadonlySet<number> {
  return new Set(live?.resizes.flatMap((r) => (r.phase === 'draining' ? r.draining : [])) ?? []);
}

/** Nothing of a restart or resize under way: what a hand-over needs. */
export function isLiveSettled(live: LiveCore): boolean {
  return (
    Object.keys(live.attempts_to_start).length === 0 &&
    live.added_by_resize.length === 0 &&
    live.resizes.length === 0 &&
    live.groups.every((g) => !g.restarting && !g.restart_after_dependencies)
  );
}

/** A core with live state (src/run-core/state.ts's RunCore). */
interface HasLive {
  live: LiveCore | null;
}

function withLive<C extends HasLive>(core: C, change: (live: LiveCore) => LiveCore): C {
  return core.live ? { ...core, live: change(core.live) } : core;
}

/** These attempts wait to be let start. */
export function withAttemptsToStart<C extends HasLive>(core: C, jobs: ReadonlyArray<{ job_num: number; attempt: number }>): C {
  return withLive(core, (live) => ({
    ...live,
    attempts_to_start: { ...live.attempts_to_start, ...Object.fromEntries(jobs.map((j) => [j.job_num, j.attempt])) },
  }));
}

/** These ranks no longer wait to be let start (started, replaced, or removed). */
export function withoutAttemptsToStart<C extends HasLive>(core: C, jobNums: readonly number[]): C {
  if (!core.live || !jobNums.some((n) => n in (core.live?.attempts_to_start ?? {}))) return core;
  return withLive(core, (live) => {
    const left = { ...live.attempts_to_start };
    for (const n of jobNums) delete left[n];
    return { ...live, attempts_to_start: left };
  });
}

/**
 * Failed ranks taken out of the run rather than healed (a resize's growth that failed, a rolling-out
 * revision's replica): removed (the outcome no longer counts them), no longer waiting to start, their
 * machines given back. The job records change in place, as the policies' do.
 */
export function takeOutFailed<C extends HasLive>(core: C, jobs: readonly JobState[], effects: Effect[]): C {
  for (const job of jobs) {
    job.removed = true;
    if (job.instance) effects.push({ kind: 'give-back', job_num: job.job_num, attempt: job.attempt, instance: job.instance });
  }
  return withoutAttemptsToStart(core, jobs.map((j) => j.job_num));
}

/** Ranks a resize adds (`added`) or whose addition is over, either way (`added: false`). */
export function withAddedByResize<C extends HasLive>(core: C, jobNums: readonly number[], added: boolean): C {
  return withLive(core, (live) => ({
    ...live,
    added_by_resize: added ? [...new Set([...live.added_by_resize, ...jobNums])] : live.added_by_resize.filter((n) => !jobNums.includes(n)),
  }));
}

/** The plan of a rank at its current attempt: the one a resize (or a deployment) made it, else the task's. */
export function jobPlanOf(plan: Plan, live: LiveCore | null, job: JobState): JobPlan {
  const base = live?.added_plans[job.job_num] ?? plan.jobs[job.job_num];
  if (!base) throw new Error(`no plan for job ${job.job_num}`);
  return job.attempt > 0 ? { ...base, attempt: job.attempt } : base;
}

