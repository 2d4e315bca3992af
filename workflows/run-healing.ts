import { activeJobs, addressBookOf, describeJob, nextAttempt } from './job-transitions';
import { newAttemptsSignal, startAttemptsSignal } from './messages';
import { teardownActivities } from './node-group-activities';
import type { Outcome, Run } from './run-context';
import { jobRefOf } from './run-job-refs';
import { dependentsOf, jobPlanOf, type LiveRun } from './run-live';
import { currentPeers, noteBookSent } from './run-peers';
import type { JobState } from './run-state';
import type { Submission } from './submission';
import { dependencyWaits, isJobReady, usesDependencies } from './startup-order';

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

/**
 * New attempts of `jobs`: each one's current attempt ends (as `ended` says, if still open), the
 * group is asked for new machines, and the old ones are given back once those are provisioned.
 */
export function replaceJobs(run: Run, submission: Submission, live: LiveRun, jobs: JobState[], ended: string, restart: boolean): void {
  const byGroup = new Map<number, JobState[]>();
  for (const job of jobs) byGroup.set(job.group_index, [...(byGroup.get(job.group_index) ?? []), job]);
  for (const [g, members] of byGroup) {
    const release = members.flatMap((job) => jobRefOf(run, job) ?? []);
    for (const job of members) {
      nextAttempt(job, { status: 'TERMINATED', reason: 'TERMINATED_BY_SERVER', message: ended }, restart);
      live.attemptsToStart.set(job.job_num, job.attempt);
    }
    const plans = members.map((job) => jobPlanOf(run.input.plan, live, job));
    void submission.children[g]?.signal(newAttemptsSignal, { jobs: plans, release });
  }
  run.version += 1;
}

/** The failed job's group restarts it (or all its nodes) within its budget; null when that is not its policy. */
function heal(run: Run, submission: Submission, live: LiveRun, job: JobState, nowMs: number): Outcome | null {
  const group = run.input.plan.groups[job.group_index];
  const policy = group?.on_failure;
  if (!group || !policy || policy.action === 'fail-run') return null;
  const times = live.restartTimes[group.index] ?? [];
  const recent = policy.within_s === null ? times : times.filter((t) => nowMs - t < (policy.within_s ?? 0) * 1000);
  if (recent.length >= policy.max_restarts) {
    const window = policy.within_s === null ? '' : ` within ${formatSeconds(policy.within_s)}`;
    const retryEvent = run.failureEvents.get(job.job_num) ?? 'error';
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
  const targets = policy.action === 'restart-node' ? [job] : activeJobs(run.state).filter((j) => j.group_index === group.index);
  replaceJobs(run, submission, live, targets, `restarted with group ${group.name} after ${label} failed`, true);
  live.restartingGroups.add(group.index);
  for (const dependent of dependentsOf(run.input.plan, group.index)) {
    if (dependent.on_dependency_restart === 'restart') live.dependentsToRestart.add(dependent.index);
  }
  return null;
}

/**
 * Failed nodes of groups that heal are replaced; a node added by a resize that failed before it
 * ran is taken out again (the resize fails). Returns the run's outcome when a budget ran out.
 */
export function healFailures(run: Run, submission: Submission): Outcome | null {
  const { live } = run;
  if (!live) return null;
  const nowMs = Date.now();
  for (const job of activeJobs(run.state)) {
    if (job.status !== 'FAILED') continue;
    if (live.addedByResize.has(job.job_num) && job.running_at === null) {
      job.removed = true;
      live.addedByResize.delete(job.job_num);
      live.attemptsToStart.delete(job.job_num);
      const ref = jobRefOf(run, job);
      // Given up on, its machine still goes back with the run's teardown (releaseRun).
      if (ref) void teardownActivities.releaseJobs({ backend: run.input.backend, jobs: [ref], grace_s: 0 }).catch(() => undefined);
      continue;
    }
    const outcome = heal(run, submission, live, job, nowMs);
    if (outcome) return outcome;
  }
  return null;
}

/** A group whose restart is over (every node READY again) lets its `restart` dependents restart. */
export function restartDependents(run: Run, submission: Submission): void {
  const { live } = run;
  if (!live) return;
  const { plan } = run.input;
  for (const g of [...live.restartingGroups]) {
    const members = activeJobs(run.state).filter((j) => j.group_index === g);
    if (members.every((j) => isJobReady(plan, j) && !live.attemptsToStart.has(j.job_num))) live.restartingGroups.delete(g);
  }
  for (const d of [...live.dependentsToRestart]) {
    const deps = plan.groups[d]?.depends_on ?? [];
    if (deps.some((g) => live.restartingGroups.has(g))) continue;
    live.dependentsToRestart.delete(d);
    const members = activeJobs(run.state).filter((j) => j.group_index === d && !live.attemptsToStart.has(j.job_num));
    const back = deps.map((g) => plan.groups[g]?.name).join(', ');
    replaceJobs(run, submission, live, members, `restarted because ${back} restarted (on_dependency_restart: restart)`, true);
  }
}

/**
 * New attempts whose machine is provisioned start once the order allows (the groups they depend
 * on ready), each with the address book as it is now.
 */
export async function startNewAttempts(run: Run, submission: Submission): Promise<void> {
  const { live } = run;
  if (!live || live.attemptsToStart.size === 0) return;
  const { plan } = run.input;
  const waits = usesDependencies(plan) ? dependencyWaits(plan, run.state.jobs) : null;
  const book = addressBookOf(run.state);
  if (!book) return;
  const due = [...live.attemptsToStart].flatMap(([n, attempt]) => {
    const job = run.state.jobs[n];
    if (!job || job.attempt !== attempt || job.removed) {
      live.attemptsToStart.delete(n);
      return [];
    }
    return job.instance !== null && (waits === null || waits[job.group_index] === null) ? [job] : [];
  });
  if (due.length === 0) return;
  const peers = currentPeers(run);
  noteBookSent(live, due, peers.version);
  for (const job of due) live.attemptsToStart.delete(job.job_num);
  const groups = [...new Set(due.map((job) => job.group_index))];
  await Promise.all(
    groups.map((g) =>
      submission.children[g]?.signal(startAttemptsSignal, {
        jobs: due.filter((job) => job.group_index === g).map((job) => ({ job_num: job.job_num, attempt: job.attempt })),
        book: { ...book, peers },
      }),
    ),
  );
}

