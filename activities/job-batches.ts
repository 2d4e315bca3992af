import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { WorkflowNotFoundError } from '@temporalio/client';
import { InstanceUnreachableError, SubmissionClosedError, type Backend, type JobFiles, type JobRef } from '../src/backends/backend';
import { describeProbeAnswer, renderProbeScript } from '../src/runner/ready-probe';
import { classifyBatchFailure, FailureType, type BatchJobFailure } from '../workflows/failure-types';
import { AddressBookSchema } from '../workflows/message-schemas';
import { jobEventsSignal, runAddressBookQuery, type AddressBook, type JobEvent } from '../workflows/messages';
import { backendFor } from './backend-lookup';
import { mapLimit } from '../src/concurrency/map-limit';
import type { RunSshKeys } from '../src/secrets/run-ssh-keys';
import { hasSealedValues, openSecrets, viewOfBook, renderFilesFor, runSshKeysFor, UNREACHABLE_LIMIT_MS } from './jobs';
import type { BackendRegistry, RunJobsInput, WaitRunnersInput } from './types';
import { runExecutionOf } from './run-execution';
import { SecretKeyError } from '../src/secrets/sealed-env';
import type { RunExecution } from '../src/secrets/seal-binding';
import { countJobEvents, watchJobMetrics } from './job-metrics';
import { traceJobStart } from './job-tracing';
import { pushedEnds, type PushedEnds } from './pushed-ends';

/**
 * A group's jobs handled in batches: one activity waits for all of a group's runners, one starts
 * a batch of jobs and supervises it (exits, readiness, lost hosts) until the last of them ends.
 * What happens to each job goes straight to the run as `jobEvents` signals, one per change found,
 * so a node costs no Temporal operation of its own. Retried after a worker crash, both pick up
 * where the jobs are: starts are at most once in the backend, and the run ignores events it has.
 */

/** Backend calls in flight at once in one batch (each is a process spawn or an SSH round trip). */
const CONCURRENCY = 32;
/** Attempts at starting one job whose start fails with a retryable error, within the batch. */
const START_ATTEMPTS = 5;
/** With more jobs than this still running, exits found within a second are sent in one signal. */
const COALESCE_ABOVE_JOBS = 16;
const COALESCE_MS = 1_000;

interface ProgressDetails {
  /** Epoch ms when the first attempt began: deadlines hold across retries. */
  started_ms: number;
}

/** When the activity's first attempt began (kept in its heartbeat details across retries). */
function firstAttemptStartedMs(ctx: Context): number {
  const details = ctx.info.heartbeatDetails as ProgressDetails | undefined;
  return typeof details?.started_ms === 'number' ? details.started_ms : Date.now();
}

