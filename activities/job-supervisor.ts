import type { Context } from '@temporalio/activity';
import { InstanceUnreachableError, type Backend, type JobProcessState, type JobRef } from '../src/backends/backend';
import { mapLimit } from '../src/concurrency/map-limit';
import { describeProbeAnswer, renderProbeScript } from '../src/runner/ready-probe';
import type { ReadyProbe } from '../src/plan/plan-schema';
import { classifyBatchFailure, FailureType, type BatchJobFailure } from '../src/run-core/failure-table';
import type { JobEvent } from '../src/contract/messages';
import { UNREACHABLE_LIMIT_MS } from './jobs';
import type { PushedEnds } from './pushed-ends';
import type { RunJobsInput } from './types';

/** Backend calls in flight at once in one batch (each is a process spawn or an SSH round trip). */
export const CONCURRENCY = 32;
/** With more jobs than this still running, exits found within a second are sent in one signal. */
const COALESCE_ABOVE_JOBS = 16;
const COALESCE_MS = 1_000;

/** The attempt an event is about, when not a node's first machine. */
export const attemptOf = (job: JobRef): { attempt?: number } => (job.attempt ? { attempt: job.attempt } : {});

/** A job's end the backend gave a reason for (JobProcessState's `reason`); not in the failure table, so it counts as an `error` for retries. */

export const failed = (job: JobRef, failure: BatchJobFailure): JobEvent => ({ kind: 'failed', job_num: job.job_num, ...attemptOf(job), ...classifyBatchFailure(failure) });

/** The time and the waits a supervisor runs on: the activity's in a worker, a fake one in tests. */
export interface SupervisorClock {
  now(): number;
  /** Waits `ms`; rejects once the activity is cancelled. */
  sleep(ms: number): Promise<void>;
  /** Rejects once the activity is cancelled (never resolves). */
  readonly cancelled: Promise<never>;
}

/** A job being supervised. */
export interface SupervisedJob {
  ref: JobRef;
  label: string;
  unreachableSince: number | null;
  /** Readiness still to be found (only with a probe). */
  awaitingReady: boolean;
  nextProbeMs: number;
  probing: boolean;
  lastAnswer: string;
}

/** Which jobs a round checks and how long it waits for the next: every job each interval, or the ones a backend's pushed ends name. */
export interface SupervisionRounds {
  pick(jobs: readonly SupervisedJob[], always: (job: SupervisedJob) => boolean): SupervisedJob[];
  pause(ms: number, live: ReadonlyMap<number, SupervisedJob>): Promise<void>;
}

export interface JobSupervisorOptions {
  target: Pick<Backend, 'jobState' | 'exec' | 'readiness'>;
  input: Pick<RunJobsInput, 'jobs' | 'probe' | 'interval_ms'>;
  /** The jobs of the batch that started. */
  refs: JobRef[];
  /** Epoch ms when the activity's first attempt began: the readiness deadline counts from it. */
  startedMs: number;
  /** Sends events to the run; false when the run is gone. */
  send: (events: JobEvent[]) => Promise<boolean>;
  clock: SupervisorClock;
  /** A job no longer supervised (it ended, or its host was lost). */
  ended?: (jobNum: number) => void;
  /** Null: every job is checked every round, with the clock's sleep between. */
  rounds?: SupervisionRounds | null;
}

/**
 * Whether the events gathered so far go to the run now. A failure of any kind, the last exit,
 * readiness or a small batch: now. Many clean exits of a large batch: gathered for a second, so a
 * thousand jobs ending together cost a few signals.
 */
export function sendNow(pending: readonly JobEvent[], liveJobs: number, pendingSinceMs: number, now: number): boolean {
  if (pending.length === 0) return false;
  const urgent = pending.some((e) => e.kind !== 'exited' || e.exit_code !== 0);
  return urgent || liveJobs <= COALESCE_ABOVE_JOBS || now - pendingSinceMs >= COALESCE_MS;
}

