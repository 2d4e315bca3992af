import { getExternalWorkflowHandle, isCancellation } from '@temporalio/workflow';
import type { JobRef } from '../../src/backends/backend';
import type { JobPlan } from '../../src/plan/plan-schema';
import { classifyBatchFailure, FailureType, type BatchJobFailure } from '../../src/run-core/failure-table';
import { classifyProvisioningFailure, classifyRunningFailure } from '../failures';
import { jobEventsSignal, type AddressBook, type JobEvent } from '../../src/contract/messages';
import { batchActivities, provisionJobsActivity, supervisedActivities } from './node-group-activities';
import type { NodeGroupInput } from '../../src/contract/node-group-input';
import { hostsOf, jobRef, labelOf, type GroupState } from './node-group-state';

/** The attempt an event is about, when not a node's first machine. */
export const attemptOf = (job: { attempt?: number | undefined }): { attempt?: number } => (job.attempt ? { attempt: job.attempt } : {});

/** What happened to the group's jobs, to the run. */
export function reportToRun(input: NodeGroupInput, events: JobEvent[]): Promise<void> {
  return getExternalWorkflowHandle(input.run_workflow_id).signal(jobEventsSignal, { submission: input.submission, events });
}

/**
 * Provisions `jobs` in one call; reports their addresses without waiting for the run to take them
 * (the next provisioning or the runners' wait goes on in the same workflow task). False: failed,
 * and reported so. `newAttempts`: new machines of a running run (restarts, resizes); when the
 * fleet has no room for them, `makeRoom` (giving back the machines they replace) runs and they are
 * tried once more.
 */
export async function provision(input: NodeGroupInput, group: GroupState, jobs: JobPlan[], newAttempts?: { makeRoom: (() => Promise<void>) | null }): Promise<boolean> {
  const request = { run_id: input.run_uid, run_workflow_id: input.run_workflow_id, run_name: input.run.run_name, submission: input.submission, group: input.group, jobs, fleets: input.run.fleets };
  const place = () => provisionJobsActivity(input, newAttempts !== undefined).executeWithOptions({ summary: `provision ${labelOf(jobs)}` }, [{ backend: input.backend, request }]);
  try {
    let placed;
    try {
      placed = await place();
    } catch (err) {
      const makeRoom = newAttempts?.makeRoom;
      if (isCancellation(err) || !makeRoom || classifyProvisioningFailure(err).reason !== 'FAILED_TO_START_DUE_TO_NO_CAPACITY') throw err;
      await makeRoom();
      placed = await place();
    }
    placed.forEach((instance, i) => {
      const job = jobs[i];
      if (job) group.instances.set(job.job_num, instance);
    });
    const reported = reportToRun(input, jobs.flatMap((job) => {
      const instance = group.instances.get(job.job_num);
      return instance ? [{ kind: 'provisioned' as const, job_num: job.job_num, ...attemptOf(job), instance }] : [];
    }));
    // Handled now, rethrown where the workflow awaits it (an unhandled rejection fails the task).
    reported.catch(() => undefined);
    group.inFlight.push(reported);
    return true;
  } catch (err) {
    if (isCancellation(err)) throw err;
    const failure = classifyProvisioningFailure(err);
    await reportToRun(input, jobs.map((job) => ({ kind: 'failed' as const, job_num: job.job_num, ...attemptOf(job), ...failure })));
    return false;
  }
}

/** Waits for the runners of all the placed jobs at once; tells the run of those that never answered. */
export async function awaitRunners(input: NodeGroupInput, group: GroupState, placed: JobPlan[]): Promise<void> {
  const failed = await awaitRunnersOf(input, group, placed);
  for (const job of placed) (failed.has(job.job_num) ? group.settled : group.runnerReady).add(job.job_num);
  group.runnersAnswered = true;
}

/** Waits for the runners of `placed` at once; reports those that never answered, and returns their ranks. */
export async function awaitRunnersOf(input: NodeGroupInput, group: GroupState, placed: JobPlan[]): Promise<Set<number>> {
  const failures = await waitForRunners(input, placed.map((job) => jobRef(input, group, job)), labelOf(placed));
  if (failures.length > 0) {
    const attempts = new Map(placed.map((job) => [job.job_num, attemptOf(job)]));
    await reportToRun(input, failures.map(({ job_num, ...failure }) => ({ kind: 'failed' as const, job_num, ...attempts.get(job_num), ...classifyBatchFailure(failure) })));
  }
  return new Set(failures.map((f) => f.job_num));
}

async function waitForRunners(input: NodeGroupInput, jobs: JobRef[], label: string): Promise<Array<BatchJobFailure & { job_num: number }>> {
  if (jobs.length === 0) return [];
  try {
    const { failed } = await batchActivities.waitRunnersReady.executeWithOptions({ summary: `wait for the runners of ${label} on ${hostsOf(jobs)}` }, [
      { backend: input.backend, jobs, timeout_s: input.options.runner_ready_timeout_s },
    ]);
    return failed;
  } catch (err) {
    if (isCancellation(err)) throw err;
    const { message } = classifyRunningFailure(err);
    return jobs.map((job) => ({ job_num: job.job_num, type: FailureType.RunnerWaitFailed, message }));
  }
}

/**
 * One activity starts the batch and supervises it until its last job ends; it reports to the run
 * itself. Without the book in the group's state, the activity reads it from the run. `probe:
 * false`: the jobs are known READY (taken up after a hand-over), not probed again.
 */
export async function runBatch(
  input: NodeGroupInput,
  group: GroupState,
  batch: JobPlan[],
  book: AddressBook | null = group.addresses,
  opts: { probe: boolean } = { probe: true },
): Promise<void> {
  const jobs = batch.map((job) => ({ ref: jobRef(input, group, job), plan_job: job }));
  const refs = jobs.map((j) => j.ref);
  const verb = opts.probe ? 'run' : 'supervise';
  try {
    await supervisedActivities.runJobs.executeWithOptions({ summary: `${verb} ${labelOf(batch)} on ${hostsOf(refs)}` }, [
      {
        backend: input.backend,
        run_workflow_id: input.run_workflow_id,
        submission: input.submission,
        run: { run_name: input.run.run_name, nodes_num: input.run.nodes_num, env: input.run.env, image: input.run.image, working_dir: input.run.working_dir },
        run_uid: input.run_uid,
        addresses: book,
        group_sizes: input.group_sizes,
        ...(input.group_names ? { group_names: input.group_names } : {}),
        jobs,
        probe: opts.probe ? (input.group.ready ?? null) : null,
        interval_ms: input.options.watch_interval_ms,
      },
    ]);
  } catch (err) {
    if (isCancellation(err)) throw err;
    // Jobs that already ended keep their outcome: the run ignores events for them.
    const failure = classifyRunningFailure(err);
    await reportToRun(input, refs.map((ref) => ({ kind: 'failed' as const, job_num: ref.job_num, ...attemptOf(ref), ...failure })));
  }
}
