import type { Instance, JobRef } from './backend';

/**
 * The one way a JobRef is made. A first machine's ref has no `attempt` (attempt 0 and absent are the
 * same key, as backends have always keyed a job's files).
 */
export function newJobRef(
  run: Pick<JobRef, 'run_id' | 'run_name' | 'submission'>,
  job: Pick<JobRef, 'job_num' | 'job_name'>,
  attempt: number | undefined,
  instance: Instance,
): JobRef {
  return { run_id: run.run_id, run_name: run.run_name, submission: run.submission, job_num: job.job_num, job_name: job.job_name, ...(attempt ? { attempt } : {}), instance };
}