/**
 * Checks every running job each interval (with pushed ends: the ones the backend names) and probes the unready ones, until every job has ended.
 * A backend with `readiness()` (SSH) probes on the node itself from the job's start: it is asked
 * for the outcome each interval instead, which costs no command until the node pushes one.
 * Ends early, with what it found unsent, when the run is gone; a cancellation rejects `run()`.
 */
export class JobSupervisor {
  private readonly target: JobSupervisorOptions['target'];
  private readonly probe: ReadyProbe | null;
  private readonly readyDeadline: number;
  private readonly intervalMs: number;
  private readonly send: JobSupervisorOptions['send'];
  private readonly clock: SupervisorClock;
  private readonly ended: (jobNum: number) => void;
  private readonly rounds: SupervisionRounds;
  private readonly live: Map<number, SupervisedJob>;
  /** Found by probes between two checks: sent with the next check's events, before them. */
  private probeEvents: JobEvent[] = [];
  private pending: JobEvent[] = [];
  private pendingSinceMs = 0;

  constructor(opts: JobSupervisorOptions) {
    this.target = opts.target;
    this.probe = opts.input.probe;
    this.readyDeadline = this.probe ? opts.startedMs + this.probe.timeout_s * 1000 : Infinity;
    this.intervalMs = opts.input.interval_ms;
    this.send = opts.send;
    this.clock = opts.clock;
    this.ended = opts.ended ?? (() => undefined);
    this.rounds = opts.rounds ?? { pick: (jobs) => [...jobs], pause: (ms) => this.clock.sleep(ms) };
    const labels = new Map(opts.input.jobs.map(({ ref, plan_job }) => [ref.job_num, `${plan_job.node_group_name}/${plan_job.node_group_job_index}`]));
    const awaitingReady = this.probe !== null;
    this.live = new Map(
      opts.refs.map((ref) => [
        ref.job_num,
        { ref, label: labels.get(ref.job_num) ?? ref.job_name, unreachableSince: null, awaitingReady, nextProbeMs: 0, probing: false, lastAnswer: 'no answer yet' },
      ]),
    );
  }

  /** Supervises until every job has ended (or the run is gone). */
  async run(): Promise<void> {
    while (this.live.size > 0) {
      this.startProbes();
      const jobs = this.rounds.pick([...this.live.values()], (job) => job.unreachableSince !== null);
      const states = await Promise.race([mapLimit(jobs, CONCURRENCY, (job) => this.stateOf(job)), this.clock.cancelled]);
      // Readiness found before an exit is reported before it.
      const events = this.probeEvents;
      this.probeEvents = [];
      jobs.forEach((job, i) => {
        const event = this.check(job, states[i]);
        if (event) events.push(event);
      });
      if (events.length > 0 && this.pending.length === 0) this.pendingSinceMs = this.clock.now();
      this.pending.push(...events);
      if (sendNow(this.pending, this.live.size, this.pendingSinceMs, this.clock.now())) {
        if (!(await this.send(this.pending))) return;
        this.pending = [];
      }
      if (this.live.size === 0) break;
      await this.rounds.pause(this.intervalMs, this.live);
    }
    if (this.probeEvents.length > 0 || this.pending.length > 0) await this.send([...this.pending, ...this.probeEvents]);
  }

  private async stateOf(job: SupervisedJob): Promise<JobProcessState | InstanceUnreachableError> {
    try {
      return await this.target.jobState(job.ref);
    } catch (err) {
      if (err instanceof InstanceUnreachableError) return err;
      throw err;
    }
  }

  /** What a job's state this round means: its end (it leaves the batch), or nothing yet. */
  private check(job: SupervisedJob, state: JobProcessState | InstanceUnreachableError | undefined): JobEvent | null {
    if (state instanceof InstanceUnreachableError) {
      job.unreachableSince ??= this.clock.now();
      if (this.clock.now() - job.unreachableSince <= UNREACHABLE_LIMIT_MS) return null;
      this.end(job);
      return failed(job.ref, {
        type: FailureType.InstanceUnreachable,
        message: `${job.ref.instance.host} unreachable for ${UNREACHABLE_LIMIT_MS / 1000}s while running ${job.ref.job_name}: ${state.message}`,
      });
    }
    job.unreachableSince = null;
    if (state?.state === 'exited') {
      this.end(job);
      // The backend may know why (an OOM kill): that, beside the code, is what the user reads.
      return { kind: 'exited', job_num: job.ref.job_num, ...attemptOf(job.ref), exit_code: state.exit_code, ...(state.reason ? { reason: state.reason } : {}) };
    }
    if (state?.state === 'absent') {
      this.end(job);
      return failed(job.ref, { type: FailureType.JobVanished, message: `${job.ref.job_name} on ${job.ref.instance.host}: its process and job directory are gone` });
    }
    return null;
  }

