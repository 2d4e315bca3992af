import type { JobRef } from '../backends/backend';
import { newJobRef } from '../backends/job-ref';
import type { JobState, RunState } from '../contract/run-state';
import { TroupeClientError } from './errors';

/** The machine of one attempt of a job: the current one, or an earlier one kept in `previous_attempts`. */
export function machineOf(state: RunState, job: JobState, attempt: number | undefined): { attempt: number; instance: JobState['instance'] } {
  if (attempt === undefined || attempt === job.attempt) return { attempt: job.attempt, instance: job.instance };
  const earlier = job.previous_attempts.find((a) => a.attempt === attempt);
  if (!earlier) {
    const known = [...job.previous_attempts.map((a) => a.attempt), job.attempt].join(', ');
    throw new TroupeClientError(
      `job ${job.job_num} (${job.group_name}/${job.group_job_index}) of run ${state.run_name} has no attempt ${attempt}: its attempts are ${known} (${job.attempt} is the current one)`,
    );
  }
  return { attempt, instance: earlier.instance };
}

/** What a backend needs to read the log of one attempt of a job; null while that attempt has no machine. */
export function logRefOf(state: RunState, job: JobState, attempt: number | undefined): JobRef | null {
  const machine = machineOf(state, job, attempt);
  if (!machine.instance) return null;
  // Backends key a job's files by the run's uid (what the workflow's JobRefs carry).
  return newJobRef({ run_id: state.run_uid, run_name: state.run_name, submission: state.submission }, job, machine.attempt, machine.instance);
}
