import type { ReplicaGroupSummary, RunSummary, ServiceSummary } from '../../client';
import type { JobState, RunState } from '../../contract/run-state';
import { formatGroupNodes } from './plan-table';
import { onceInFull } from './reason-text';
import { rolloutUnderWay } from './rollout-text';
import { paint, paintStatus, type Style } from './style';
import { renderTable } from './table';
import { formatAge, formatDuration } from './time-text';

/** Why a job ended, in one cell: the reason and its message; nothing for a clean finish. A node removed (a resize: `troupe scale`, the autoscaler, a rollout) says so first, unless its message does. */
export function jobReason(job: JobState): string {
  const removed = job.removed && !(job.message ?? '').startsWith('removed') ? 'removed' : '';
  const reason =
    job.termination_reason === null || job.termination_reason === 'DONE_BY_RUNNER'
      ? job.message ?? ''
      : job.message ? `${job.termination_reason}: ${job.message}` : job.termination_reason;
  return [removed, reason].filter((p) => p !== '').join(': ');
}

type GroupSize = Pick<RunState['groups'][number], 'name' | 'nodes'> & { nodes_range?: RunState['groups'][number]['nodes_range'] };

/** `router×1, decode×2 (1..3)`: each group's size now, with the bounds of a group `troupe scale` may resize. */
export function formatGroupSizes(groups: readonly GroupSize[]): string {
  return groups.map((g) => `${g.name}×${formatGroupNodes(g.nodes, g.nodes_range)}`).join(', ');
}

/** `peers version 7` once the nodes have a live address book (groups that heal or scale). */
function peersText(state: Pick<RunState, 'peers_version'>): string {
  return state.peers_version > 0 ? `peers version ${state.peers_version}` : '';
}

/** Whether any job was restarted: only then do the tables spend a RESTARTS column. */
function anyRestarts(jobs: readonly JobState[]): boolean {
  return jobs.some((job) => job.restarts > 0);
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
  const shape = formatGroupSizes(state.groups);
  const retry = state.submission > 0 ? `, resubmission ${state.submission}` : '';
  const peers = state.peers_version > 0 ? `, ${peersText(state)}` : '';
  const when = state.finished_at
    ? `took ${formatDuration(Date.parse(state.finished_at) - Date.parse(state.submitted_at))}`
    : `submitted ${formatAge(state.submitted_at, now)}`;
  return `${paint(style, 'bold', state.run_name)}  ${paintStatus(style, state.status)}  ${state.backend}: ${shape}  (${when}${retry}${peers})`;
}

/** A row per job of one run: what `apply` redraws while the run starts. Reasons are cut to `width` (the terminal's). */
export function renderJobsTable(state: RunState, style: Style, width?: number): string[] {
  const restarts = anyRestarts(state.jobs);
  const rows = state.jobs.map((job) => [
    String(job.job_num),
    job.group_name,
    String(job.group_job_index),
    paintStatus(style, job.status),
    ...(restarts ? [String(job.restarts)] : []),
    job.instance?.host ?? '',
    job.instance?.internal_ip ?? '',
    exitText(job),
    jobReason(job),
  ]);
  const headers = ['JOB', 'GROUP', 'NODE', 'STATUS', ...(restarts ? ['RESTARTS'] : []), 'HOST', 'ADDRESS', 'EXIT', 'REASON'];
  return renderTable(headers, rows, style, {
    alignRight: new Set(restarts ? [0, 2, 4] : [0, 2]),
    ...(width ? { width } : {}),
  });
}

/** `service, deployment=2`: what a service's run row says in place of its groups' sizes. */
function serviceShape(service: ServiceSummary): string {
  return `service, deployment=${service.deployment}`;
}

/** `replicas 1/2 (1..3)`: a replica group's READY replicas of its size, with the bounds of a group that may be resized. */
function formatReplicas(group: ReplicaGroupSummary): string {
  const range = group.range ? ` (${group.range.min}..${group.range.max})` : '';
  // Mid-rollout: each revision's replicas READY of those it has (the run row says each one's share of requests).
  const revisions = group.revisions.length > 1 ? `; ${group.revisions.map((r) => `rev ${r.revision}: ${r.ready}/${r.replicas}`).join(', ')}` : '';
  return `replicas ${group.ready}/${group.wanted}${range}${revisions}`;
}

/** Where a service is called, for its run row: its endpoints, or that it has none yet while it runs. */
function endpointsText(service: ServiceSummary, state: Pick<RunState, 'finished_at'>, style: Style): string {
  if (service.endpoints.length > 0) return service.endpoints.join(', ');
  return state.finished_at === null ? paint(style, 'dim', 'no endpoint yet') : '';
}

/**
 * `ps`: a row per run, then a row per job under it (indented), so one glance shows where every node is.
 * A service's row says so, with its deployment, endpoints and the rollout under way, and each replica group has a row
 * (`replicas READY/size`) above its replicas.
 */
export function renderPsTable(runs: RunSummary[], style: Style, now: Date, width?: number): string[] {
  const rows: string[][] = [];
  const restarts = anyRestarts(runs.flatMap((run) => run.state?.jobs ?? []));
  const restartsCell = (text: string) => (restarts ? [text] : []);
  const jobRow = (state: RunState, job: JobState): string[] => {
    const waiting = job.running_at === null ? state.groups[job.group_index]?.waiting_for : null;
    return [
      '',
      String(job.job_num),
      job.group_name,
      String(job.group_job_index),
      paintStatus(style, job.status),
      ...restartsCell(String(job.restarts)),
      job.instance?.host ?? '',
      job.instance?.internal_ip ?? '',
      '',
      waiting && job.finished_at === null ? paint(style, 'dim', `waiting for ${waiting}`) : jobReason(job),
    ];
  };
  for (const run of runs) {
    const state = run.state;
    const service = run.service ?? null;
    const reason = state
      ? [service ? endpointsText(service, state, style) : '', state.finished_at === null ? rolloutUnderWay(state.service?.rollout ?? null) : '', peersText(state), runReason(state)].filter((p) => p !== '').join('; ')
      : '';
    rows.push([
      paint(style, 'bold', run.name),
      '',
      service ? serviceShape(service) : formatGroupSizes(run.groups),
      '',
      paintStatus(style, run.status),
      ...restartsCell(''),
      run.backend ?? '',
      '',
      formatAge(run.startTime, now),
      state ? reason : paint(style, 'dim', run.stateError ? `state unavailable: ${run.stateError}` : ''),
    ]);
    if (!state) continue;
    if (!service) {
      rows.push(...state.jobs.map((job) => jobRow(state, job)));
      continue;
    }
    for (const replicas of service.groups) {
      rows.push(['', '', replicas.group, '', formatReplicas(replicas), ...restartsCell(''), '', '', '', '']);
      rows.push(...state.jobs.filter((job) => job.group_name === replicas.group).map((job) => jobRow(state, job)));
    }
  }
  const headers = ['RUN', 'JOB', 'GROUP', 'NODE', 'STATUS', ...(restarts ? ['RESTARTS'] : []), 'HOST', 'ADDRESS', 'SUBMITTED', 'REASON'];
  return renderTable(headers, rows, style, {
    alignRight: new Set(restarts ? [1, 3, 5] : [1, 3]),
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
