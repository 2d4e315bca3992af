import type { Instance, JobRef } from '../src/backends/backend';
import type { Run } from './run-context';
import type { JobState } from './run-state';

/** What a backend needs to act on the job's current attempt (null before it has a machine), or on `other`, an attempt of its. */
export function jobRefOf(run: Run, job: JobState, other?: { attempt: number; instance: Instance }): JobRef | null {
  const attempt = other ? other.attempt : job.attempt;
  const instance = other ? other.instance : job.instance;
  if (!instance) return null;
  return {
    run_id: run.state.run_uid,
    run_name: run.input.plan.run_name,
    submission: run.state.submission,
    job_num: job.job_num,
    job_name: job.job_name,
    ...(attempt ? { attempt } : {}),
    instance,
  };
}
