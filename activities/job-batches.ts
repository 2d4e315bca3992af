import { Context } from '@temporalio/activity';
import { WorkflowNotFoundError } from '@temporalio/client';
import { CannotStartError, SubmissionClosedError, type Backend, type JobFiles, type JobRef } from '../src/backends/backend';
import { renderProbeScript } from '../src/runner/ready-probe';
import { FailureType, type BatchJobFailure } from '../src/run-core/failure-table';
import { AddressBookSchema } from '../src/contract/message-schemas';
import { jobEventsSignal, runAddressBookQuery, type AddressBook, type JobEvent } from '../src/contract/messages';
import { activityFailure, jobFailureOf } from './activity-failure';
import { backendFor } from './backend-lookup';
import { mapLimit } from '../src/concurrency/map-limit';
import type { RunSshKeys } from '../src/secrets/run-ssh-keys';
import { hasSealedValues, openSecrets, viewOfBook, renderFilesFor, runSshKeysFor } from './jobs';
import type { BackendRegistry, RunJobsInput, WaitRunnersInput } from './types';
import { runExecutionOf } from './run-execution';
import { SecretKeyError } from '../src/secrets/sealed-env';
import type { RunExecution, SealFactsOf } from '../src/secrets/seal-binding';
import { temporalSealFacts } from '../src/secrets/seal-history';
import { countJobEvents, watchJobMetrics } from './job-metrics';
import { traceJobStart } from './job-tracing';
import { pushedEnds } from './pushed-ends';
import { whileHeartbeating } from './heartbeat';
import { activityClock, attemptOf, CONCURRENCY, failed, JobSupervisor, pushedRounds } from './job-supervisor';

/**
 * A group's jobs handled in batches: one activity waits for all of a group's runners, one starts
 * a batch of jobs and supervises it (exits, readiness, lost hosts) until the last of them ends.
 * What happens to each job goes straight to the run as `jobEvents` signals, one per change found,
 * so a node costs no Temporal operation of its own. Retried after a worker crash, both pick up
 * where the jobs are: starts are at most once in the backend, and the run ignores events it has.
 */

/** Attempts at starting one job whose start fails with a retryable error, within the batch. */
const START_ATTEMPTS = 5;

interface ProgressDetails {
  /** Epoch ms when the first attempt began: deadlines hold across retries. */
  started_ms: number;
}

/** When the activity's first attempt began (kept in its heartbeat details across retries). */
function firstAttemptStartedMs(ctx: Context): number {
  const details = ctx.info.heartbeatDetails as ProgressDetails | undefined;
  return typeof details?.started_ms === 'number' ? details.started_ms : Date.now();
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

async function askAddressBook(ctx: Context, runWorkflowId: string, submission: number): Promise<AddressBook> {
  const answer = await ctx.client.workflow.getHandle(runWorkflowId).query(runAddressBookQuery, { submission });
  if (answer === null) {
    throw activityFailure(FailureType.SubmissionClosed, `${runWorkflowId} has no address book for submission ${submission} (it has moved on to another)`);
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
      const deadline = details.started_ms + timeout_s * 1000;
      const last = new Map<number, string>();
      let pending = [...jobs];
      let delay = 200;
      return await whileHeartbeating(async () => {
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
      }, { details });
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
      const send = (events: JobEvent[]) => {
        countJobEvents(input.backend, events);
        return sendEvents(ctx, input.run_workflow_id, input.submission, events);
      };
      await whileHeartbeating(async () => {
        const addresses = input.addresses ?? (await Promise.race([addressBookOf(ctx, input.run_workflow_id, input.run_uid, input.submission), ctx.cancelled]));
        const run = await Promise.race([sealingRunOf(ctx, input), ctx.cancelled]);
        const started = await Promise.race([startBatch(target, input, addresses, details.started_ms, run, temporalSealFacts(ctx.client)), ctx.cancelled]);
        if (!(await send(started.events))) return;
        const watched = watchJobMetrics(target, input, started.running);
        const ends = pushedEnds(target, started.running, input.interval_ms);
        try {
          const supervisor = new JobSupervisor({
            target,
            input,
            refs: started.running,
            startedMs: details.started_ms,
            send,
            clock: activityClock(ctx),
            ended: watched.ended,
            rounds: pushedRounds(ctx, ends),
          });
          await supervisor.run();
        } finally {
          watched.stop();
          ends?.close();
        }
      }, { details });
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
  sealFacts: SealFactsOf,
): Promise<{ events: JobEvent[]; running: JobRef[] }> {
  let env: Record<string, string>;
  let sshKeys: RunSshKeys | null;
  try {
    if (run instanceof SecretKeyError) throw run;
    env = await openSecrets(input.run.env, run, sealFacts);
    sshKeys = runSshKeysFor(input.run_uid, input.submission, addresses.job_ips.length);
  } catch (err) {
    if (err instanceof SecretKeyError) return { events: input.jobs.map(({ ref }) => failed(ref, jobFailureOf(err, FailureType.SecretKey))), running: [] };
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
        if (err instanceof SubmissionClosedError) return failed(ref, jobFailureOf(err, FailureType.SubmissionClosed));
        // Trying again cannot help (no container runtime for its image): the job fails now, naming the host.
        if (attempt >= START_ATTEMPTS || err instanceof CannotStartError) {
          return failed(ref, jobFailureOf(err, FailureType.StartFailed, `${ref.job_name} on ${ref.instance.host} did not start: ${messageOf(err)}`));
        }
        await new Promise((resolve) => setTimeout(resolve, 500 * 2 ** (attempt - 1)));
      }
    }
  });
  const running = input.jobs.filter((_, i) => outcomes[i]?.kind === 'running').map(({ ref }) => ref);
  return { events: outcomes, running };
}
