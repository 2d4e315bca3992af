import type { RetryEvent } from '../plan/plan-schema';
import type { JobTerminationReason } from '../contract/run-state';

/**
 * `type` of the ApplicationFailures that activities throw, and the one table of what each means for
 * a job (FAILURE_TABLE). Plain constants and pure code: workflows, activities and clients import it.
 */
export const FailureType = {
  NoCapacity: 'NoCapacity',
  RunnerNotReady: 'RunnerNotReady',
  InstanceUnreachable: 'InstanceUnreachable',
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
  /** An input (a client's) that claims a run's identity the workflow does not have (workflows/run/run-identity.ts). */
  ForgedRunIdentity: 'ForgedRunIdentity',
  /** A job's commands could not be started on its machine (after a few tries, or at once when trying again cannot help). */
  StartFailed: 'StartFailed',
  /** Waiting for a group's runners failed as a whole (its activity gave up): each of its jobs fails with the reason. */
  RunnerWaitFailed: 'RunnerWaitFailed',
  /** A resize (the scaleGroup Update) refused or not carried out. */
  ScaleFailed: 'ScaleFailed',
  /** A deployment (the applyService Update) refused or not carried out. */
  DeployFailed: 'DeployFailed',
  /** The worker has no backend of the name a run asks for. */
  UnknownBackend: 'UnknownBackend',
  /** The worker has no service gateway to push a table to. */
  NoGateway: 'NoGateway',
  /** A gateway refused what was sent (a 4xx: a bad table, a wrong token): the same would be refused again. */
  GatewayRefused: 'GatewayRefused',
  /** A gateway did not answer, or answered 5xx. */
  GatewayUnreachable: 'GatewayUnreachable',
} as const;
export type FailureTypeName = (typeof FailureType)[keyof typeof FailureType];

/** A job that a batch activity could not start or keep: the failure's type and what went wrong. */
export interface BatchJobFailure {
  type: FailureTypeName;
  message: string;
}

/** What a failure of a job means, as dstack's `JobTerminationReason` answers it: its reason and the retry event it counts as. */
export interface FailureMeaning {
  reason: Extract<JobTerminationReason, 'FAILED_TO_START_DUE_TO_NO_CAPACITY' | 'INSTANCE_UNREACHABLE' | 'WAITING_RUNNER_LIMIT_EXCEEDED' | 'WAITING_READY_LIMIT_EXCEEDED' | 'EXECUTOR_ERROR'>;
  retry_event: RetryEvent;
}

/** What a failure type means, as dstack's `JobTerminationReason` answers every question of a reason in one place. */
interface FailureRow {
  /** What a job's failure of this type means (null: an executor error, retried as `error`). */
  meaning: FailureMeaning | null;
  /** An activity failing with it is tried again by Temporal (false: trying again cannot help). */
  retryable: boolean;
}

/**
 * The one failure table, every type of it. Where a failure carries several types (its own and its
 * causes'), the first row here that matches says what it means: no capacity before a lost host.
 */
const FAILURE_TABLE: Readonly<Record<FailureTypeName, FailureRow>> = {
  NoCapacity: { meaning: { reason: 'FAILED_TO_START_DUE_TO_NO_CAPACITY', retry_event: 'no-capacity' }, retryable: true },
  InstanceUnreachable: { meaning: { reason: 'INSTANCE_UNREACHABLE', retry_event: 'interruption' }, retryable: true },
  RunnerNotReady: { meaning: { reason: 'WAITING_RUNNER_LIMIT_EXCEEDED', retry_event: 'error' }, retryable: false },
  NotReady: { meaning: { reason: 'WAITING_READY_LIMIT_EXCEEDED', retry_event: 'error' }, retryable: false },
  SubmissionClosed: { meaning: null, retryable: false },
  JobVanished: { meaning: null, retryable: false },
  SecretKey: { meaning: null, retryable: false },
  InvalidJobFiles: { meaning: null, retryable: false },
  ForgedRunIdentity: { meaning: null, retryable: false },
  StartFailed: { meaning: null, retryable: false },
  RunnerWaitFailed: { meaning: null, retryable: false },
  ScaleFailed: { meaning: null, retryable: false },
  DeployFailed: { meaning: null, retryable: false },
  UnknownBackend: { meaning: null, retryable: false },
  NoGateway: { meaning: null, retryable: false },
  GatewayRefused: { meaning: null, retryable: false },
  GatewayUnreachable: { meaning: null, retryable: true },
};

const EXECUTOR_ERROR: FailureMeaning = { reason: 'EXECUTOR_ERROR', retry_event: 'error' };
const ROWS = Object.entries(FAILURE_TABLE) as Array<[FailureTypeName, FailureRow]>;

/** Whether an activity failing with this type is tried again (the failure table). */
export function isRetryable(type: FailureTypeName): boolean {
  return FAILURE_TABLE[type].retryable;
}

/** What a failure whose types (its own and its causes') are `types` means. */
export function failureMeaning(types: readonly string[]): FailureMeaning {
  return ROWS.find(([type, row]) => row.meaning !== null && types.includes(type))?.[1].meaning ?? EXECUTOR_ERROR;
}

/** dstack's reason for a batch failure and the retry event it counts as (failures.ts for activity failures). */
export function classifyBatchFailure({ type, message }: BatchJobFailure): FailureMeaning & { message: string } {
  return { ...failureMeaning([type]), message };
}
