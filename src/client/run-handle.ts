import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  isGrpcCancelledError,
  isGrpcDeadlineError,
  ServiceError,
  TimeoutFailure,
  WorkflowFailedError,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  type Client,
  type WorkflowExecutionDescription,
  type WorkflowExecutionInfo,
  type WorkflowHandle,
} from '@temporalio/client';
import type { LogChunk } from '../backends/backend';
import type { Plan } from '../plan/plan-schema';
import type { ReadLogInput } from '../../activities/types';
import { logReaderWorkflowId, runWorkflowId } from '../contract/ids';
import {
  runJobsQuery,
  runStateQuery,
  scaleGroupUpdate,
  applyServiceUpdate,
  rolloutControlUpdate,
  stopRunSignal,
  type ApplyServiceResult,
  type RolloutAction,
  type RolloutControlResult,
  type RunInputArg,
  type ScaleGroupResult,
} from '../contract/messages';
import { isFinished, type JobState, type RolloutStatus, type RunState, type RunStatus } from '../contract/run-state';
import { RunStateSchema } from '../contract/run-state-schema';
import {
  isRunUnavailable,
  JobNotFoundError,
  NoWorkerError,
  RunNotFoundError,
  RunUnreachableError,
  TroupeClientError,
  type RunUnavailableError,
  type TaskQueueLocation,
} from './errors';
import { logRefOf, machineOf } from './job-attempts';
import { sealSecrets } from './seal-plan';
import { askThroughHandOver } from './update-retry';
import { readRunMemo } from './run-memo';
import { withAllJobs } from './run-jobs';
import { missingPollers } from './worker-presence';
import { fetchRunMetrics, type RunMetrics, type RunMetricsOptions } from './run-usage';

export type RunWorkflowFn = (input: RunInputArg) => Promise<RunState>;
type ReadJobLogWorkflowFn = (input: ReadLogInput) => Promise<LogChunk>;

/** What a RunHandle needs from the TroupeClient that made it. */
export interface RunContext extends TaskQueueLocation {
  client: Client;
  /** How long a state query may take before the run is reported unreachable. */
  queryTimeoutMs: number;
}

export interface ReadLogOptions {
  /** Byte offset to read from (a previous chunk's next_offset). Default 0. */
  offset?: number;
  /** At most this many bytes per call. Default 256 KiB. */
  limitBytes?: number;
  /** An earlier attempt of the job (its machine before a restart, see `previous_attempts`). Default: the current one. */
  attempt?: number;
}

export interface StreamLogsOptions {
  /** Job numbers (global ranks) to read. Default [0], the global master. */
  jobs?: number[];
  /** Keep reading until the run has ended; otherwise stop once what is there now has been read. */
  follow?: boolean;
  /** Pause between polls while following, in ms. Default 1000. */
  pollMs?: number;
  limitBytes?: number;
  /** Read this attempt of each job (an earlier machine, see `previous_attempts`). Default: the current one. */
  attempt?: number;
  signal?: AbortSignal;
  /**
   * While following: called when the run cannot be read for now (no worker, or it does not
   * answer); following goes on at the next poll. Without it, such an error ends the stream.
   */
  onUnavailable?: (err: RunUnavailableError) => void;
}

/** A piece of one job's log. A resubmission by `retry`, or a restart of the node, starts its log again at offset 0. */
export interface JobLogChunk {
  job_num: number;
  group_name: string;
  group_job_index: number;
  submission: number;
  /** Which machine of the node wrote it (0 first, +1 per restart). */
  attempt: number;
  data: string;
}

export interface WatchOptions {
  /** Poll interval in ms. Default 500. */
  intervalMs?: number;
  signal?: AbortSignal;
  /** Called when the state cannot be read for now (no worker, or it does not answer); watching goes on. Without it, watch throws. */
  onUnavailable?: (err: RunUnavailableError) => void;
}

const DEFAULT_LOG_LIMIT_BYTES = 256 * 1024;
/** A log read is a short workflow; without a worker it would wait forever. */
const LOG_READ_TIMEOUT = '1 minute';

/** The innermost message of a Temporal failure chain: what actually went wrong. */
export function rootCauseMessage(err: unknown): string {
  let current: unknown = err;
  while (current instanceof Error && current.cause instanceof Error) current = current.cause;
  return current instanceof Error ? current.message : String(current);
}

