import type { Instance, JobRef } from '../../src/backends/backend';
import { newJobRef } from '../../src/backends/job-ref';
import type { Run } from './run-context';
import type { JobState } from '../../src/contract/run-state';

/** What a backend needs to act on the job's current attempt (null before it has a machine), or on `other`, an attempt of its. */
export function jobRefOf(run: Run, job: JobState, other?: { attempt: number; instance: Instance }): JobRef | null {
  const attempt = other ? other.attempt : job.attempt;
  const instance = other ? other.instance : job.instance;
  if (!instance) return null;
  return newJobRef({ run_id: run.state.run_uid, run_name: run.core.plan.run_name, submission: run.state.submission }, job, attempt, instance);
}

/** The refs of these attempts of the run's ranks, as an effect names them (a rank the run no longer has is left out). */
export function attemptRefsOf(run: Run, attempts: ReadonlyArray<{ job_num: number; attempt: number; instance: Instance }>): JobRef[] {
  return attempts.flatMap(({ job_num, attempt, instance }) => {
    const job = run.state.jobs[job_num];
    return job ? (jobRefOf(run, job, { attempt, instance }) ?? []) : [];
  });
}
