import type { Holder } from '../contract/fleet-schemas';

/** What names a job attempt in a fleet: its run's submission, its rank and its attempt (absent: 0). */
export type JobAttemptKey = Pick<Holder, 'run_id' | 'submission' | 'job_num' | 'attempt'>;

/**
 * True when `holder` is that job attempt. Pure, for the fleet's workflow (which host a job holds)
 * and the SSH backend (whether it still holds one) alike.
 */
export function isHeldBy(holder: Holder | null, job: JobAttemptKey): boolean {
  return (
    holder !== null &&
    holder.run_id === job.run_id &&
    holder.submission === job.submission &&
    holder.job_num === job.job_num &&
    (holder.attempt ?? 0) === (job.attempt ?? 0)
  );
}