async function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  try {
    await sleep(ms, undefined, signal ? { signal } : {});
  } catch {
    // Aborted: the caller checks signal.aborted.
  }
}

/**
 * One run, by name (and, for an earlier run of a reused name, by Temporal run id). Every method
 * reads the run afresh; a handle holds no state of its own.
 */
export class RunHandle {
  readonly workflowId: string;

  constructor(
    private readonly ctx: RunContext,
    readonly name: string,
    /** Temporal run id of one execution; null means the latest run of that name. */
    readonly runId: string | null = null,
  ) {
    this.workflowId = runWorkflowId(name);
  }

  private handle(): WorkflowHandle<RunWorkflowFn> {
    return this.ctx.client.workflow.getHandle<RunWorkflowFn>(this.workflowId, this.runId ?? undefined);
  }

  private notFound(err: unknown): unknown {
    return err instanceof WorkflowNotFoundError ? new RunNotFoundError(this.name, this.ctx.namespace, { cause: err }) : err;
  }

  /** Temporal's description of the run's workflow execution. */
  async describe(): Promise<WorkflowExecutionDescription> {
    try {
      return await this.handle().describe();
    } catch (err) {
      throw this.notFound(err);
    }
  }

  /**
   * Per job: CPU, memory and GPUs, as the workers that supervise the run's jobs sampled them on
   * the nodes (asked at their metrics endpoints; nothing goes through the run's history).
   */
  async metrics(options: RunMetricsOptions = {}): Promise<RunMetrics> {
    return await fetchRunMetrics(this.name, options);
  }

  /** The run's current state: its query while it is open, its result once it has closed. */
  async state(): Promise<RunState> {
    const info = await this.describe();
    return info.status.name === 'RUNNING' ? await this.queryState() : await this.closedState(info);
  }

  /** Waits for the run to end and returns its final state (DONE, FAILED or TERMINATED). */
  async wait(): Promise<RunState> {
    try {
      return await this.withJobs(parseRunState(await this.handle().result(), this.name));
    } catch (err) {
      if (err instanceof WorkflowFailedError) return await this.closedState(await this.describe());
      throw this.notFound(err);
    }
  }

  /** Asks the run to stop gracefully (TERMINATED_BY_USER). False when it had already ended. */
  async stop(): Promise<boolean> {
    return await this.sendStop(false);
  }

  /** Asks the run to stop at once, without the graceful period (ABORTED_BY_USER). False when it had already ended. */
  async abort(): Promise<boolean> {
    return await this.sendStop(true);
  }

  private async sendStop(abort: boolean): Promise<boolean> {
    const info = await this.describe();
    if (info.status.name !== 'RUNNING') return false;
    try {
      await this.handle().signal(stopRunSignal, { abort });
      return true;
    } catch (err) {
      // Closed between describe and signal: nothing left to stop.
      if (err instanceof WorkflowNotFoundError) return false;
      throw err;
    }
  }

  /**
   * Resizes a group declared `nodes: MIN..MAX` (Troupe's extension) to `nodes`. The run validates
   * the request (the group, its bounds, the run's state) before it accepts it, and answers once the
   * new nodes run (READY with a probe) or the removed ones are stopped and their machines released.
   * A refused or failed resize throws a TroupeClientError carrying the run's reason.
   */
  async scaleGroup(group: string, nodes: number): Promise<ScaleGroupResult> {
    if (!Number.isSafeInteger(nodes) || nodes < 1) {
      throw new TroupeClientError(`a group's size is a whole number of nodes, 1 or more; got ${String(nodes)}`);
    }
    return await this.update({
      ended: `run ${this.name} has ended: there is no group to scale`,
      purpose: `scale group "${group}" of run ${this.name}`,
      failed: `run ${this.name} did not scale group "${group}" to ${nodes}`,
      ask: (handle) => handle.executeUpdate(scaleGroupUpdate, { args: [{ group, nodes }] }),
    });
  }

