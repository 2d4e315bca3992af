import type { JobPlan } from '../plan/plan-schema';
import type { AddressBook, JobEvent } from '../contract/message-schemas';
import type { JobState, JobTerminationReason, RunState } from '../contract/run-state';

/**
 * How a run's jobs move through their statuses: changes of the run's state, made only by the run's
 * loop (workflows/run/run-loop.ts) and the policies it applies. `now` (ISO) comes in; nothing here reads a clock.
 */

export function freshJob(job_num: number, job_name: string, group_index: number, group_name: string, group_job_index: number, now: string): JobState {
  return {
    job_num, job_name, group_index, group_name, group_job_index,
    status: 'PROVISIONING', termination_reason: null, message: null, instance: null, pid: null, exit_code: null,
    submitted_at: now, provisioned_at: null, running_at: null, ready_at: null, finished_at: null,
    attempt: 0, restarts: 0, removed: false, revision: null, previous_attempts: [],
  };
}

/** A submission's jobs as the plan makes them, each fresh. */
export function freshJobsOf(jobs: readonly JobPlan[], now: string): JobState[] {
  return jobs.map((job) => freshJob(job.job_num, job.job_name, job.node_group_index, job.node_group_name, job.node_group_job_index, now));
}

/** How many earlier attempts of one node the run's state keeps. */
const ATTEMPTS_KEPT = 10;

/**
 * The node's next machine: its current attempt goes to `previous_attempts` (ended as `ended`
 * says, if it had not ended yet), and the rank starts again, provisioning. A restart counts in
 * `restarts`; a rank reused by a resize does not.
 */
export function nextAttempt(
  job: JobState,
  ended: { status: JobState['status']; reason: JobTerminationReason; message: string | null },
  restart: boolean,
  now: string,
): void {
  if (!isJobFinished(job)) endJob(job, ended.status, ended.reason, ended.message, now);
  const previous = {
    attempt: job.attempt, instance: job.instance, status: job.status, termination_reason: job.termination_reason,
    message: job.message, exit_code: job.exit_code, running_at: job.running_at, finished_at: job.finished_at,
  };
  const fresh = freshJob(job.job_num, job.job_name, job.group_index, job.group_name, job.group_job_index, now);
  Object.assign(job, fresh, {
    attempt: job.attempt + 1,
    restarts: job.restarts + (restart ? 1 : 0),
    previous_attempts: [...job.previous_attempts, previous].slice(-ATTEMPTS_KEPT),
  });
}

/** Jobs that are part of the run now (not removed by a resize). */
export function activeJobs(state: RunState): JobState[] {
  return state.jobs.filter((job) => !job.removed);
}

/** A group's nodes still in the run (not removed by a resize). */
export function groupMembers(jobs: readonly JobState[], groupIndex: number): JobState[] {
  return jobs.filter((job) => job.group_index === groupIndex && !job.removed);
}

/** The next submission: every job of the task fresh again, groups at their first size (ranks added by resizes are gone). */
export function resubmitJobs(state: RunState, plan: { jobs: JobPlan[]; groups: Array<{ index: number; nodes: number }> }, now: string): void {
  state.submission += 1;
  state.jobs = freshJobsOf(plan.jobs, now);
  state.groups = state.groups.map((group) => ({ ...group, nodes: plan.groups[group.index]?.nodes ?? group.nodes }));
}

export function isJobFinished(job: JobState): boolean {
  return ['TERMINATED', 'ABORTED', 'FAILED', 'DONE'].includes(job.status);
}

export function endJob(job: JobState, status: JobState['status'], reason: JobTerminationReason, message: string | null, now: string): void {
  job.status = status;
  job.termination_reason = reason;
  job.message = message;
  job.finished_at = now;
}

/** Applies the event to its job; false when it is not the job's (another attempt's, or the job has ended). */
export function applyJobEvent(state: RunState, event: JobEvent, now: string): boolean {
  const job = state.jobs[event.job_num];
  if (!job || isJobFinished(job) || (event.attempt ?? 0) !== job.attempt) return false;
  switch (event.kind) {
    case 'provisioned':
      job.instance = event.instance;
      job.provisioned_at = now;
      job.status = 'PULLING';
      break;
    case 'running':
      // A batch retried after a worker crash reports its jobs again: the first report stands.
      if (job.running_at !== null) break;
      job.pid = event.pid;
      job.running_at = now;
      job.status = 'RUNNING';
      break;
    case 'ready':
      if (job.ready_at !== null) break;
      job.ready_at = now;
      job.status = 'READY';
      break;
    case 'exited':
      job.exit_code = event.exit_code;
      if (event.exit_code === 0 && event.reason === undefined) endJob(job, 'DONE', 'DONE_BY_RUNNER', null, now);
      else endJob(job, 'FAILED', 'CONTAINER_EXITED_WITH_ERROR', event.reason ? `${event.reason} (exit code ${event.exit_code})` : `exited with code ${event.exit_code}`, now);
      break;
    case 'failed':
      endJob(job, 'FAILED', event.reason, event.message, now);
      break;
  }
  return true;
}

export function describeJob(job: JobState): string {
  const where = job.instance ? ` on ${job.instance.host}` : '';
  return `job ${job.job_num} (${job.group_name}/${job.group_job_index})${where} failed: ${job.termination_reason}${job.message ? `: ${job.message}` : ''}`;
}

/**
 * The submission's address book, once every job has had an address (null before). A node being
 * replaced keeps its last address here (what a node started now gets in DSTACK_*; peers.json says
 * it is restarting); ranks removed by a resize, and with `partial` ranks added by one that have no
 * machine yet, are listed as removed.
 */
export function addressBookOf(state: RunState, opts: { partial?: boolean } = {}): AddressBook | null {
  const ips = state.jobs.map((job) => job.instance?.internal_ip ?? job.previous_attempts.at(-1)?.instance?.internal_ip ?? null);
  // `partial` (a live run, once started): a rank still waiting for its first machine is left out, as a removed one.
  const absent = (n: number) => state.jobs[n]?.removed === true || (opts.partial === true && ips[n] === null);
  if (ips.some((ip, n) => ip === null && !absent(n))) return null;
  const removed = state.jobs.filter((job) => absent(job.job_num)).map((job) => job.job_num);
  return {
    job_ips: ips.map((ip) => ip ?? ''),
    gpus_per_node: state.jobs.map((job) => job.instance?.gpus ?? job.previous_attempts.at(-1)?.instance?.gpus ?? 0),
    job_groups: state.jobs.map((job) => job.group_index),
    ...(removed.length > 0 ? { removed } : {}),
  };
}
