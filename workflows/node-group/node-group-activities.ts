import { ActivityCancellationType, proxyActivities, proxyLocalActivities, type LocalActivityOptions } from '@temporalio/workflow';
import type { TroupeActivities } from '../../activities';
import { FailureType } from '../../src/run-core/failure-table';
import type { NodeGroupInput } from '../../src/contract/node-group-input';

/** How a group's activities are retried and timed out. */

const HEARTBEAT_TIMEOUT = '10s';

/**
 * No capacity is retried while the run's retry covers it and its duration lasts; other errors a
 * few times. A new attempt of a running run (a restart, a resize) is not bound to the duration,
 * which counts from the run's submission: it gets its attempts, each within the attempt timeout.
 */
function provisionOptions(input: NodeGroupInput, newAttempt: boolean): LocalActivityOptions {
  const retriesNoCapacity = !newAttempt && input.retry?.on_events.includes('no-capacity') === true && input.retry_deadline_ms !== null;
  const remainingMs = retriesNoCapacity ? Math.max(1_000, (input.retry_deadline_ms ?? 0) - Date.now()) : null;
  return {
    startToCloseTimeout: `${input.options.provision_attempt_timeout_s}s`,
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    ...(remainingMs !== null ? { scheduleToCloseTimeout: remainingMs } : {}),
    retry: {
      initialInterval: '1s',
      backoffCoefficient: 2,
      maximumInterval: '30s',
      ...(retriesNoCapacity ? {} : { maximumAttempts: 5 }),
      nonRetryableErrorTypes: [
        FailureType.SubmissionClosed,
        FailureType.UnknownBackend,
        ...(retriesNoCapacity ? [] : [FailureType.NoCapacity]),
      ],
    },
  };
}

/**
 * A backend that provisions on the worker's own machine, in milliseconds (the local fleet), is
 * called as a local activity, inside the group's workflow task, without the two round trips through
 * the server an activity takes (schedule, then its result in a new task).
 */
export function provisionJobsActivity(input: NodeGroupInput, newAttempt = false) {
  return input.capabilities.provisions_on_worker
    ? proxyLocalActivities<TroupeActivities>(provisionOptions(input, newAttempt)).provisionJobs
    : proxyActivities<TroupeActivities>({ ...provisionOptions(input, newAttempt), heartbeatTimeout: HEARTBEAT_TIMEOUT }).provisionJobs;
}

export const batchActivities = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '3650 days',
  heartbeatTimeout: HEARTBEAT_TIMEOUT,
  retry: { initialInterval: '500ms', maximumInterval: '10s', nonRetryableErrorTypes: [FailureType.UnknownBackend] },
});

/** Lasts as long as the batch's jobs; a crashed worker's activity is picked up again by the next one. */
export const supervisedActivities = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '3650 days',
  heartbeatTimeout: HEARTBEAT_TIMEOUT,
  cancellationType: ActivityCancellationType.TRY_CANCEL,
  retry: { initialInterval: '500ms', maximumInterval: '10s', nonRetryableErrorTypes: [FailureType.UnknownBackend] },
});

/** Stopping and giving back machines must finish: retried with back-off for a long while. */
export const teardownActivities = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '5m',
  scheduleToCloseTimeout: '30m',
  heartbeatTimeout: '30s',
  retry: { initialInterval: '1s', maximumInterval: '30s' },
});
