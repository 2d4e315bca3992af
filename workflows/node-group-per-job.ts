import { CancellationScope, condition, isCancellation, proxyActivities, ActivityCancellationType } from '@temporalio/workflow';
import type { TroupeActivities } from '../activities';
import type { Instance, JobRef } from '../src/backends/backend';
import type { JobPlan } from '../src/plan/plan-schema';
import { FailureType } from './failure-types';
import { classifyReadyFailure, classifyRunnerWaitFailure, classifyRunningFailure, type ClassifiedFailure } from './failures';
import type { AddressBook, JobEvent } from './messages';
import type { NodeGroupInput } from './node-group-workflow';

/**
 * How a group ran its jobs before batches: three activities per job (runner, start, watch) and
 * its own readiness probe. Only runs whose history began that way take this path (they have no
 * `group-batches` marker): kept so that they go on after an upgrade, and replay.
 */

const HEARTBEAT_TIMEOUT = '10s';

export async function runJobOneByOne(
  input: NodeGroupInput,
  job: JobPlan,
  instance: Instance | undefined,
  addresses: AddressBook,
  mayStart: ReadonlySet<number>,
  report: (events: JobEvent[]) => Promise<void>,
): Promise<void> {
  if (!instance) return;
  const ref: JobRef = {
    run_id: input.run_uid,
    run_name: input.run.run_name,
    submission: input.submission,
    job_num: job.job_num,
    job_name: job.job_name,
    instance,
  };
  const fail = (failure: ClassifiedFailure) => report([{ kind: 'failed', job_num: job.job_num, ...failure }]);
  // What the Web UI shows for each activity: "start prefill/0 on 10.213.4.2 (local)".
  const label = `${job.node_group_name}/${job.node_group_job_index}`;
  const where = `${instance.internal_ip} (${instance.host})`;
  try {
    await runnerActivities(input).waitRunnerReady.executeWithOptions({ summary: `wait for the runner of ${label} on ${where}` }, [
      { backend: input.backend, job: ref },
    ]);
  } catch (err) {
    if (isCancellation(err)) throw err;
    await fail(classifyRunnerWaitFailure(err, input.options.runner_ready_timeout_s));
    return;
  }
  await condition(() => mayStart.has(job.job_num));
  try {
    const { pid } = await jobActivities.startJob.executeWithOptions({ summary: `start ${label} on ${where}` }, [
      {
        backend: input.backend,
        job: ref,
        run: input.run,
        run_uid: input.run_uid,
        plan_job: job,
        addresses,
        group_sizes: input.group_sizes,
      },
    ]);
    await report([{ kind: 'running', job_num: job.job_num, pid }]);
    // Readiness is probed while the job is watched; the probing stops when the job ends.
    const readiness = new CancellationScope();
    const probe = input.group.ready;
    const ready = probe
      ? readiness
          .run(() =>
            readyActivities.waitJobReady.executeWithOptions({ summary: `probe ${label} on ${where} until ready` }, [
              {
                backend: input.backend,
                job: ref,
                probe,
                deadline_ms: Date.now() + probe.timeout_s * 1000,
                label,
              },
            ]),
          )
          .then(
            () => report([{ kind: 'ready', job_num: job.job_num }]),
            (err: unknown) => (isCancellation(err) ? undefined : fail(classifyReadyFailure(err))),
          )
      : Promise.resolve();
    try {
      const { exit_code } = await watchActivities.watchJob.executeWithOptions({ summary: `watch ${label} on ${where}` }, [
        { backend: input.backend, job: ref, interval_ms: input.options.watch_interval_ms },
      ]);
      readiness.cancel();
      await ready;
      await report([{ kind: 'exited', job_num: job.job_num, exit_code }]);
    } finally {
      readiness.cancel();
    }
  } catch (err) {
    if (isCancellation(err)) throw err;
    await fail(classifyRunningFailure(err));
  }
}

function runnerActivities(input: NodeGroupInput) {
  return proxyActivities<TroupeActivities>({
    scheduleToCloseTimeout: `${input.options.runner_ready_timeout_s}s`,
    startToCloseTimeout: '60s',
    heartbeatTimeout: HEARTBEAT_TIMEOUT,
    retry: { initialInterval: '200ms', backoffCoefficient: 1.5, maximumInterval: '5s', nonRetryableErrorTypes: [FailureType.UnknownBackend] },
  });
}

const jobActivities = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '120s',
  heartbeatTimeout: HEARTBEAT_TIMEOUT,
  retry: { initialInterval: '500ms', maximumAttempts: 10, nonRetryableErrorTypes: [FailureType.UnknownBackend, FailureType.SecretKey, FailureType.SubmissionClosed] },
});

/** The watch lasts as long as the job; a crashed worker's watch is picked up again by the next one. */
const readyActivities = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '3650 days',
  heartbeatTimeout: HEARTBEAT_TIMEOUT,
  retry: { initialInterval: '500ms', maximumInterval: '5s', nonRetryableErrorTypes: [FailureType.NotReady, FailureType.UnknownBackend] },
});

const watchActivities = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '3650 days',
  heartbeatTimeout: HEARTBEAT_TIMEOUT,
  cancellationType: ActivityCancellationType.TRY_CANCEL,
  retry: {
    initialInterval: '500ms',
    maximumInterval: '10s',
    nonRetryableErrorTypes: [FailureType.InstanceUnreachable, FailureType.JobVanished, FailureType.UnknownBackend],
  },
});
