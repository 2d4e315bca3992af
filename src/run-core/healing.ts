import type { JobState } from '../contract/run-state';
import type { Failure } from './ending';
import type { Decision, Effect } from './effects';
import type { RunEvent } from './events';
import { describeJob, groupMembers, nextAttempt, activeJobs } from './jobs';
import { dependentsOf, takeOutFailed, type LiveCore } from './live';
import type { RunCore } from './state';
import { isJobReady } from './startup-order';
import { ofRevisionRolling } from './revisions';

/**
 * Groups that heal (Troupe's `on_failure`): a failed node is replaced by a new machine at the same
 * rank (`restart-node`), or every node of its group is (`restart-group`), while the rest of the
 * run goes on; groups that depend on it keep running or restart too (`on_dependency_restart`).
 * Past the group's budget the submission fails, naming the group, its restarts and the last
 * failure. A node added by a resize under way that fails is taken out again (the resize fails).
 *
 * It looks on each `tick` of a started submission, before the outcome policy judges it: a node
 * it replaces has not failed the run. Pure: `now` (epoch ms) comes in; the job records of
 * `core.run` change in place (src/run-core/jobs.ts), the rest is a new core.
 */
export function decideHealing(core: RunCore, event: RunEvent, now: number): Decision<RunCore> {
  const effects: Effect[] = [];
  if (event.kind !== 'tick' || !core.live || core.submission.ending || core.submission.phase !== 'started') return { state: core, effects };
  let next: RunCore = core;
  for (const job of activeJobs(core.run)) {
    if (job.status !== 'FAILED') continue;
    const live: LiveCore = next.live ?? core.live;
    if (live.added_by_resize.includes(job.job_num)) {
      next = takeOutFailed(next, [job], effects);
      continue;
    }
    const healed = heal(next, job, now, effects);
    // A new revision's replica past its budget turns its rollout back instead (coherent-rollout.ts: failedNew); the serving revision goes on.
    if ('failure' in healed && ofRevisionRolling(next, job.job_num)) continue;
    if ('failure' in healed) {
      effects.push({ kind: 'end-submission', ending: healed.failure });
      return { state: { ...next, submission: { ...next.submission, ending: healed.failure } }, effects };
    }
    next = healed.core;
  }
  next = restartDependents(next, now, effects);
  return { state: next, effects };
}

/** Every node of a restarting group runs its new attempt and is READY (RUNNING without a probe). */
export function restartOver(core: RunCore, group: number): boolean {
  const members = groupMembers(core.run.jobs, group);
  return members.every((j) => isJobReady(core.plan, j) && !(j.job_num in (core.live?.attempts_to_start ?? {})));
}

function formatSeconds(s: number): string {
  if (s % 3600 === 0) return `${s / 3600}h`;
  if (s % 60 === 0) return `${s / 60}m`;
  return `${s}s`;
}

/** The failed job's group restarts it (or all its nodes) within its budget, or the budget has run out. */
function heal(core: RunCore, job: JobState, now: number, effects: Effect[]): { core: RunCore } | { failure: Failure } {
  const live = core.live;
  const group = core.plan.groups[job.group_index];
  const policy = group?.on_failure;
  if (!live || !group || !policy || policy.action === 'fail-run') return { core };
  const times = live.restart_times[group.index] ?? [];
  const recent = policy.within_s === null ? times : times.filter((t) => now - t < (policy.within_s ?? 0) * 1000);
  if (recent.length >= policy.max_restarts) {
    const window = policy.within_s === null ? '' : ` within ${formatSeconds(policy.within_s)}`;
    return {
      failure: {
        kind: 'failed',
        job_num: job.job_num,
        retry_event: core.failure_events[job.job_num] ?? 'error',
        message: `group ${group.name}: restart budget exhausted (${recent.length} of max_restarts ${policy.max_restarts}${window}); last failure: ${describeJob(job)}`,
      },
    };
  }
  const stateGroup = core.run.groups[group.index];
  if (stateGroup) stateGroup.restarts += 1;
  let next: RunCore = { ...core, live: { ...live, restart_times: live.restart_times.map((t, g) => (g === group.index ? [...t, now] : t)) } };
  const label = `${job.group_name}/${job.group_job_index}`;
  const targets = policy.action === 'restart-node' ? [job] : groupMembers(core.run.jobs, group.index).filter((j) => !live.added_by_resize.includes(j.job_num));
  next = replace(next, targets, `restarted with group ${group.name} after ${label} failed`, now, effects);
  return { core: markRestarting(next, group.index) };
}

