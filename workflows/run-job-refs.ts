import type { JobRef } from '../src/backends/backend';
import type { Run } from './run-context';
import type { JobState } from './run-state';

/** What a backend needs to act on the job's current attempt (null before it has a machine). */
export function jobRefOf(run: Run, job: JobState): JobRef | null {
  if (!job.instance) return null;
  return {
    run_id: run.state.run_uid,
    run_name: run.input.plan.run_name,
    submission: run.state.submission,
    job_num: job.job_num,
    job_name: job.job_name,
    ...(job.attempt ? { attempt: job.attempt } : {}),
    instance: job.instance,
  };
}
