import { allHandlersFinished, condition, continueAsNew, log, workflowInfo } from '@temporalio/workflow';
import { activeJobs, isJobFinished } from '../../src/run-core/jobs';
import { isLiveSettled } from '../../src/run-core/live';
import type { CarriedRun, RunInput, RunInputArg } from '../../src/contract/messages';
import { newRun, setStatus, stopAsked, type Run } from './run-context';
import { takeEvents } from './run-events';
import { peersSettled } from '../../src/run-core/peers';
import { routesSettled } from '../../src/run-core/routing';
import type { RunState } from '../../src/contract/run-state';
import type { Submission } from './submission';

/**
 * A run that heals or resizes lives as long as its service, and each restart or resize adds to
 * its history (~50 events, ~22 more in the group's child). Past `continue_as_new_after_events` (or
 * when the server suggests it) the run continues as new at a quiet moment: its group children end
 * without touching their jobs, and the next execution starts children that adopt the running jobs
 * (a start that is at most once in every backend returns the running process). Jobs keep their
 * processes, machines and ranks; what happened meanwhile is on the hosts' disks and reported again.
 */

/** Events the new execution must add of its own before it may hand over again (never a loop of hand-overs). */
const HISTORY_MARGIN = 100;
/** The next execution's input holds the plan and the state; the server refuses a payload over 2 MB. */
const CARRIED_MAX_BYTES = 1_500_000;

/** Long enough, and nothing under way that a hand-over would have to carry. */
export function handoverDue(run: Run, submission: Submission): boolean {
  const { live, state } = run;
  if (!live || state.status !== 'RUNNING' || stopAsked(run) || run.tooLargeToHandOver) return false;
  const { historyLength, continueAsNewSuggested } = workflowInfo();
  if (historyLength < run.historyAtStart + HISTORY_MARGIN) return false;
  if (!continueAsNewSuggested && historyLength < run.input.options.continue_as_new_after_events) return false;
  if (!isQuiet(run, submission)) return false;
  if (JSON.stringify(run.input).length + JSON.stringify({ ...run.core, plan: null }).length > CARRIED_MAX_BYTES) {
    // Thousands of nodes: the run goes on in this execution (README, "A run that lives for months").
    run.tooLargeToHandOver = true;
    log.warn('the run is too large to continue as new; its history keeps growing', { run: state.run_name, events: historyLength });
    return false;
  }
  return true;
}

function isQuiet(run: Run, submission: Submission): boolean {
  const { live, input } = run;
  if (!live) return false;
  const settledJobs = activeJobs(run.state).every((job) => {
    if (isJobFinished(job)) return true;
    const probed = input.plan.groups[job.group_index]?.ready != null;
    return job.instance !== null && job.running_at !== null && (!probed || job.ready_at !== null) && submission.signalled.has(job.job_num);
  });
  return (
    settledJobs &&
    run.inbox.length === 0 &&
    submission.delivered === null &&
    (run.core.live === null || isLiveSettled(run.core.live)) &&
    live.resizing.size === 0 &&
    live.unwanted.length === 0 &&
    peersSettled(run.core) &&
    routesSettled(run.core) &&
    !run.core.service?.rollout &&
    (run.core.service?.autoscale.reading.length ?? 0) === 0 &&
    !run.core.service?.autoscale.scraping &&
    allHandlersFinished()
  );
}

/** The next execution of the run, with what this one knows (its children have ended). */
export async function handOver(run: Run, submission: Submission): Promise<never> {
  const { live } = run;
  if (!live) throw new Error('only a live run hands over');
  await condition(allHandlersFinished);
  // What arrived meanwhile is in the state the next execution starts from; it judges it on its first pass.
  takeEvents(run);
  // The core travels as it is; the plan as it is now (a deployment changes it) is the next input's.
  const { plan, ...core } = run.core;
  const carried: CarriedRun = {
    core,
    generation: run.generation + 1,
    capabilities: run.capabilities,
    announced: run.announced,
    signalled: [...submission.signalled],
    live: { unwanted: live.unwanted },
  };
  // RunWorkflow's signature (importing it would make a circle of modules).
  return continueAsNew<(arg: RunInputArg) => Promise<RunState>>({ ...run.input, plan, carried });
}

/** The run as the execution before this one left it; what its adopted submission starts from. */
export function resumeRun(input: RunInput, carried: CarriedRun): { run: Run; signalled: Set<number> } {
  const run = newRun({ ...input, carried: undefined });
  // The core as the execution before left it: its submission goes on where it was, its jobs running.
  run.core = { ...carried.core, plan: input.plan };
  run.generation = carried.generation;
  run.capabilities = carried.capabilities;
  run.announced = carried.announced;
  // Until its children have taken the jobs up (startGroups), resizes are asked again.
  run.handingOver = true;
  if (run.live) run.live.unwanted = carried.live.unwanted;
  // The search attributes travel with the run; its status is set again all the same.
  setStatus(run, run.state.status);
  return { run, signalled: new Set(carried.signalled) };
}
