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
} as const;