/** Heartbeats on a timer for the activity's whole life (cancellation arrives through them). */
function heartbeatEvery(ctx: Context, details: ProgressDetails, everyMs = 2_000): () => void {
  ctx.heartbeat(details);
  const timer = setInterval(() => ctx.heartbeat(details), everyMs);
  return () => clearInterval(timer);
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The run's `jobEvents` signal; false when the run is gone (its teardown cancels this activity anyway). */
async function sendEvents(ctx: Context, runWorkflowId: string, submission: number, events: JobEvent[]): Promise<boolean> {
  if (events.length === 0) return true;
  try {
    await ctx.client.workflow.getHandle(runWorkflowId).signal(jobEventsSignal, { submission, events });
    return true;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return false;
    throw err;
  }
}

/** The attempt an event is about, when not a node's first machine. */
const attemptOf = (job: JobRef): { attempt?: number } => (job.attempt ? { attempt: job.attempt } : {});

const failed = (job: JobRef, failure: BatchJobFailure): JobEvent => ({ kind: 'failed', job_num: job.job_num, ...attemptOf(job), ...classifyBatchFailure(failure) });

async function askAddressBook(ctx: Context, runWorkflowId: string, submission: number): Promise<AddressBook> {
  const answer = await ctx.client.workflow.getHandle(runWorkflowId).query(runAddressBookQuery, { submission });
  if (answer === null) {
    throw ApplicationFailure.nonRetryable(
      `${runWorkflowId} has no address book for submission ${submission} (it has moved on to another)`,
      FailureType.SubmissionClosed,
    );
  }
  return AddressBookSchema.parse(answer);
}

/** Address books this worker read lately, by run (its first execution's id) and submission: its batches of one run ask once. */
const books = new Map<string, Promise<AddressBook>>();
const BOOKS_KEPT = 64;

/** The run's address book, from its `runAddressBook` query (once per run and submission in this worker). */
function addressBookOf(ctx: Context, runWorkflowId: string, runUid: string, submission: number): Promise<AddressBook> {
  const key = `${runUid}#${submission}`;
  const known = books.get(key);
  if (known) return known;
  const asked = askAddressBook(ctx, runWorkflowId, submission);
  books.set(key, asked);
  asked.catch(() => books.delete(key));
  const oldest = books.keys().next().value;
  if (books.size > BOOKS_KEPT && oldest !== undefined) books.delete(oldest);
  return asked;
}

export function createJobBatchActivities(backends: BackendRegistry) {
  return {
    /**
     * Waits until every job's runner can run commands, all of them in parallel, up to the
     * runner timeout counted from the first attempt. Returns the jobs whose runner never came,
     * with the last answer; the others are ready.
     */
    async waitRunnersReady({ backend, jobs, timeout_s }: WaitRunnersInput): Promise<{ failed: Array<BatchJobFailure & { job_num: number }> }> {
      const target = backendFor(backends, backend);
      const ctx = Context.current();
      const details = { started_ms: firstAttemptStartedMs(ctx) };
      const stop = heartbeatEvery(ctx, details);
      const deadline = details.started_ms + timeout_s * 1000;
      const last = new Map<number, string>();
      let pending = [...jobs];
      let delay = 200;
      try {
        for (;;) {
          const answers = await Promise.race([
            mapLimit(pending, CONCURRENCY, async (job) => {
              try {
                if (await target.runnerReady(job)) return true;
                last.set(job.job_num, `runner of ${job.job_name} on ${job.instance.host} is not ready yet`);
              } catch (err) {
                last.set(job.job_num, messageOf(err));
              }
              return false;
            }),
            ctx.cancelled,
          ]);
          pending = pending.filter((_, i) => !answers[i]);
          if (pending.length === 0) return { failed: [] };
          if (Date.now() + delay >= deadline) {
            return {
              failed: pending.map((job) => ({
                job_num: job.job_num,
                type: FailureType.RunnerNotReady,
                message: `runner not ready after ${timeout_s}s: ${last.get(job.job_num) ?? 'no answer'}`,
              })),
            };
          }
          await ctx.sleep(delay);
          delay = Math.min(delay * 1.5, 5_000);
        }
      } finally {
        stop();
      }
    },

    /**
     * Starts a batch of jobs (files written, commands started, at most once each) and supervises
     * them until the last one ends: `running`, `ready`, `exited` and `failed` go to the run as
     * they happen. Readiness is probed while a job runs, until the group's timeout counted from
     * the first attempt's start.
     */
    async runJobs(input: RunJobsInput): Promise<void> {
      const target = backendFor(backends, input.backend);
      const ctx = Context.current();
      const details = { started_ms: firstAttemptStartedMs(ctx) };
      const stop = heartbeatEvery(ctx, details);
      const send = (events: JobEvent[]) => {
        countJobEvents(input.backend, events);
        return sendEvents(ctx, input.run_workflow_id, input.submission, events);
      };
      try {
        const addresses = input.addresses ?? (await Promise.race([addressBookOf(ctx, input.run_workflow_id, input.run_uid, input.submission), ctx.cancelled]));
        const run = await Promise.race([sealingRunOf(ctx, input), ctx.cancelled]);
        const started = await Promise.race([startBatch(target, input, addresses, details.started_ms, run), ctx.cancelled]);
        if (!(await send(started.events))) return;
        const watched = watchJobMetrics(target, input, started.running);
        const ends = pushedEnds(target, started.running, input.interval_ms);
        try {
          await supervise(ctx, target, input, started.running, details.started_ms, send, watched.ended, ends);
        } finally {
          watched.stop();
          ends?.close();
        }
      } finally {
        stop();
      }
    },
  };
}

/** The run's execution as Temporal reports it, when the batch has sealed values to open (else null); a refusal is a SecretKeyError to report per job. */
async function sealingRunOf(ctx: Context, input: RunJobsInput): Promise<RunExecution | SecretKeyError | null> {
  if (!hasSealedValues(input.run.env)) return null;
  try {
    return await runExecutionOf(ctx, input.run_workflow_id);
  } catch (err) {
    if (err instanceof SecretKeyError) return err;
    throw err;
  }
}

/** Starts every job of the batch; `running` and `failed` events for all of them, and the refs that run. */
async function startBatch(
  target: Backend,
  input: RunJobsInput,
  addresses: AddressBook,
  startedMs: number,
  run: RunExecution | SecretKeyError | null,
): Promise<{ events: JobEvent[]; running: JobRef[] }> {
  let env: Record<string, string>;
  let sshKeys: RunSshKeys | null;
  try {
    if (run instanceof SecretKeyError) throw ApplicationFailure.nonRetryable(run.message, FailureType.SecretKey);
    env = openSecrets(input.run.env, run);
    sshKeys = runSshKeysFor(input.run_uid, input.submission, addresses.job_ips.length);
  } catch (err) {
    if (err instanceof ApplicationFailure && err.type === FailureType.SecretKey) {
      return { events: input.jobs.map(({ ref }) => failed(ref, { type: FailureType.SecretKey, message: err.message })), running: [] };
    }
    throw err;
  }
  const ctx = {
    target,
    run: input.run,
    runUid: input.run_uid,
    env,
    addresses,
    view: viewOfBook(addresses, input.group_sizes),
    groupNames: input.group_names ?? null,
    sshKeys,
  };
  // The same book for every job of the batch: serialized once, not once per node.
  const peers = addresses.peers ? { version: addresses.peers.version, json: JSON.stringify(addresses.peers) } : null;
  const outcomes = await mapLimit(input.jobs, CONCURRENCY, async ({ ref, plan_job }): Promise<JobEvent> => {
    let files: JobFiles;
    try {
      files = renderFilesFor(ctx, ref, plan_job);
      if (peers) files = { ...files, peers };
      // A backend that probes on the node gets the probe with the job; its timeout counts from the first attempt's start.
      if (input.probe && target.readiness) {
        const budget_ms = startedMs + input.probe.timeout_s * 1000 - Date.now();
        files = { ...files, ready_probe: { script: renderProbeScript(input.probe, ref.instance.internal_ip), interval_s: input.probe.interval_s, budget_ms } };
      }
    } catch (err) {
      return failed(ref, { type: FailureType.InvalidJobFiles, message: messageOf(err) });
    }
    for (let attempt = 1; ; attempt++) {
      try {
        const { pid } = await traceJobStart(input.run.run_name, input.backend, ref, plan_job, () => target.startJob(ref, files));
        return { kind: 'running', job_num: ref.job_num, ...attemptOf(ref), pid };
      } catch (err) {
        // Released, or a stop claimed the job first: starting it now would leak a process.
        if (err instanceof SubmissionClosedError) return failed(ref, { type: FailureType.SubmissionClosed, message: err.message });
        if (attempt >= START_ATTEMPTS) {
          const type = err instanceof InstanceUnreachableError ? FailureType.InstanceUnreachable : 'StartFailed';
          return failed(ref, { type, message: `${ref.job_name} on ${ref.instance.host} did not start: ${messageOf(err)}` });
        }
        await new Promise((resolve) => setTimeout(resolve, 500 * 2 ** (attempt - 1)));
      }
    }
  });
  const running = input.jobs.filter((_, i) => outcomes[i]?.kind === 'running').map(({ ref }) => ref);
  return { events: outcomes, running };
}

interface Supervised {
  ref: JobRef;
  label: string;
  unreachableSince: number | null;
  /** Readiness still to be found (only with a probe). */
  awaitingReady: boolean;
  nextProbeMs: number;
  probing: boolean;
  lastAnswer: string;
}

/**
 * Checks every running job each interval (with pushed ends: the ones the backend names) and probes the unready ones, until every job has ended.
 * A backend with `readiness()` (SSH) probes on the node itself from the job's start: it is asked
 * for the outcome each interval instead, which costs no command until the node pushes one.
 */
async function supervise(
  ctx: Context,
  target: Backend,
  input: RunJobsInput,
  refs: JobRef[],
  startedMs: number,
  send: (events: JobEvent[]) => Promise<boolean>,
  /** A job no longer supervised (it ended, or its host was lost). */
  ended: (jobNum: number) => void = () => undefined,
  /** The backend's pushed ends: only the jobs it names are checked after the first round. */
  ends: PushedEnds | null = null,
): Promise<void> {
  const probe = input.probe;
  const readyDeadline = probe ? startedMs + probe.timeout_s * 1000 : Infinity;
  const labels = new Map(input.jobs.map(({ ref, plan_job }) => [ref.job_num, `${plan_job.node_group_name}/${plan_job.node_group_job_index}`]));
  const live = new Map<number, Supervised>(
    refs.map((ref) => [
      ref.job_num,
      { ref, label: labels.get(ref.job_num) ?? ref.job_name, unreachableSince: null, awaitingReady: probe !== null, nextProbeMs: 0, probing: false, lastAnswer: 'no answer yet' },
    ]),
  );
  /** Found by probes between two checks: sent with the next check's events, before them. */
  let probeEvents: JobEvent[] = [];
  let pending: JobEvent[] = [];
  let pendingSinceMs = 0;

  /** A backend that probes on the node: its outcome, read without a command until it changes. */
  const askReadiness = (job: Supervised, readiness: NonNullable<Backend['readiness']>) => {
    if (!probe) return;
    job.probing = true;
    readiness
      .call(target, job.ref)
      .catch(() => ({ state: 'pending' as const }))
      .then((answer) => {
        job.probing = false;
        if (!live.has(job.ref.job_num) || !job.awaitingReady || answer.state === 'pending') return;
        job.awaitingReady = false;
        if (answer.state === 'ready') probeEvents.push({ kind: 'ready', job_num: job.ref.job_num, ...attemptOf(job.ref) });
        else {
          const last = describeProbeAnswer(probe, job.ref.instance.internal_ip, answer);
          probeEvents.push(failed(job.ref, { type: FailureType.NotReady, message: `${job.label} not ready after ${probe.timeout_s}s: ${last}` }));
        }
      });
  };

  const runProbe = (job: Supervised) => {
    if (!probe) return;
    if (target.readiness) return askReadiness(job, target.readiness);
    job.probing = true;
    const script = renderProbeScript(probe, job.ref.instance.internal_ip);
    const attemptMs = Math.max(100, Math.min(10_000, readyDeadline - Date.now()));
    target
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
        if (!live.has(job.ref.job_num) || !job.awaitingReady) return;
        if (ready) {
          job.awaitingReady = false;
          probeEvents.push({ kind: 'ready', job_num: job.ref.job_num, ...attemptOf(job.ref) });
        } else if (Date.now() + probe.interval_s * 1000 >= readyDeadline) {
          job.awaitingReady = false;
          probeEvents.push(failed(job.ref, { type: FailureType.NotReady, message: `${job.label} not ready after ${probe.timeout_s}s: ${job.lastAnswer}` }));
        } else {
          job.nextProbeMs = Date.now() + probe.interval_s * 1000;
        }
      });
  };

  while (live.size > 0) {
    const now = Date.now();
    for (const job of live.values()) {
      if (job.awaitingReady && !job.probing && job.nextProbeMs <= now) runProbe(job);
    }
    const jobs = ends ? ends.pick([...live.values()], (job) => job.unreachableSince !== null) : [...live.values()];
    const states = await Promise.race([
      mapLimit(jobs, CONCURRENCY, async (job) => {
        try {
          return await target.jobState(job.ref);
        } catch (err) {
          if (err instanceof InstanceUnreachableError) return err;
          throw err;
        }
      }),
      ctx.cancelled,
    ]);
    // Readiness found before an exit is reported before it.
    const events: JobEvent[] = probeEvents;
    probeEvents = [];
    jobs.forEach((job, i) => {
      const state = states[i];
      if (state instanceof InstanceUnreachableError) {
        job.unreachableSince ??= Date.now();
        if (Date.now() - job.unreachableSince > UNREACHABLE_LIMIT_MS) {
          live.delete(job.ref.job_num);
        ended(job.ref.job_num);
          events.push(
            failed(job.ref, {
              type: FailureType.InstanceUnreachable,
              message: `${job.ref.instance.host} unreachable for ${UNREACHABLE_LIMIT_MS / 1000}s while running ${job.ref.job_name}: ${state.message}`,
            }),
          );
        }
        return;
      }
      job.unreachableSince = null;
      if (state?.state === 'exited') {
        live.delete(job.ref.job_num);
        ended(job.ref.job_num);
        events.push({ kind: 'exited', job_num: job.ref.job_num, ...attemptOf(job.ref), exit_code: state.exit_code });
      } else if (state?.state === 'absent') {
        live.delete(job.ref.job_num);
        ended(job.ref.job_num);
        events.push(failed(job.ref, { type: FailureType.JobVanished, message: `${job.ref.job_name} on ${job.ref.instance.host}: its process and job directory are gone` }));
      }
    });
    // A failure of any kind, the last exit, readiness or a small batch: sent now. Many clean exits
    // of a large batch: gathered for a second, so a thousand jobs ending together cost a few signals.
    if (events.length > 0 && pending.length === 0) pendingSinceMs = Date.now();
    pending.push(...events);
    const urgent = pending.some((e) => e.kind !== 'exited' || e.exit_code !== 0);
    if (pending.length > 0 && (urgent || live.size <= COALESCE_ABOVE_JOBS || Date.now() - pendingSinceMs >= COALESCE_MS)) {
      if (!(await send(pending))) return;
      pending = [];
    }
    if (live.size === 0) break;
    await (ends ? ends.pause(ctx, input.interval_ms, live) : ctx.sleep(input.interval_ms));
  }
  if (probeEvents.length > 0 || pending.length > 0) await send([...pending, ...probeEvents]);
}