  /**
   * Deploys a changed plan of a running service (dstack's `apply` of a changed service): replicas,
   * scaling and the endpoint's settings change in place, changed commands roll one replica at a time
   * per group. The run refuses what a running service cannot change, naming the fields, and answers
   * once the deployment is over. A refused or failed deployment throws a TroupeClientError with the
   * run's reason.
   */
  async applyService(plan: Plan): Promise<ApplyServiceResult> {
    // Secrets travel sealed, as at submission: the Update's input is in the run's history.
    const sealed = sealSecrets(plan);
    return await this.update({
      ended: `run ${this.name} has ended: there is no service to deploy to`,
      purpose: `deploy to service ${this.name}`,
      failed: `service ${this.name} was not deployed to`,
      ask: (handle) => handle.executeUpdate(applyServiceUpdate, { args: [{ plan: sealed }] }),
    });
  }

  /** A service's last rollout, under way or over, from the run's state (null: none since the run began, or not a service). */
  async rolloutStatus(): Promise<RolloutStatus | null> {
    return (await this.state()).service?.rollout ?? null;
  }

  /**
   * Pauses a service's coherent rollout where it is: no next step, its progress deadline and canary
   * soak stopped. Answers with the rollout once paused; a refusal (none under way, dstack's rolling,
   * paused already, rolling back) throws a TroupeClientError with the run's reason.
   */
  async pauseRollout(): Promise<RolloutControlResult> {
    return await this.rolloutControl('pause');
  }

  /** Resumes a paused rollout, its clocks going on from where they stopped. Answers with the rollout once resumed. */
  async resumeRollout(): Promise<RolloutControlResult> {
    return await this.rolloutControl('resume');
  }

  /**
   * Rolls back the rollout under way (the old revision serving throughout), or, once one went
   * through, deploys the spec it replaced again as the next deployment. Answers once the rollback is
   * over; refused once the old revision is being stopped, or with nothing to go back to.
   */
  async rollbackRollout(): Promise<RolloutControlResult> {
    return await this.rolloutControl('rollback');
  }

  private async rolloutControl(action: RolloutAction): Promise<RolloutControlResult> {
    const verb = action === 'rollback' ? 'roll back' : action;
    return await this.update({
      ended: `run ${this.name} has ended: there is no rollout to ${verb}`,
      purpose: `${verb} the rollout of service ${this.name}`,
      failed: `service ${this.name} did not ${verb} its rollout`,
      ask: (handle) => handle.executeUpdate(rolloutControlUpdate, { args: [{ action }] }),
    });
  }

  /**
   * An Update of the running run: refused at once when the run has ended or no worker would take it,
   * asked again while the run hands over to its next execution, and a refusal or failure turned into
   * a TroupeClientError that says `failed` and the run's reason.
   */
  private async update<T>(call: { ended: string; purpose: string; failed: string; ask: (handle: WorkflowHandle<RunWorkflowFn>) => Promise<T> }): Promise<T> {
    const info = await this.describe();
    if (info.status.name !== 'RUNNING') throw new TroupeClientError(call.ended);
    // An Update waits for a worker to take it: without one it would wait forever.
    const missing = await missingPollers(this.ctx.client, this.ctx);
    if (missing.includes('workflow')) throw new NoWorkerError(this.ctx, missing, call.purpose);
    try {
      return await askThroughHandOver(() => call.ask(this.handle()));
    } catch (err) {
      if (err instanceof WorkflowUpdateFailedError) throw new TroupeClientError(`${call.failed}: ${rootCauseMessage(err)}`, { cause: err });
      throw this.notFound(err);
    }
  }

  /** Reads a chunk of job `jobNum`'s log through a worker (the log stays on the node). */
  async readLog(jobNum: number, options: ReadLogOptions = {}): Promise<LogChunk> {
    return await this.readLogOf(await this.state(), jobNum, options.offset ?? 0, options.limitBytes ?? DEFAULT_LOG_LIMIT_BYTES, options.attempt);
  }

