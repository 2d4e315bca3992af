import { workflowInfo } from '@temporalio/workflow';
import type { AddressBook, JobEvent, RunInput } from './messages';
import type { JobState, JobTerminationReason, RunState } from './run-state';

/** How a run's jobs move through their statuses: pure changes of the run's state. */

export function initialState(input: RunInput): RunState {
  const now = new Date().toISOString();
  const info = workflowInfo();
  return {
    run_name: input.plan.run_name,
    run_id: info.workflowId,
    run_uid: info.firstExecutionRunId,
    backend: input.backend,
    status: 'SUBMITTED',
    termination_reason: null,
    message: null,
    submission: 0,
    submitted_at: now,
    finished_at: null,
    groups: input.plan.groups.map((g) => ({ index: g.index, name: g.name, nodes: g.nodes, waiting_for: null })),
    jobs: input.plan.jobs.map((job) => freshJob(job.job_num, job.job_name, job.node_group_index, job.node_group_name, job.node_group_job_index, now)),
    jobs_paged: false,
  };
}

function freshJob(job_num: number, job_name: string, group_index: number, group_name: string, group_job_index: number, now: string): JobState {
  return {
    job_num, job_name, group_index, group_name, group_job_index,
    status: 'PROVISIONING', termination_reason: null, message: null, instance: null, pid: null, exit_code: null,
    submitted_at: now, provisioned_at: null, running_at: null, ready_at: null, finished_at: null,
  };
}

/** The next submission: every job fresh again. */
export function resubmitJobs(state: RunState): void {
  const now = new Date().toISOString();
  state.submission += 1;
  state.jobs = state.jobs.map((job) => freshJob(job.job_num, job.job_name, job.group_index, job.group_name, job.group_job_index, now));
}

export function isJobFinished(job: JobState): boolean {
  return ['TERMINATED', 'ABORTED', 'FAILED', 'DONE'].includes(job.status);
}

export function endJob(job: JobState, status: JobState['status'], reason: JobTerminationReason, message: string | null): void {
  job.status = status;
  job.termination_reason = reason;
  job.message = message;
  job.finished_at = new Date().toISOString();
}

export function applyJobEvent(state: RunState, event: JobEvent): void {
  const job = state.jobs[event.job_num];
  if (!job || isJobFinished(job)) return;
  const now = new Date().toISOString();
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
      if (event.exit_code === 0) endJob(job, 'DONE', 'DONE_BY_RUNNER', null);
      else endJob(job, 'FAILED', 'CONTAINER_EXITED_WITH_ERROR', `exited with code ${event.exit_code}`);
      break;
    case 'failed':
      endJob(job, 'FAILED', event.reason, event.message);
      break;
  }
}

export function describeJob(job: JobState): string {
  const where = job.instance ? ` on ${job.instance.host}` : '';
  return `job ${job.job_num} (${job.group_name}/${job.group_job_index})${where} failed: ${job.termination_reason}${job.message ? `: ${job.message}` : ''}`;
}

/** The submission's address book, once every job has an address (null before). */
export function addressBookOf(state: RunState): AddressBook | null {
  if (!state.jobs.every((job) => job.instance !== null)) return null;
  return {
    job_ips: state.jobs.map((job) => job.instance?.internal_ip ?? ''),
    gpus_per_node: state.jobs.map((job) => job.instance?.gpus ?? 0),
  };
}
