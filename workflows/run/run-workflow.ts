import {
  ApplicationFailure,
  CancellationScope,
  allHandlersFinished,
  condition,
  isCancellation,
  proxyLocalActivities,
} from '@temporalio/workflow';
import type { TroupeActivities } from '../../activities';
import { decideAfterTeardown, resubmit } from '../../src/run-core/outcome';
import { withoutPeersProblem } from '../../src/run-core/peers';
import type { RunInput, RunInputArg } from '../../src/contract/messages';
import { newRun, setStatus, stopAsked, type Ending, type Outcome, type Run } from './run-context';
import { takeEvents } from './run-events';
import { newLiveRun } from './run-live';
import { driveSubmission } from './run-loop';
import { setRunHandlers } from './run-handlers';
import { setScaleHandler } from './run-scaling';
import { setDeployHandler, setRolloutControlHandler } from './run-deploy';
import { startGroups, type Submission } from './run-groups';
import { handOver, resumeRun } from './run-handover';
import { checkCarried } from './run-identity';
import { answerOf, type RunState } from '../../src/contract/run-state';
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
 * its history grows long (run-handover.ts). Its decisions are the core's (src/run-core); one loop
 * feeds them events and carries out their effects (run-loop.ts); the handlers only queue events.
 */
export async function RunWorkflow(arg: RunInputArg): Promise<RunState> {
  const input = await parseInput(arg);
  const resumed = input.carried ? resumeRun(input, checkCarried(input.carried)) : null;
  const run = resumed?.run ?? newRun(input);
  setRunHandlers(run);
  setScaleHandler(run);
  setDeployHandler(run);
  setRolloutControlHandler(run);
  try {
    // What the backend can do decides how its groups provision (a resumed run carries the answer).
    if (!resumed) run.capabilities = await describeBackend({ backend: run.input.backend });
    let submission = resumed ? await startGroups(run, resumed) : await startSubmission(run);
    for (;;) {
      const outcome = await runSubmission(run, submission);
      if (outcome.kind === 'handover') return await handOver(run, submission);
      await CancellationScope.nonCancellable(() => teardown(run, outcome));
      const next = await afterTeardown(run, outcome);
      if (next === 'finished') break;
      submission = await startSubmission(run);
    }
  } catch (err) {
    if (!isCancellation(err)) throw err;
    // Cancelled from outside (the Web UI, `temporal workflow cancel`): an abort that still tears down.
    await CancellationScope.nonCancellable(async () => {
      const aborted: Ending = { kind: 'stopped', abort: true };
      await teardown(run, aborted);
      await afterTeardown(run, aborted);
    });
  }
  await condition(allHandlersFinished);
  return answerOf(run.state);
}

/** A new submission: its group children; the run's loop takes it from the staged unlock on. */
async function startSubmission(run: Run): Promise<Submission> {
  setStatus(run, 'PROVISIONING');
  return startGroups(run);
}

/**
 * One submission (or, after a hand-over, the rest of it) through the run's loop, then its children
 * ended. A hand-over leaves the jobs running and their events still counting.
 */
async function runSubmission(run: Run, submission: Submission): Promise<Outcome> {
  let outcome: Outcome | null = null;
  try {
    outcome = await driveSubmission(run, submission);
    return outcome;
  } finally {
    if (outcome?.kind === 'handover') {
      run.handingOver = true;
    } else {
      run.state.status = 'TERMINATING';
      run.core = withoutPeersProblem(run.core);
    }
    submission.scope.cancel();
    await Promise.all(submission.childResults);
  }
}

/**
 * What the core decides once a submission is torn down: the run ends (its final status), or it
 * is submitted again after the back-off — unless a stop comes during the back-off.
 */
async function afterTeardown(run: Run, ending: Ending): Promise<'finished' | 'resubmit'> {
  const decision = decideAfterTeardown(run.core, ending, Date.now());
  run.core = decision.state;
  for (const effect of decision.effects) {
    if (effect.kind === 'finish') {
      finish(run, effect);
      return 'finished';
    }
    if (effect.kind === 'resubmit') {
      await condition(() => stopAsked(run), effect.after_s * 1000);
      takeEvents(run);
      const stop = run.core.stop_request;
      if (stop) {
        const stopped = decideAfterTeardown(run.core, { kind: 'stopped', abort: stop.abort }, Date.now());
        for (const end of stopped.effects) if (end.kind === 'finish') finish(run, end);
        return 'finished';
      }
    }
  }
  run.core = resubmit(run.core, Date.now());
  run.live = run.live ? newLiveRun() : null;
  run.announced = null;
  return 'resubmit';
}

/**
 * The input, checked and with its defaults. The schemas are loaded here rather than with the
 * module: every new workflow of the worker (a run's groups too) evaluates the workflow modules
 * again, and zod's are most of that time (bench/launch-latency.ts). `eager` keeps the module in
 * the one bundle: the load is a microtask, the same on every replay.
 */
async function parseInput(arg: RunInputArg): Promise<RunInput> {
  const { RunInputSchema } = await import(/* webpackMode: "eager" */ '../../src/contract/message-schemas');
  const parsed = RunInputSchema.safeParse(arg);
  if (!parsed.success) {
    // A plain error would fail the workflow task forever; a bad input is the caller's to fix.
    throw ApplicationFailure.nonRetryable(`invalid run input: ${parsed.error.message}`, 'InvalidRunInput');
  }
  return parsed.data;
}
