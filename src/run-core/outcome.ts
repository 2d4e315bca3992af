import type { JobEvent } from '../contract/message-schemas';
import type { RetryEvent } from '../plan/plan-schema';
import type { JobState, JobTerminationReason } from '../contract/run-state';
import type { Ending, Failure } from './ending';
import type { Decision, Effect } from './effects';
import type { RunEvent } from './events';
import { activeJobs, applyJobEvent, describeJob, endJob, isJobFinished, resubmitJobs } from './jobs';
import { newLiveCore } from './live';
import { BACKOFF_MAX_S, newSubmissionCore, type RunCore } from './state';
import { isJobReady } from './startup-order';

/**
 * The run's outcome policy: what each event does to the submission under way, and when it is over
 * — stopped, failed (a job, a group, a dependency that ended unready, a deadline), or done by the
 * task's stop criteria; then, after teardown, whether `retry` submits the run again or it ends, and
 * with which status and reason (dstack's names). Pure: `now` (epoch ms) and the event come in.
 */
export function decideOutcome(core: RunCore, event: RunEvent, now: number): Decision<RunCore> {
  const effects: Effect[] = [];
  switch (event.kind) {
    case 'stop':
      // Kept past the submission's end: a stop during teardown or back-off ends the run, not a new submission.
      return { state: { ...core, stop_request: { abort: event.abort || core.stop_request?.abort === true } }, effects };
    case 'jobs':
      if (event.submission !== core.run.submission || core.submission.ending) return { state: core, effects };
      return { state: applyJobEvents(core, event.events, now, effects), effects };
    case 'group-failed':
      if (event.submission !== core.run.submission || core.submission.group_failure) return { state: core, effects };
      return { state: { ...core, submission: { ...core.submission, group_failure: event.message } }, effects };
    case 'unlocked':
      return { state: { ...core, submission: { ...core.submission, phase: 'addressing', addresses_due_ms: now + addressDeadlineMs(core, now) } }, effects };
    case 'announced':
      return { state: { ...core, submission: { ...core.submission, phase: 'started', addresses_due_ms: null } }, effects };
    case 'tick':
      return judge(core, now, effects);
    case 'resize':
    case 'released':
    case 'resize-answered':
    case 'peers-published':
    case 'routes-pushed':
    case 'drained':
    case 'deploy':
    case 'deploy-answered':
    case 'figures':
    case 'replica-metrics':
    case 'revision-checked':
    case 'rollout-control':
      return { state: core, effects };
  }
}

/**
 * Whether the submission is over, looked at once all that happened so far is in (and the live
 * run's healing has replaced the nodes it replaces): a stop, a failure, a deadline, or the stop
 * criteria. A submission's first running job makes the run RUNNING, and so does a service's start
 * with no replica (scaled to zero: the gateways hold its requests while one wakes).
 */
function judge(core: RunCore, now: number, effects: Effect[]): Decision<RunCore> {
  if (core.submission.ending) return { state: core, effects };
  let next = core;
  const started = core.submission.phase === 'started';
  const serving = core.run.jobs.some((job) => job.running_at !== null) || (core.plan.service !== undefined && activeJobs(core.run).length === 0);
  if (started && core.submission.running_since_ms === null && serving) {
    next = { ...core, submission: { ...core.submission, running_since_ms: now } };
    core.run.status = 'RUNNING';
    effects.push({ kind: 'set-status', status: 'RUNNING' });
  }
  const ending = endedEarly(next) ?? (started ? stopCriteriaMet(next) : null) ?? deadlinePassed(next, now);
  return ending ? end(next, ending, effects) : { state: next, effects };
}

/** When the run must look again even if nothing happens (epoch ms), or null. */
export function nextDeadline(core: RunCore): number | null {
  const { submission, plan } = core;
  if (submission.ending) return null;
  if (submission.phase === 'addressing') return submission.addresses_due_ms;
  if (plan.max_duration_s !== null && submission.running_since_ms !== null) return submission.running_since_ms + plan.max_duration_s * 1000;
  return null;
}

/** How the jobs still open end in teardown, and whether they get their grace. */
export function teardownOf(ending: Ending): { status: JobState['status']; reason: JobTerminationReason; graceful: boolean } {
  if (ending.kind === 'stopped') {
    return ending.abort ? { status: 'ABORTED', reason: 'ABORTED_BY_USER', graceful: false } : { status: 'TERMINATED', reason: 'TERMINATED_BY_USER', graceful: true };
  }
  return { status: 'TERMINATED', reason: 'TERMINATED_BY_SERVER', graceful: true };
}

/**
 * After teardown: a failure the run's `retry` covers, within its duration, submits the run again
 * after the back-off (unless a stop was asked meanwhile); anything else ends the run.
 */
export function decideAfterTeardown(core: RunCore, ending: Ending, now: number): Decision<RunCore> {
  const covered = ending.kind === 'failed' && core.retry !== null && ending.retry_event !== null && core.retry.on_events.includes(ending.retry_event);
  const inTime = core.retry_deadline_ms === null || now < core.retry_deadline_ms;
  if (covered && inTime) {
    if (!core.stop_request) {
      return { state: { ...core, backoff_s: Math.min(core.backoff_s * 2, BACKOFF_MAX_S) }, effects: [{ kind: 'resubmit', after_s: core.backoff_s }] };
    }
    // A stop asked while a failure that would be retried was torn down: the run ends as stopped.
    return { state: core, effects: [finishOf(core, { kind: 'stopped', abort: core.stop_request.abort }, false)] };
  }
  return { state: core, effects: [finishOf(core, ending, covered)] };
}