  /**
   * The logs of some jobs, chunk by chunk, in the order they were read. With `follow`, polls until
   * the run has ended and every log is drained; ends early when `signal` aborts.
   */
  async *streamLogs(options: StreamLogsOptions = {}): AsyncGenerator<JobLogChunk> {
    const jobNums = options.jobs ?? [0];
    const limit = options.limitBytes ?? DEFAULT_LOG_LIMIT_BYTES;
    const cursors = new Map<number, { submission: number; attempt: number; offset: number; drainedFinished: boolean }>();
    const tolerate = (err: unknown): boolean => {
      if (!options.follow || !options.onUnavailable || !isRunUnavailable(err)) return false;
      options.onUnavailable(err);
      return true;
    };
    for (;;) {
      let state: RunState;
      try {
        state = await this.state();
      } catch (err) {
        if (!tolerate(err)) throw err;
        await pause(options.pollMs ?? 1000, options.signal);
        if (options.signal?.aborted) return;
        continue;
      }
      const runEnded = isFinished(state.status);
      for (const jobNum of jobNums) {
        const job = jobOf(state, jobNum);
        const machine = machineOf(state, job, options.attempt);
        let cursor = cursors.get(jobNum);
        // A resubmission, or a restart onto a new machine, starts a new log.
        if (!cursor || cursor.submission !== state.submission || cursor.attempt !== machine.attempt) {
          cursor = { submission: state.submission, attempt: machine.attempt, offset: 0, drainedFinished: false };
          cursors.set(jobNum, cursor);
        }
        if (!machine.instance || cursor.drainedFinished) continue;
        const jobEnded = machine.attempt !== job.attempt || isJobFinished(job);
        for (;;) {
          if (options.signal?.aborted) return;
          let chunk: LogChunk;
          try {
            chunk = await this.readLogOf(state, jobNum, cursor.offset, limit, machine.attempt);
          } catch (err) {
            // After the end the backend may have released the node: nothing more to read.
            if (jobEnded || runEnded || tolerate(err)) break;
            throw err;
          }
          const grew = chunk.next_offset > cursor.offset;
          cursor.offset = chunk.next_offset;
          if (chunk.data.length > 0) {
            yield {
              job_num: jobNum,
              group_name: job.group_name,
              group_job_index: job.group_job_index,
              submission: state.submission,
              attempt: machine.attempt,
              data: chunk.data,
            };
          }
          if (!grew || chunk.data.length === 0) break;
        }
        if (jobEnded) cursor.drainedFinished = true;
      }
      if (!options.follow || runEnded || options.signal?.aborted) return;
      await pause(options.pollMs ?? 1000, options.signal);
      if (options.signal?.aborted) return;
    }
  }

  /** The run's state each time it changes, ending with its final state. */
  async *watch(options: WatchOptions = {}): AsyncGenerator<RunState> {
    let last = '';
    for (;;) {
      let state: RunState | null = null;
      try {
        state = await this.state();
      } catch (err) {
        if (!isRunUnavailable(err) || !options.onUnavailable) throw err;
        options.onUnavailable(err);
      }
      if (state) {
        const key = JSON.stringify(state);
        if (key !== last) {
          last = key;
          yield state;
        }
        if (isFinished(state.status)) return;
      }
      if (options.signal?.aborted) return;
      await pause(options.intervalMs ?? 500, options.signal);
      if (options.signal?.aborted) return;
    }
  }

  /** Reads a log chunk for a job of a state already in hand (one query fewer per poll); `attempt`: an earlier machine of the job. */
  async readLogOf(state: RunState, jobNum: number, offset: number, limitBytes: number, attempt?: number): Promise<LogChunk> {
    const ref = logRefOf(state, jobOf(state, jobNum), attempt);
    if (!ref) return { data: '', next_offset: offset };
    const input: ReadLogInput = { backend: state.backend, job: ref, offset, limit_bytes: limitBytes };
    try {
      return await this.ctx.client.workflow.execute<ReadJobLogWorkflowFn>('ReadJobLogWorkflow', {
        taskQueue: this.ctx.taskQueue,
        workflowId: logReaderWorkflowId(state.run_id, jobNum, randomUUID()),
        args: [input],
        workflowExecutionTimeout: LOG_READ_TIMEOUT,
      });
    } catch (err) {
      if (!(err instanceof WorkflowFailedError)) throw err;
      const missing = await missingPollers(this.ctx.client, this.ctx);
      if (missing.length > 0) throw new NoWorkerError(this.ctx, missing, `read the log of ${this.name} job ${jobNum}`);
      if (err.cause instanceof TimeoutFailure) {
        throw new RunUnreachableError(this.name, `reading the log of job ${jobNum} timed out`, { cause: err });
      }
      throw new TroupeClientError(`could not read the log of ${this.name} job ${jobNum}: ${rootCauseMessage(err)}`, {
        cause: err,
      });
    }
  }

  private async queryState(timeoutMs = this.ctx.queryTimeoutMs): Promise<RunState> {
    const state = await this.ask(() => this.handle().query(runStateQuery), 'state', timeoutMs);
    return await this.withJobs(parseRunState(state, this.name), timeoutMs);
  }

