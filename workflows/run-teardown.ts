import type { JobRef } from '../src/backends/backend';
import { rootMessage } from './failures';
import { teardownActivities } from './node-group-activities';
import { jobRefOf } from './run-job-refs';
import { endJob, isJobFinished } from './job-transitions';
import { setStatus, type Ending, type Run } from './run-context';
import type { JobState, JobTerminationReason, RunTerminationReason } from './run-state';


/** Every started process stopped, every machine released; the jobs still open end as the outcome says. */
export async function teardown(run: Run, outcome: Ending): Promise<void> {
  const { state, input } = run;
  state.status = 'TERMINATING';
  const [status, reason]: [JobState['status'], JobTerminationReason] =
    outcome.kind === 'stopped'
      ? outcome.abort ? ['ABORTED', 'ABORTED_BY_USER'] : ['TERMINATED', 'TERMINATED_BY_USER']
      : ['TERMINATED', 'TERMINATED_BY_SERVER'];
  // Each node's current attempt (an earlier one was given back when it was replaced).
  const toStop: JobRef[] = state.jobs.flatMap((job) => (job.exit_code === null && !job.removed ? (jobRefOf(run, job) ?? []) : []));
  const grace = outcome.kind === 'stopped' && outcome.abort ? 0 : input.options.stop_grace_s;
  try {
    if (toStop.length > 0) await teardownActivities.stopJobs({ backend: input.backend, jobs: toStop, grace_s: grace });
    await teardownActivities.releaseRun({ backend: input.backend, run_id: state.run_uid, submission: state.submission });
  } catch (err) {
    state.message = `${state.message ? `${state.message}; ` : ''}teardown incomplete: ${rootMessage(err)}`;
  }
  for (const job of state.jobs) {
    if (!isJobFinished(job)) endJob(job, status, reason, null);
  }
}

/** The run's final status and termination reason. */
export function finish(run: Run, outcome: Ending): void {
  const { state } = run;
  state.finished_at = new Date().toISOString();
  let reason: RunTerminationReason;
  if (outcome.kind === 'done') {
    reason = 'ALL_JOBS_DONE';
  } else if (outcome.kind === 'stopped') {
    reason = outcome.abort ? 'ABORTED_BY_USER' : 'STOPPED_BY_USER';
  } else {
    reason = state.termination_reason === 'RETRY_LIMIT_EXCEEDED' ? 'RETRY_LIMIT_EXCEEDED' : 'JOB_FAILED';
    state.message = state.message ? `${outcome.message}; ${state.message}` : outcome.message;
  }
  state.termination_reason = reason;
  setStatus(run, outcome.kind === 'done' ? 'DONE' : outcome.kind === 'stopped' ? 'TERMINATED' : 'FAILED');
}