/** The run's final status, reason (dstack's names) and message; `retriedOut`: a covered failure past the retry duration. */
function finishOf(core: RunCore, ending: Ending, retriedOut: boolean): Effect {
  const { message } = core.run;
  switch (ending.kind) {
    case 'done':
      return { kind: 'finish', status: 'DONE', reason: 'ALL_JOBS_DONE', message };
    case 'stopped':
      return { kind: 'finish', status: 'TERMINATED', reason: ending.abort ? 'ABORTED_BY_USER' : 'STOPPED_BY_USER', message };
    case 'failed':
      return {
        kind: 'finish',
        status: 'FAILED',
        reason: retriedOut ? 'RETRY_LIMIT_EXCEEDED' : 'JOB_FAILED',
        message: message ? `${ending.message}; ${message}` : ending.message,
      };
  }
}

/** The next submission: every job of the task fresh again, groups at their first size, nothing of the last one's failures. */
export function resubmit(core: RunCore, now: number): RunCore {
  resubmitJobs(core.run, core.plan, new Date(now).toISOString());
  return { ...core, failure_events: {}, submission: newSubmissionCore(), live: core.live ? newLiveCore(core.plan) : null };
}

function end(core: RunCore, ending: Ending, effects: Effect[]): Decision<RunCore> {
  effects.push({ kind: 'end-submission', ending });
  return { state: { ...core, submission: { ...core.submission, ending } }, effects };
}

/** Each event to its job; a machine provisioned for an attempt that was replaced or removed meanwhile is given back. */
function applyJobEvents(core: RunCore, events: readonly JobEvent[], now: number, effects: Effect[]): RunCore {
  const iso = new Date(now).toISOString();
  let failures = core.failure_events;
  for (const event of events) {
    if (applyJobEvent(core.run, event, iso)) {
      if (event.kind === 'failed') failures = { ...failures, [event.job_num]: event.retry_event };
    } else if (event.kind === 'provisioned') {
      const job = core.run.jobs[event.job_num];
      const attempt = event.attempt ?? 0;
      if (job && (job.removed || attempt < job.attempt)) effects.push({ kind: 'give-back', job_num: job.job_num, attempt, instance: event.instance });
    }
  }
  return failures === core.failure_events ? core : { ...core, failure_events: failures };
}

/** The retry event a failed job counts as: what its failure said, or `error` (an exit with an error). */
function retryEventOf(core: RunCore, jobNum: number): RetryEvent | null {
  return jobNum in core.failure_events ? (core.failure_events[jobNum] ?? null) : 'error';
}

/** What ends a submission before its stop criteria: a stop request, a failed job or group, a dependency that ended unready. */
function endedEarly(core: RunCore): Ending | null {
  const { run, plan } = core;
  if (core.stop_request) return { kind: 'stopped', abort: core.stop_request.abort };
  const failed = run.jobs.find((job) => job.status === 'FAILED' && !job.removed);
  if (failed) return { kind: 'failed', job_num: failed.job_num, retry_event: retryEventOf(core, failed.job_num), message: describeJob(failed) };
  if (core.submission.group_failure) return { kind: 'failed', job_num: null, retry_event: null, message: core.submission.group_failure };
  const dependedOn = new Set(plan.groups.flatMap((g) => g.depends_on ?? []));
  const endedUnready = run.jobs.find((job) => !job.removed && dependedOn.has(job.group_index) && job.finished_at !== null && !isJobReady(plan, job));
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
function stopCriteriaMet(core: RunCore): Ending | null {
  const { plan, run } = core;
  const master = run.jobs[0];
  if (plan.stop_criteria === 'master-done' && master?.exit_code === 0) return { kind: 'done' };
  if (plan.stop_criteria === 'group-done' && plan.stop_group !== undefined) {
    const nodes = activeJobs(run).filter((job) => job.group_index === plan.stop_group);
    if (nodes.length > 0 && nodes.every((job) => job.exit_code === 0)) return { kind: 'done' };
  }
  // A service scaled to zero has no job, and is not done.
  const active = activeJobs(run);
  if (active.length > 0 && active.every((job) => job.exit_code === 0)) return { kind: 'done' };
  return null;
}

/** No address for some jobs by their deadline, or `max_duration` run out: the jobs concerned end, the submission fails. */
function deadlinePassed(core: RunCore, now: number): Failure | null {
  const due = nextDeadline(core);
  if (due === null || now < due) return null;
  const iso = new Date(now).toISOString();
  if (core.submission.phase === 'addressing') {
    const missing = core.run.jobs.filter((job) => job.instance === null && !job.removed);
    if (missing.length === 0) return null;
    const seconds = Math.round(addressDeadlineMs(core, now) / 1000);
    for (const job of missing) endJob(job, 'FAILED', 'WAITING_ADDRESSES_LIMIT_EXCEEDED', `no address after ${seconds}s`, iso);
    const names = missing.map((job) => `${job.group_name}/${job.group_job_index} (job ${job.job_num})`).join(', ');
    return { kind: 'failed', job_num: missing[0]?.job_num ?? null, retry_event: 'error', message: `no address after ${seconds}s for ${names}` };
  }
  const message = `max_duration of ${core.plan.max_duration_s}s exceeded`;
  for (const job of core.run.jobs) {
    if (!isJobFinished(job)) endJob(job, 'TERMINATED', 'MAX_DURATION_EXCEEDED', message, iso);
  }
  return { kind: 'failed', job_num: null, retry_event: null, message };
}

/** How long every job may take to get its address; while no capacity is retried, up to the end of the retry duration. */
function addressDeadlineMs(core: RunCore, now: number): number {
  const { retry, retry_deadline_ms: deadline, limits } = core;
  const retryLeftMs = retry?.on_events.includes('no-capacity') && deadline !== null ? deadline - now : 0;
  return Math.max(limits.address_deadline_s * 1000, retryLeftMs + limits.provision_attempt_timeout_s * 1000);
}
