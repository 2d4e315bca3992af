import type { RunSummary } from '../../client';
import type { JobState, RunState } from '../../../workflows/run-state';
import { onceInFull } from './reason-text';
import { paint, paintStatus, type Style } from './style';
import { renderTable } from './table';
import { formatAge, formatDuration } from './time-text';

/** Why a job ended, in one cell: the reason and its message; nothing for a clean finish. */
export function jobReason(job: JobState): string {
  if (job.termination_reason === null || job.termination_reason === 'DONE_BY_RUNNER') return job.message ?? '';
  return job.message ? `${job.termination_reason}: ${job.message}` : job.termination_reason;
}

function runReason(state: Pick<RunState, 'termination_reason' | 'message'>): string {
  if (state.termination_reason === null) return state.message ?? '';
  if (state.termination_reason === 'ALL_JOBS_DONE') return state.termination_reason;
  return state.message ? `${state.termination_reason}: ${state.message}` : state.termination_reason;
}

/** `router/0`: the name people use for a node. */
export function nodeName(job: Pick<JobState, 'group_name' | 'group_job_index'>): string {
  return `${job.group_name}/${job.group_job_index}`;
}

function exitText(job: JobState): string {
  return job.exit_code === null ? '' : String(job.exit_code);
}

/** One line about the run: name, status, backend, shape, age. */
export function renderRunHeadline(state: RunState, style: Style, now: Date): string {
  const shape = state.groups.map((g) => `${g.name}×${g.nodes}`).join(', ');
  const retry = state.submission > 0 ? `, resubmission ${state.submission}` : '';
  const when = state.finished_at
    ? `took ${formatDuration(Date.parse(state.finished_at) - Date.parse(state.submitted_at))}`
    : `submitted ${formatAge(state.submitted_at, now)}`;
  return `${paint(style, 'bold', state.run_name)}  ${paintStatus(style, state.status)}  ${state.backend}: ${shape}  (${when}${retry})`;
}

/** A row per job of one run: what `apply` redraws while the run starts. Reasons are cut to `width` (the terminal's). */
export function renderJobsTable(state: RunState, style: Style, width?: number): string[] {
  const rows = state.jobs.map((job) => [
    String(job.job_num),
    job.group_name,
    String(job.group_job_index),
    paintStatus(style, job.status),
    job.instance?.host ?? '',
    job.instance?.internal_ip ?? '',
    exitText(job),
    jobReason(job),
  ]);
  return renderTable(['JOB', 'GROUP', 'NODE', 'STATUS', 'HOST', 'ADDRESS', 'EXIT', 'REASON'], rows, style, {
    alignRight: new Set([0, 2]),
    ...(width ? { width } : {}),
  });
}

/** `ps`: a row per run, then a row per job under it (indented), so one glance shows where every node is. */
export function renderPsTable(runs: RunSummary[], style: Style, now: Date, width?: number): string[] {
  const rows: string[][] = [];
  for (const run of runs) {
    const state = run.state;
    const shape = run.groups.map((g) => `${g.name}×${g.nodes}`).join(', ');
    rows.push([
      paint(style, 'bold', run.name),
      '',
      shape,
      '',
      paintStatus(style, run.status),
      run.backend ?? '',
      '',
      formatAge(run.startTime, now),
      state ? runReason(state) : paint(style, 'dim', run.stateError ? `state unavailable: ${run.stateError}` : ''),
    ]);
    for (const job of state?.jobs ?? []) {
      const waiting = job.running_at === null ? state?.groups[job.group_index]?.waiting_for : null;
      rows.push([
        '',
        String(job.job_num),
        job.group_name,
        String(job.group_job_index),
        paintStatus(style, job.status),
        job.instance?.host ?? '',
        job.instance?.internal_ip ?? '',
        '',
        waiting && job.finished_at === null ? paint(style, 'dim', `waiting for ${waiting}`) : jobReason(job),
      ]);
    }
  }
  return renderTable(['RUN', 'JOB', 'GROUP', 'NODE', 'STATUS', 'HOST', 'ADDRESS', 'SUBMITTED', 'REASON'], rows, style, {
    alignRight: new Set([1, 3]),
    ...(width ? { width } : {}),
  });
}

/** The end of a run in words: status and reason, then what each job that did not finish cleanly said; a long reason once in full (`printed`: already printed above). */
export function renderRunOutcome(state: RunState, style: Style, printed: Set<string> = new Set()): string[] {
  const took = state.finished_at
    ? ` after ${formatDuration(Date.parse(state.finished_at) - Date.parse(state.submitted_at))}`
    : '';
  const run = runReason(state) || 'no reason given';
  const entries = [{ line: `Run ${paint(style, 'bold', state.run_name)} ${paintStatus(style, state.status)}${took}: ${run}`, reason: run }];
  for (const job of state.jobs) {
    const reason = jobReason(job);
    const clean = job.status === 'DONE' || job.termination_reason === 'TERMINATED_BY_SERVER';
    if (reason === '' || (clean && job.message === null)) continue;
    const where = job.instance ? ` on ${job.instance.host} (${job.instance.internal_ip})` : '';
    entries.push({ line: `  job ${job.job_num} ${nodeName(job)}${where}: ${paintStatus(style, job.status)} ${reason}`, reason });
  }
  return onceInFull(entries, printed);
}
