import { activeJobs, describeJob, groupMembers, nextAttempt } from '../src/run-core/jobs';
import { newAttemptsSignal, startAttemptsSignal } from './messages';
import { teardownActivities } from './node-group-activities';
import type { Failure } from '../src/run-core/ending';
import type { Run } from './run-context';
import { jobRefOf } from './run-job-refs';
import { dependentsOf, jobPlanOf, type LiveRun } from './run-live';
import { bookToStartWith } from './run-peers';
import type { JobState } from './run-state';
import type { Submission } from './submission';
import { dependencyWaits, isJobReady, startsInGroupOrder, usesDependencies } from '../src/run-core/startup-order';
import { metricsOfRun } from './run-metrics';

/**
 * Groups that heal (Troupe's `on_failure`): a failed node is replaced by a new machine at the same
 * rank (`restart-node`), or every node of its group is (`restart-group`), while the rest of the
 * run goes on; groups that depend on it keep running or restart too (`on_dependency_restart`).
 * Past the group's budget the run fails, naming the group, its restarts and the last failure.
 */

function formatSeconds(s: number): string {
  if (s % 3600 === 0) return `${s / 3600}h`;
  if (s % 60 === 0) return `${s / 60}m`;
  return `${s}s`;
}

/** Gives back machines the run no longer wants (not awaited: the run's teardown gives back what this misses). */
function release(run: Run, refs: ReturnType<typeof jobRefOf>[], grace_s: number): void {
  const jobs = refs.flatMap((ref) => ref ?? []);
  if (jobs.length === 0) return;
  void teardownActivities.releaseJobs({ backend: run.input.backend, jobs, grace_s }).catch(() => undefined);
}

/**
 * New attempts of `jobs`: each one's current attempt ends (as `ended` says, if still open), the
 * group is asked for new machines, and the old ones are given back once those are provisioned.
 */
export function replaceJobs(run: Run, submission: Submission, live: LiveRun, jobs: JobState[], ended: string, restart: boolean): void {
  const byGroup = new Map<number, JobState[]>();
  for (const job of jobs) byGroup.set(job.group_index, [...(byGroup.get(job.group_index) ?? []), job]);
  for (const [g, members] of byGroup) {
    const old = members.flatMap((job) => jobRefOf(run, job) ?? []);
    for (const job of members) {
      nextAttempt(job, { status: 'TERMINATED', reason: 'TERMINATED_BY_SERVER', message: ended }, restart, new Date().toISOString());
      const { [job.job_num]: _forgotten, ...failureEvents } = run.core.failure_events;
      run.core = { ...run.core, failure_events: failureEvents };
      live.attemptsToStart.set(job.job_num, job.attempt);
      // The first start-up pass must never start the rank's first plan on top of this attempt.
      submission.signalled.add(job.job_num);
    }
    const plans = members.map((job) => jobPlanOf(run.input.plan, live, job));
    if (restart && members[0]) metricsOfRun.nodesRestarted(members[0].group_name, members.length);
    // A group that is gone has failed the run already (the submission's childFailure).
    void submission.children[g]?.signal(newAttemptsSignal, { jobs: plans, release: old }).catch(() => undefined);
  }
  run.version += 1;
}

/** A group restarted: its `on_dependency_restart: restart` dependents follow once it is back. */
function markRestarting(run: Run, live: LiveRun, group: number): void {
  live.restartingGroups.add(group);
  for (const dependent of dependentsOf(run.input.plan, group)) {
    if (dependent.on_dependency_restart === 'restart') live.dependentsToRestart.add(dependent.index);
  }
}

/** The failed job's group restarts it (or all its nodes) within its budget; null when that is not its policy. */
function heal(run: Run, submission: Submission, live: LiveRun, job: JobState, nowMs: number): Failure | null {
  const group = run.input.plan.groups[job.group_index];
  const policy = group?.on_failure;
  if (!group || !policy || policy.action === 'fail-run') return null;
  const times = live.restartTimes[group.index] ?? [];
  const recent = policy.within_s === null ? times : times.filter((t) => nowMs - t < (policy.within_s ?? 0) * 1000);
  if (recent.length >= policy.max_restarts) {
    const window = policy.within_s === null ? '' : ` within ${formatSeconds(policy.within_s)}`;
    const retryEvent = run.core.failure_events[job.job_num] ?? 'error';
    return {
      kind: 'failed',
      job_num: job.job_num,
      retry_event: retryEvent,
      message: `group ${group.name}: restart budget exhausted (${recent.length} of max_restarts ${policy.max_restarts}${window}); last failure: ${describeJob(job)}`,
    };
  }
  times.push(nowMs);
  const stateGroup = run.state.groups[group.index];
  if (stateGroup) stateGroup.restarts += 1;
  const label = `${job.group_name}/${job.group_job_index}`;
  const targets = policy.action === 'restart-node' ? [job] : groupMembers(run.state.jobs, group.index).filter((j) => !live.addedByResize.has(j.job_num));
  replaceJobs(run, submission, live, targets, `restarted with group ${group.name} after ${label} failed`, true);
  markRestarting(run, live, group.index);
  return null;
}

