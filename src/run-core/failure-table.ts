import type { RetryEvent } from '../plan/plan-schema';
import type { JobTerminationReason } from '../../workflows/run-state';

/**
 * `type` of the ApplicationFailures that activities throw, and the one table of what each means for
 * a job (FAILURE_TABLE). Plain constants and pure code: workflows, activities and clients import it.
 */
export const FailureType = {
  NoCapacity: 'NoCapacity',
  RunnerNotReady: 'RunnerNotReady',
  InstanceUnreachable: 'InstanceUnreachable',
  UnknownBackend: 'UnknownBackend',
  /** provision() for a submission that was already torn down. */
  SubmissionClosed: 'SubmissionClosed',
  /** The job's process is gone without an exit code (its directory was removed). */
  JobVanished: 'JobVanished',
  /** A readiness probe did not pass within its group's timeout. */
  NotReady: 'NotReady',
  /** A sealed env value cannot be opened (no key, or another key). */
  SecretKey: 'SecretKey',
  /** The job's env, hostfile or script cannot be written (a value no shell can carry). */
  InvalidJobFiles: 'InvalidJobFiles',
  /** An input (a client's) that claims a run's identity the workflow does not have (workflows/run-identity.ts). */
  ForgedRunIdentity: 'ForgedRunIdentity',
} as const;

/** A job that a batch activity could not start or keep: the failure's type and what went wrong. */
export interface BatchJobFailure {
  type: string;
  message: string;
}

/** What a failure of a job means, as dstack's `JobTerminationReason` answers it: its reason and the retry event it counts as. */
export interface FailureMeaning {
  reason: Extract<JobTerminationReason, 'FAILED_TO_START_DUE_TO_NO_CAPACITY' | 'INSTANCE_UNREACHABLE' | 'WAITING_RUNNER_LIMIT_EXCEEDED' | 'WAITING_READY_LIMIT_EXCEEDED' | 'EXECUTOR_ERROR'>;
  retry_event: RetryEvent;
}

/**
 * The one failure table: each failure type that means something of its own, first match wins
 * (no capacity before a lost host); any other type is an executor error, retried as `error`.
 */
const FAILURE_TABLE: ReadonlyArray<[string, FailureMeaning]> = [
  [FailureType.NoCapacity, { reason: 'FAILED_TO_START_DUE_TO_NO_CAPACITY', retry_event: 'no-capacity' }],
  [FailureType.InstanceUnreachable, { reason: 'INSTANCE_UNREACHABLE', retry_event: 'interruption' }],
  [FailureType.RunnerNotReady, { reason: 'WAITING_RUNNER_LIMIT_EXCEEDED', retry_event: 'error' }],
  [FailureType.NotReady, { reason: 'WAITING_READY_LIMIT_EXCEEDED', retry_event: 'error' }],
];

const EXECUTOR_ERROR: FailureMeaning = { reason: 'EXECUTOR_ERROR', retry_event: 'error' };

/** What a failure whose types (its own and its causes') are `types` means. */
export function failureMeaning(types: readonly string[]): FailureMeaning {
  return FAILURE_TABLE.find(([type]) => types.includes(type))?.[1] ?? EXECUTOR_ERROR;
}

/** dstack's reason for a batch failure and the retry event it counts as (failures.ts for activity failures). */
export function classifyBatchFailure({ type, message }: BatchJobFailure): FailureMeaning & { message: string } {
  return { ...failureMeaning([type]), message };
}
