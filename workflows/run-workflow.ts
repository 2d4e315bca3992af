import {
  ApplicationFailure,
  CancellationScope,
  allHandlersFinished,
  condition,
  isCancellation,
  proxyLocalActivities,
  sleep,
} from '@temporalio/workflow';
import type { TroupeActivities } from '../activities/types';
import { addressBookOf, resubmitJobs } from './job-transitions';
import type { RunInput, RunInputArg } from './messages';
import { newRun, setStatus, type Outcome, type Run } from './run-context';
import { newLiveRun } from './run-live';
import { clearPeersProblem } from './run-peers';
import { setRunHandlers } from './run-handlers';
import { setScaleHandler } from './run-scaling';
import { startGroups, type Submission } from './run-groups';
import { handOver, resumeRun } from './run-handover';
import { checkCarried } from './run-identity';
import { addressDeadlineMs, addressesTimedOut, endedEarly, mayRetry } from './run-outcomes';
import { answerOf, type RunState } from './run-state';
import { announceAddresses, startInOrderAndWatch, unlockOtherGroups } from './run-startup';
import { finish, teardown } from './run-teardown';

/** A local activity: answered by the worker that runs the workflow task, without a round trip. */
const { describeBackend } = proxyLocalActivities<TroupeActivities>({
  startToCloseTimeout: '30s',
  retry: { maximumAttempts: 5 },
});

/**
 * One run of a task over heterogeneous node groups: a child per group, the staged unlock, the
 * address book, start-up in the order the task asks, watching, and a teardown that always runs.
 * Resubmits the whole run while `retry` allows; a run that heals or resizes continues as new when
 * its history grows long (run-handover.ts). The steps live beside it (run-*.ts); the handlers
 * only record into the run's state (run-handlers.ts).
 */
export async function RunWorkflow(arg: RunInputArg): Promise<RunState> {
  const input = await parseInput(arg);
  const resumed = input.carried ? resumeRun(input, checkCarried(input.carried)) : null;
  const run = resumed?.run ?? newRun(input);
  setRunHandlers(run);
  setScaleHandler(run);
  try {
    // Whether the backend provisions a group in one call only matters to groups of several nodes.
    if (!resumed && run.input.plan.groups.some((g) => g.nodes > 1)) {
      run.groupProvisioning = (await describeBackend({ backend: run.input.backend })).group_provisioning;
    }
    let next: Promise<Submission> = resumed ? startGroups(run, resumed) : startSubmission(run);
    for (;;) {
      const submission = await next;
      const outcome = await runSubmission(run, submission);
      if (outcome.kind === 'handover') return await handOver(run, submission);
      await CancellationScope.nonCancellable(() => teardown(run, outcome));
      if (!mayRetry(run, outcome)) {
        finish(run, outcome);
        break;
      }
      await sleep(run.backoffS * 1000);
      run.backoffS = Math.min(run.backoffS * 2, 300);
      resubmitJobs(run.state, run.input);
      run.failureEvents.clear();
      run.live = run.live ? newLiveRun(run.input.plan) : null;
      run.announced = null;
      next = startSubmission(run);
    }
  } catch (err) {
    if (!isCancellation(err)) throw err;
    // Cancelled from outside (the Web UI, `temporal workflow cancel`): an abort that still tears down.
    await CancellationScope.nonCancellable(async () => {
      await teardown(run, { kind: 'stopped', abort: true });
      finish(run, { kind: 'stopped', abort: true });
    });
  }
  await condition(allHandlersFinished);
  return answerOf(run.state);
}

/** A new submission: its group children, the staged unlock, the address book, start-up in order. */
async function startSubmission(run: Run): Promise<Submission> {
  setStatus(run, 'PROVISIONING');
  const submission = await startGroups(run);
  submission.startUp = startUp(run, submission);
  return submission;
}

/** The staged unlock and the address book; null once every job may start. */
async function startUp(run: Run, submission: Submission): Promise<Outcome | null> {
  const ended = () => endedEarly(run, submission);
  // Staged unlock: job 0's attempt (group 0's batch with group provisioning) comes first.
  await condition(() => ended() !== null || run.state.jobs[0]?.instance != null);
  const early = ended();
  if (early) return early;
  await unlockOtherGroups(submission);

  // Addresses: every job must have one before anything starts, within a deadline.
  const haveAll = await condition(() => ended() !== null || run.state.jobs.every((job) => job.instance !== null), addressDeadlineMs(run));
  const afterAddresses = ended();
  if (afterAddresses) return afterAddresses;
  const book = addressBookOf(run.state);
  if (!haveAll || !book) return addressesTimedOut(run);
  announceAddresses(run, submission, book);
  return null;
}

/**
 * One submission (or, after a hand-over, the rest of it): start-up in order and watching, then its
 * children ended. A hand-over leaves the jobs running and their events still counting.
 */
async function runSubmission(run: Run, submission: Submission): Promise<Outcome> {
  let outcome: Outcome | null = null;
  try {
    outcome = (await submission.startUp) ?? (await startInOrderAndWatch(run, submission));
    return outcome;
  } finally {
    if (outcome?.kind === 'handover') {
      run.handingOver = true;
    } else {
      run.state.status = 'TERMINATING';
      clearPeersProblem(run);
      // Batch activities report to the run directly and learn of the cancellation late: the
      // exits that teardown itself causes must not count as the jobs' own.
      run.eventsClosedFor = run.state.submission;
    }
    submission.scope.cancel();
    await Promise.all(submission.childResults);
  }
}

/**
 * The input, checked and with its defaults. The schemas are loaded here rather than with the
 * module: every new workflow of the worker (a run's groups too) evaluates the workflow modules
 * again, and zod's are most of that time (bench/launch-latency.ts). `eager` keeps the module in
 * the one bundle: the load is a microtask, the same on every replay.
 */
async function parseInput(arg: RunInputArg): Promise<RunInput> {
  const { RunInputSchema } = await import(/* webpackMode: "eager" */ './message-schemas');
  const parsed = RunInputSchema.safeParse(arg);
  if (!parsed.success) {
    // A plain error would fail the workflow task forever; a bad input is the caller's to fix.
    throw ApplicationFailure.nonRetryable(`invalid run input: ${parsed.error.message}`, 'InvalidRunInput');
  }
  return parsed.data;
}