/**
 * Failed nodes of groups that heal are replaced; a node added by a resize under way that fails is
 * taken out again (the resize fails). Returns the run's outcome when a budget ran out.
 */
export function healFailures(run: Run, submission: Submission): Failure | null {
  const { live } = run;
  if (!live) return null;
  release(run, live.unwanted.splice(0), 0);
  const nowMs = Date.now();
  for (const job of activeJobs(run.state)) {
    if (job.status !== 'FAILED') continue;
    if (live.addedByResize.has(job.job_num)) {
      job.removed = true;
      live.attemptsToStart.delete(job.job_num);
      release(run, [jobRefOf(run, job)], 0);
      continue;
    }
    const outcome = heal(run, submission, live, job, nowMs);
    if (outcome) return outcome;
  }
  return null;
}

/** Every node of a restarting group runs its new attempt and is READY (RUNNING without a probe). */
export function restartOver(run: Run, live: LiveRun, group: number): boolean {
  const members = groupMembers(run.state.jobs, group);
  return members.every((j) => isJobReady(run.input.plan, j) && !live.attemptsToStart.has(j.job_num));
}

/** A group whose restart is over (every node READY again) lets its `restart` dependents restart. */
export function restartDependents(run: Run, submission: Submission): void {
  const { live } = run;
  if (!live) return;
  const { plan } = run.input;
  for (const g of [...live.restartingGroups]) {
    if (restartOver(run, live, g)) live.restartingGroups.delete(g);
  }
  for (const d of [...live.dependentsToRestart]) {
    const deps = plan.groups[d]?.depends_on ?? [];
    if (deps.some((g) => live.restartingGroups.has(g))) continue;
    live.dependentsToRestart.delete(d);
    // Nodes that have not started yet start with the new book anyway: only running ones restart.
    const members = groupMembers(run.state.jobs, d).filter((j) => j.running_at !== null && !live.attemptsToStart.has(j.job_num));
    if (members.length === 0) continue;
    const back = deps.map((g) => plan.groups[g]?.name).join(', ');
    replaceJobs(run, submission, live, members, `restarted because ${back} restarted (on_dependency_restart: restart)`, true);
    markRestarting(run, live, d);
  }
}

/**
 * New attempts start once the order allows (the groups they depend on ready; inside their group,
 * the run's `startup_order`) and every new attempt of their group has its machine (a group
 * restarted whole starts with its new addresses), each with the address book as it is now.
 */
export async function startNewAttempts(run: Run, submission: Submission): Promise<void> {
  const { live } = run;
  if (!live || live.attemptsToStart.size === 0) return;
  const { plan } = run.input;
  const waits = usesDependencies(plan) ? dependencyWaits(plan, run.state.jobs) : null;
  const pending = [...live.attemptsToStart].flatMap(([n, attempt]) => {
    const job = run.state.jobs[n];
    if (!job || job.attempt !== attempt || job.removed) {
      live.attemptsToStart.delete(n);
      return [];
    }
    return [job];
  });
  const unplaced = new Set(pending.filter((job) => job.instance === null).map((job) => job.group_index));
  const due = pending.filter(
    (job) => !unplaced.has(job.group_index) && (waits === null || waits[job.group_index] === null) && startsInGroupOrder(plan, run.state.jobs, job),
  );
  if (due.length === 0) return;
  const book = bookToStartWith(run, due);
  if (!book) return;
  for (const job of due) live.attemptsToStart.delete(job.job_num);
  const groups = [...new Set(due.map((job) => job.group_index))];
  await Promise.all(
    groups.map((g) =>
      submission.children[g]
        ?.signal(startAttemptsSignal, { jobs: due.filter((job) => job.group_index === g).map((job) => ({ job_num: job.job_num, attempt: job.attempt })), book })
        .catch(() => undefined),
    ),
  );
}
