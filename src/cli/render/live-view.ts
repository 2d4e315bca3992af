import { endpointsChanged, serviceEndpointLines } from './service-lines';
import { writeRaw } from './control-chars';
import type { JobState, RunState } from '../../contract/run-state';
import { jobReason, nodeName, renderJobsTable, renderRunHeadline } from './run-table';
import { onceInFull } from './reason-text';
import { paint, paintStatus, visibleLength, type Style } from './style';

/** Where the live view writes: a terminal (redrawn in place) or a pipe or file (lines appended). */
export interface Terminal {
  write(text: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

function jobChange(before: JobState | undefined, job: JobState, style: Style): string | null {
  const moved = before?.status !== job.status;
  const gotAddress = job.instance !== null && before?.instance?.internal_ip !== job.instance.internal_ip;
  const restarted = before !== undefined && before.attempt !== job.attempt;
  const removed = job.removed && before?.removed !== true;
  if (!moved && !gotAddress && !restarted && !removed) return null;
  const details: string[] = [];
  if (restarted) details.push(`restarted (attempt ${job.attempt}, restart ${job.restarts})`);
  if (job.instance && (gotAddress || job.status === 'PULLING')) details.push(`on ${job.instance.host} (${job.instance.internal_ip})`);
  if (job.status === 'RUNNING' && job.pid !== null) details.push(`pid ${job.pid}`);
  if (job.exit_code !== null) details.push(`exit ${job.exit_code}`);
  const reason = jobReason(job);
  const detailText = details.length > 0 ? ` ${details.join(', ')}` : '';
  return `  job ${job.job_num} ${nodeName(job)}: ${paintStatus(style, job.status)}${detailText}${reason ? ` — ${reason}` : ''}`;
}

/** When a job reached its status, by the run's own clock (what orders the lines of one update). */
function reachedAt(job: JobState): string {
  switch (job.status) {
    case 'PROVISIONING':
      return job.submitted_at;
    case 'PULLING':
      return job.provisioned_at ?? job.submitted_at;
    case 'RUNNING':
      return job.running_at ?? job.submitted_at;
    case 'READY':
      return job.ready_at ?? job.running_at ?? job.submitted_at;
    default:
      return job.finished_at ?? job.submitted_at;
  }
}

/**
 * What changed between two states of a run, a line each, in the order it happened by the run's
 * timestamps (a router that waited for its workers' READY comes after them, whatever its job
 * number): the run's status first while it goes on, last once it has ended. The first state
 * (prev null) lists everything.
 */
export function describeStateChanges(prev: RunState | null, next: RunState, style: Style, printed: Set<string> = new Set()): string[] {
  const lines: Array<{ line: string; reason: string }> = [];
  const resubmitted = prev !== null && prev.submission !== next.submission;
  if (resubmitted) lines.push({ line: `${paint(style, 'bold', next.run_name)}: resubmitted (attempt ${next.submission + 1})`, reason: '' });
  let runLine: { line: string; reason: string } | null = null;
  if (prev === null || prev.status !== next.status || resubmitted) {
    const reason = next.termination_reason ? `${next.termination_reason}${next.message ? `: ${next.message}` : ''}` : '';
    runLine = { line: `${paint(style, 'bold', next.run_name)}: ${paintStatus(style, next.status)}${reason ? ` (${reason})` : ''}`, reason };
  }
  if (runLine && next.finished_at === null) lines.push(runLine);
  if (next.finished_at === null && endpointsChanged(prev, next)) lines.push(...serviceEndpointLines(next, style).map((line) => ({ line, reason: '' })));
  for (const group of next.groups) {
    const before = prev && !resubmitted ? prev.groups.find((g) => g.index === group.index) : undefined;
    if (group.waiting_for !== null && group.waiting_for !== before?.waiting_for) {
      lines.push({ line: `  group ${group.name}: waiting for ${group.waiting_for}`, reason: '' });
    }
    if (before !== undefined && before.nodes !== group.nodes) {
      const bounds = group.nodes_range ? ` (${group.nodes_range.min}..${group.nodes_range.max})` : '';
      lines.push({ line: `  group ${group.name}: ${before.nodes} → ${group.nodes} nodes${bounds}`, reason: '' });
    }
  }
  const changed = next.jobs.flatMap((job) => {
    const before = prev && !resubmitted ? prev.jobs.find((j) => j.job_num === job.job_num) : undefined;
    const line = jobChange(before, job, style);
    return line ? [{ at: Date.parse(reachedAt(job)), line, reason: jobReason(job) }] : [];
  });
  // A stable sort: jobs that changed at the same moment keep their job order.
  lines.push(...changed.sort((a, b) => a.at - b.at));
  if (runLine && next.finished_at !== null) lines.push(runLine);
  return onceInFull(lines, printed);
}

/** `group decode waits for prefill (ready 0/1)`, for each group held back by another. */
export function renderGroupWaits(state: RunState, style: Style): string[] {
  return state.groups
    .filter((g) => g.waiting_for !== null)
    .map((g) => ` ${paint(style, 'dim', `group ${g.name} waits for ${g.waiting_for}`)}`);
}

/**
 * Progress of one run. On a terminal it redraws a headline and a job table in place; elsewhere it
 * appends a line per change, so CI logs and tests read as a story.
 */
export class LiveView {
  private last: RunState | null = null;
  private frameRows = 0;
  private isClosed = false;

  constructor(
    private readonly out: Terminal,
    private readonly style: Style,
    private readonly now: () => Date = () => new Date(),
    /** Long reasons already printed in full (shared with what else prints the run's changes). */
    private readonly printed = new Set<string>(),
  ) {}

  get closed(): boolean {
    return this.isClosed;
  }

  get redraws(): boolean {
    return this.out.isTTY === true;
  }

  update(state: RunState): void {
    if (this.isClosed) return;
    if (this.redraws) {
      this.clearFrame();
      const frame = [
        renderRunHeadline(state, this.style, this.now()),
        ...serviceEndpointLines(state, this.style),
        ...renderJobsTable(state, this.style, this.out.columns),
        ...renderGroupWaits(state, this.style),
      ];
      this.out.write(`${frame.join('\n')}\n`);
      this.frameRows = this.rowsOf(frame);
    } else {
      const lines = describeStateChanges(this.last, state, this.style, this.printed);
      if (lines.length > 0) this.out.write(`${lines.join('\n')}\n`);
    }
    this.last = state;
  }

  /** A line above the live frame (a notice), which stays when the frame is redrawn. */
  note(line: string): void {
    if (this.redraws && !this.isClosed) {
      this.clearFrame();
      this.out.write(`${line}\n`);
      this.frameRows = 0;
      if (this.last) {
        const state = this.last;
        this.last = null;
        this.update(state);
      }
    } else {
      this.out.write(`${line}\n`);
    }
  }

  /** Leaves the last frame on screen; later updates are ignored. */
  close(): RunState | null {
    this.isClosed = true;
    return this.last;
  }

  private clearFrame(): void {
    if (this.frameRows > 0) writeRaw(this.out, `\x1b[${this.frameRows}A\x1b[0J`);
    this.frameRows = 0;
  }

  /** Rows the frame takes on screen, long lines wrapping at the terminal's width. */
  private rowsOf(lines: string[]): number {
    const width = this.out.columns && this.out.columns > 0 ? this.out.columns : 0;
    return lines.reduce((rows, line) => rows + (width > 0 ? Math.max(1, Math.ceil(visibleLength(line) / width)) : 1), 0);
  }
}
