import type { Effect } from '../../src/run-core/effects';
import { jobPlanOf, withoutAttemptsToStart } from '../../src/run-core/live';
import { booksToStartWith } from '../../src/run-core/peers';
import { dependencyWaits, startsInGroupOrder, usesDependencies } from '../../src/run-core/startup-order';
import { newAttemptsSignal, startAttemptsSignal } from '../../src/contract/messages';
import { teardownActivities } from '../node-group/node-group-activities';
import type { Run } from './run-context';
import { attemptRefsOf } from './run-job-refs';
import { metricsOfRun } from './run-metrics';
import type { Submission } from './submission';

/**
 * New attempts of a run's ranks, as the shell carries them out: the group asked for new machines
 * (a restart the healing policy decided, src/run-core/healing.ts), machines given back, and new
 * attempts let start once the order allows.
 */

/** The group is asked for new machines for these ranks; the attempts they replace are given back once those are provisioned. */
export function askNewAttempts(run: Run, submission: Submission, effect: Extract<Effect, { kind: 'new-attempts' }>): void {
  const live = run.live;
  if (!live) return;
  const plans = effect.jobs.flatMap(({ job_num }) => {
    const job = run.state.jobs[job_num];
    return job ? [jobPlanOf(run.input.plan, run.core.live, job)] : [];
  });
  const release = attemptRefsOf(run, effect.release);
  // The first start-up pass must never start the rank's first plan on top of this attempt.
  for (const { job_num } of effect.jobs) submission.signalled.add(job_num);
  const first = run.state.jobs[effect.jobs[0]?.job_num ?? -1];
  if (effect.restart && first) metricsOfRun.nodesRestarted(first.group_name, effect.jobs.length);
  // A group that is gone has failed the run already (its group-failed event).
  void submission.children[effect.group]?.signal(newAttemptsSignal, { jobs: plans, release }).catch(() => undefined);
  run.version += 1;
}

/** Gives back the machines the run no longer wants (not awaited: the run's teardown gives back what this misses). */
export function releaseUnwanted(run: Run): void {
  const jobs = run.live?.unwanted.splice(0) ?? [];
  if (jobs.length === 0) return;
  void teardownActivities.releaseJobs({ backend: run.input.backend, jobs, grace_s: 0 }).catch(() => undefined);
}

/**
 * New attempts start once the order allows (the groups they depend on ready; inside their group,
 * the run's `startup_order`) and every new attempt of their group has its machine (a group
 * restarted whole starts with its new addresses), each with the address book as it is now.
 */
export async function startNewAttempts(run: Run, submission: Submission): Promise<void> {
  const waiting = run.core.live?.attempts_to_start ?? {};
  if (Object.keys(waiting).length === 0) return;
  const { plan } = run.input;
  const waits = usesDependencies(plan) ? dependencyWaits(plan, run.state.jobs) : null;
  const gone: number[] = [];
  const pending = Object.entries(waiting).flatMap(([key, attempt]) => {
    const job = run.state.jobs[Number(key)];
    if (!job || job.attempt !== attempt || job.removed) {
      gone.push(Number(key));
      return [];
    }
    return [job];
  });
  run.core = withoutAttemptsToStart(run.core, gone);
  const unplaced = new Set(pending.filter((job) => job.instance === null).map((job) => job.group_index));
  const due = pending.filter(
    (job) => !unplaced.has(job.group_index) && (waits === null || waits[job.group_index] === null) && startsInGroupOrder(plan, run.state.jobs, job),
  );
  if (due.length === 0) return;
  const start = booksToStartWith(run.core, due);
  run.core = start.core;
  const { starts } = start;
  if (!starts) return;
  run.core = withoutAttemptsToStart(run.core, due.map((job) => job.job_num));
  await Promise.all(
    starts.flatMap(({ jobs, book }) =>
      [...new Set(jobs.map((job) => job.group_index))].map((g) =>
        submission.children[g]
          ?.signal(startAttemptsSignal, { jobs: jobs.filter((job) => job.group_index === g).map((job) => ({ job_num: job.job_num, attempt: job.attempt })), book })
          .catch(() => undefined),
      ),
    ),
  );
}
