import { activeJobs, describeJob, endJob, isJobFinished } from './job-transitions';
import type { Ending, Outcome, Run } from './run-context';
import type { Submission } from './run-groups';
import { isJobReady } from './startup-order';

/** What ends a submission before its stop criteria: a stop request, a failed job or group, a dependency that ended unready. */
export function endedEarly(run: Run, submission: Submission): Outcome | null {
  const { state } = run;
  if (run.stopRequest) return { kind: 'stopped', abort: run.stopRequest.abort };
  const failed = state.jobs.find((job) => job.status === 'FAILED' && !job.removed);
  if (failed) {
    const retryEvent = run.failureEvents.has(failed.job_num) ? (run.failureEvents.get(failed.job_num) ?? null) : 'error';
    return { kind: 'failed', job_num: failed.job_num, retry_event: retryEvent, message: describeJob(failed) };
  }
  if (submission.childFailure) return { kind: 'failed', job_num: null, retry_event: null, message: submission.childFailure };
  const endedUnready = state.jobs.find(
    (job) => !job.removed && run.dependedOn.has(job.group_index) && job.finished_at !== null && !isJobReady(run.input.plan, job),
  );
  if (endedUnready) {
    const label = `${endedUnready.group_name}/${endedUnready.group_job_index}`;
    return { kind: 'failed', job_num: endedUnready.job_num, retry_event: 'error', message: `${label} exited before it was ready` };
  }
  return null;
}

/**
 * The run is done: every node done (all-done, and always), job 0 done (master-done: node 0 of the
 * first group, as dstack), or every node of the named group done (group-done, Troupe's extension).
 */
export function stopCriteriaMet(run: Run): Outcome | null {
  const { plan } = run.input;
  const master = run.state.jobs[0];
  if (plan.stop_criteria === 'master-done' && master?.exit_code === 0) return { kind: 'done' };
  if (plan.stop_criteria === 'group-done' && plan.stop_group !== undefined) {
    const nodes = activeJobs(run.state).filter((job) => job.group_index === plan.stop_group);
    if (nodes.length > 0 && nodes.every((job) => job.exit_code === 0)) return { kind: 'done' };
  }
  if (activeJobs(run.state).every((job) => job.exit_code === 0)) return { kind: 'done' };
  return null;
}

export function addressDeadlineMs(run: Run): number {
  const { retry, retryDeadlineMs, input } = run;
  // While no capacity is being retried, the deadline stretches to the end of the retry duration.
  const retryLeftMs = retry?.on_events.includes('no-capacity') && retryDeadlineMs !== null ? retryDeadlineMs - Date.now() : 0;
  return Math.max(input.options.address_deadline_s * 1000, retryLeftMs + input.options.provision_attempt_timeout_s * 1000);
}

export function addressesTimedOut(run: Run): Outcome {
  const missing = run.state.jobs.filter((job) => job.instance === null);
  const seconds = Math.round(addressDeadlineMs(run) / 1000);
  for (const job of missing) {
    endJob(job, 'FAILED', 'WAITING_ADDRESSES_LIMIT_EXCEEDED', `no address after ${seconds}s`);
  }
  const names = missing.map((job) => `${job.group_name}/${job.group_job_index} (job ${job.job_num})`).join(', ');
  return { kind: 'failed', job_num: missing[0]?.job_num ?? null, retry_event: 'error', message: `no address after ${seconds}s for ${names}` };
}

export function maxDurationExceeded(run: Run): Outcome {
  const message = `max_duration of ${run.input.plan.max_duration_s}s exceeded`;
  for (const job of run.state.jobs) {
    if (!isJobFinished(job)) endJob(job, 'TERMINATED', 'MAX_DURATION_EXCEEDED', message);
  }
  return { kind: 'failed', job_num: null, retry_event: null, message };
}

/** A failure the run's `retry` covers, within its duration (past it the run ends RETRY_LIMIT_EXCEEDED). */
export function mayRetry(run: Run, outcome: Ending): boolean {
  const { retry, retryDeadlineMs } = run;
  if (outcome.kind !== 'failed') return false;
  if (!retry || !outcome.retry_event || !retry.on_events.includes(outcome.retry_event)) return false;
  if (retryDeadlineMs !== null && Date.now() >= retryDeadlineMs) {
    run.state.termination_reason = 'RETRY_LIMIT_EXCEEDED';
    return false;
  }
  return true;
}