/**
 * New attempts of `jobs` (one group's): each one's current attempt ends as `ended` says (if still
 * open), the group is asked for new machines, and the old ones are given back once those are provisioned.
 */
function replace(core: RunCore, jobs: JobState[], ended: string, now: number, effects: Effect[]): RunCore {
  const first = jobs[0];
  if (!first) return core;
  const iso = new Date(now).toISOString();
  const release = jobs.flatMap((job) => (job.instance ? [{ job_num: job.job_num, attempt: job.attempt, instance: job.instance }] : []));
  const failures = { ...core.failure_events };
  for (const job of jobs) {
    nextAttempt(job, { status: 'TERMINATED', reason: 'TERMINATED_BY_SERVER', message: ended }, true, iso);
    delete failures[job.job_num];
  }
  const attempts = jobs.map((job) => ({ job_num: job.job_num, attempt: job.attempt }));
  effects.push({ kind: 'new-attempts', group: first.group_index, jobs: attempts, release, restart: true });
  const live = core.live;
  return live
    ? { ...core, failure_events: failures, live: { ...live, attempts_to_start: { ...live.attempts_to_start, ...Object.fromEntries(attempts.map((a) => [a.job_num, a.attempt])) } } }
    : { ...core, failure_events: failures };
}

/** A group restarted: its `on_dependency_restart: restart` dependents follow once it is back. */
function markRestarting(core: RunCore, group: number): RunCore {
  const live = core.live;
  if (!live) return core;
  const followers = new Set(dependentsOf(core.plan, group).filter((d) => d.on_dependency_restart === 'restart').map((d) => d.index));
  const groups = live.groups.map((g, i) => ({
    restarting: g.restarting || i === group,
    restart_after_dependencies: g.restart_after_dependencies || followers.has(i),
  }));
  return { ...core, live: { ...live, groups } };
}

/** A group whose restart is over (every node READY again) lets its waiting dependents restart. */
function restartDependents(core: RunCore, now: number, effects: Effect[]): RunCore {
  let next = core;
  const over = (core.live?.groups ?? []).map((g, i) => g.restarting && restartOver(core, i));
  if (over.some(Boolean) && next.live) {
    const live: LiveCore = next.live;
    next = { ...next, live: { ...live, groups: live.groups.map((g, i) => (over[i] ? { ...g, restarting: false } : g)) } };
  }
  for (const [d, group] of (next.live?.groups ?? []).entries()) {
    if (!group.restart_after_dependencies) continue;
    const deps = core.plan.groups[d]?.depends_on ?? [];
    if (deps.some((g) => next.live?.groups[g]?.restarting)) continue;
    const live: LiveCore | null = next.live;
    if (!live) break;
    next = { ...next, live: { ...live, groups: live.groups.map((g, i) => (i === d ? { ...g, restart_after_dependencies: false } : g)) } };
    // Nodes that have not started yet start with the new book anyway: only running ones restart.
    const members = groupMembers(next.run.jobs, d).filter((j) => j.running_at !== null && !(j.job_num in live.attempts_to_start));
    if (members.length === 0) continue;
    const back = deps.map((g) => core.plan.groups[g]?.name).join(', ');
    next = replace(next, members, `restarted because ${back} restarted (on_dependency_restart: restart)`, now, effects);
    next = markRestarting(next, d);
  }
  return next;
}
