/**
 * `type` of the ApplicationFailures that activities throw; each maps to a job termination reason.
 * A plain constants module: workflows and activities both import it.
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

/** dstack's reason for a batch failure and the retry event it counts as (see failures.ts for activity failures). */
export function classifyBatchFailure({ type, message }: BatchJobFailure): {
  reason: 'WAITING_READY_LIMIT_EXCEEDED' | 'INSTANCE_UNREACHABLE' | 'WAITING_RUNNER_LIMIT_EXCEEDED' | 'EXECUTOR_ERROR';
  retry_event: 'interruption' | 'error';
  message: string;
} {
  switch (type) {
    case FailureType.NotReady:
      return { reason: 'WAITING_READY_LIMIT_EXCEEDED', retry_event: 'error', message };
    case FailureType.InstanceUnreachable:
      return { reason: 'INSTANCE_UNREACHABLE', retry_event: 'interruption', message };
    case FailureType.RunnerNotReady:
      return { reason: 'WAITING_RUNNER_LIMIT_EXCEEDED', retry_event: 'error', message };
    default:
      return { reason: 'EXECUTOR_ERROR', retry_event: 'error', message };
  }
}