  /** The state with its jobs, read a page at a time when the run answered without them. */
  private async withJobs(state: RunState, timeoutMs = this.ctx.queryTimeoutMs): Promise<RunState> {
    return await withAllJobs(state, (offset, limit) => this.ask(() => this.handle().query(runJobsQuery, { offset, limit }), 'jobs', timeoutMs));
  }

  /** A query of the run, with its deadline, and the errors that say why it got no answer. */
  private async ask<T>(query: () => Promise<T>, what: string, timeoutMs: number): Promise<T> {
    try {
      return await this.ctx.client.connection.withDeadline(Date.now() + timeoutMs, query);
    } catch (err) {
      if (isQueryTimeout(err)) {
        const missing = await missingPollers(this.ctx.client, this.ctx);
        if (missing.includes('workflow')) throw new NoWorkerError(this.ctx, missing, `read the ${what} of run ${this.name}`);
        throw new RunUnreachableError(this.name, `no answer to its ${what} query within ${timeoutMs / 1000}s`, { cause: err });
      }
      throw this.notFound(err);
    }
  }

  /**
   * The final state of a closed run. Normally its result; when the workflow itself failed or was
   * terminated from outside Troupe, its last queried state (if a worker can replay it) or what
   * the memo says, marked FAILED or TERMINATED with the failure's message.
   */
  async closedState(info: WorkflowExecutionInfo | WorkflowExecutionDescription): Promise<RunState> {
    let failure: unknown;
    let result: RunState | null = null;
    try {
      result = parseRunState(await this.handle().result(), this.name);
    } catch (err) {
      if (!(err instanceof WorkflowFailedError)) throw this.notFound(err);
      failure = err;
    }
    if (result) return await this.withJobs(result);
    const status: RunStatus = info.status.name === 'FAILED' || info.status.name === 'TIMED_OUT' ? 'FAILED' : 'TERMINATED';
    const message = `workflow ${info.status.name.toLowerCase()}: ${rootCauseMessage(failure)}`;
    const finishedAt = (info.closeTime ?? new Date()).toISOString();
    let last: RunState | null = null;
    try {
      last = await this.queryState(Math.min(this.ctx.queryTimeoutMs, 5_000));
    } catch {
      // No worker to replay it: the memo has to do.
    }
    if (last) {
      return isFinished(last.status)
        ? last
        : { ...last, status, message: last.message ?? message, finished_at: finishedAt };
    }
    const memo = readRunMemo(info.memo);
    return {
      run_name: this.name,
      run_id: this.workflowId,
      run_uid: info.runId,
      backend: memo?.backend ?? 'unknown',
      status,
      termination_reason: null,
      message,
      submission: 0,
      submitted_at: info.startTime.toISOString(),
      finished_at: finishedAt,
      groups: (memo?.groups ?? []).map((g, index) => ({ index, name: g.name, nodes: g.nodes, waiting_for: null, nodes_range: null, restarts: 0 })),
      jobs: [],
      jobs_paged: false,
      peers_version: 0,
      service: null,
    };
  }
}

/**
 * The query ran out of time: DEADLINE_EXCEEDED (from the server when no worker takes it, or from our
 * deadline), wrapped by the client. grpc-js sometimes reports our deadline as CANCELLED instead
 * when several calls share it; nothing else cancels these calls.
 */
function isQueryTimeout(err: unknown): boolean {
  const inner = err instanceof ServiceError ? err.cause : err;
  return isGrpcDeadlineError(inner) || isGrpcCancelledError(inner);
}

function parseRunState(value: unknown, runName: string): RunState {
  const parsed = RunStateSchema.safeParse(value);
  if (!parsed.success) {
    throw new TroupeClientError(
      `run ${runName} returned a state this client does not understand (a different Troupe version?): ${parsed.error.message}`,
    );
  }
  return parsed.data;
}

function jobOf(state: RunState, jobNum: number): JobState {
  const job = state.jobs.find((j) => j.job_num === jobNum);
  if (!job) throw new JobNotFoundError(state.run_name, jobNum, state.jobs.length);
  return job;
}

function isJobFinished(job: JobState): boolean {
  return ['TERMINATED', 'ABORTED', 'FAILED', 'DONE'].includes(job.status);
}