  private end(job: SupervisedJob): void {
    this.live.delete(job.ref.job_num);
    this.ended(job.ref.job_num);
  }

  /** Probes (in the background) the jobs whose readiness is due. */
  private startProbes(): void {
    const now = this.clock.now();
    for (const job of this.live.values()) {
      if (job.awaitingReady && !job.probing && job.nextProbeMs <= now) this.runProbe(job);
    }
  }

  private runProbe(job: SupervisedJob): void {
    const probe = this.probe;
    if (!probe) return;
    if (this.target.readiness) return this.askReadiness(job, probe, this.target.readiness);
    job.probing = true;
    const script = renderProbeScript(probe, job.ref.instance.internal_ip);
    const attemptMs = Math.max(100, Math.min(10_000, this.readyDeadline - this.clock.now()));
    this.target
      .exec(job.ref, script, attemptMs)
      .then(
        (result) => {
          if (result.exit_code === 0) return true;
          job.lastAnswer = describeProbeAnswer(probe, job.ref.instance.internal_ip, result);
          return false;
        },
        (err: unknown) => {
          job.lastAnswer = describeProbeAnswer(probe, job.ref.instance.internal_ip, { error: err });
          return false;
        },
      )
      .then((ready) => {
        job.probing = false;
        if (!this.live.has(job.ref.job_num) || !job.awaitingReady) return;
        if (ready) {
          job.awaitingReady = false;
          this.probeEvents.push({ kind: 'ready', job_num: job.ref.job_num, ...attemptOf(job.ref) });
        } else if (this.clock.now() + probe.interval_s * 1000 >= this.readyDeadline) {
          job.awaitingReady = false;
          this.probeEvents.push(failed(job.ref, { type: FailureType.NotReady, message: `${job.label} not ready after ${probe.timeout_s}s: ${job.lastAnswer}` }));
        } else {
          job.nextProbeMs = this.clock.now() + probe.interval_s * 1000;
        }
      });
  }

  /** A backend that probes on the node: its outcome, read without a command until it changes. */
  private askReadiness(job: SupervisedJob, probe: ReadyProbe, readiness: NonNullable<Backend['readiness']>): void {
    job.probing = true;
    readiness
      .call(this.target, job.ref)
      .catch(() => ({ state: 'pending' as const }))
      .then((answer) => {
        job.probing = false;
        if (!this.live.has(job.ref.job_num) || !job.awaitingReady || answer.state === 'pending') return;
        job.awaitingReady = false;
        if (answer.state === 'ready') this.probeEvents.push({ kind: 'ready', job_num: job.ref.job_num, ...attemptOf(job.ref) });
        else {
          const last = describeProbeAnswer(probe, job.ref.instance.internal_ip, answer);
          this.probeEvents.push(failed(job.ref, { type: FailureType.NotReady, message: `${job.label} not ready after ${probe.timeout_s}s: ${last}` }));
        }
      });
  }
}

/** The activity's clock: wall time, and its sleep and cancellation. */
export function activityClock(ctx: Context): SupervisorClock {
  return { now: () => Date.now(), sleep: (ms) => ctx.sleep(ms), cancelled: ctx.cancelled };
}

/** Rounds as a backend's pushed ends decide them, waiting on the activity's clock. */
export function pushedRounds(ctx: Context, ends: PushedEnds | null): SupervisionRounds | null {
  return ends && { pick: (jobs, always) => ends.pick(jobs, always), pause: (ms, live) => ends.pause(ctx, ms, live) };
}
