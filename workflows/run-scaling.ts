import { ApplicationFailure, condition, proxyActivities, setHandler } from '@temporalio/workflow';
import type { TroupeActivities } from '../activities/types';
import type { JobRef } from '../src/backends/backend';
import type { GroupPlan } from '../src/plan/plan-schema';
import { FailureType } from './failure-types';
import { restartOver } from '../src/run-core/healing';
import { endJob, freshJob, groupMembers, isJobFinished, nextAttempt } from '../src/run-core/jobs';
import { withAddedByResize, withAttemptsToStart, withoutAttemptsToStart } from '../src/run-core/live';
import { isJobReady } from '../src/run-core/startup-order';
import { teardownActivities } from './node-group-activities';
import { HANDING_OVER, newAttemptsSignal, scaleGroupUpdate, type ScaleGroupResult } from './messages';
import { stopAsked, type Run } from './run-context';
import { jobRefOf } from './run-job-refs';
import { jobPlanOf, newRankPlan, type LiveRun } from './run-live';
import { peersSettled } from './run-peers';
import type { JobState } from './run-state';
import type { Submission } from './submission';
import { metricsOfRun } from './run-metrics';

/**
 * Resizing a running group within its `nodes: MIN..MAX` (Troupe's extension), as a Temporal
 * Update: checked before it is accepted, answered once the new nodes run (READY with a probe) or
 * the removed ones are stopped and their machines given back, and every node has the new book.
 * New nodes take new ranks after every existing one (or a rank this group gave up before);
 * removed nodes are the group's highest ranks.
 */
export function setScaleHandler(run: Run): void {
  setHandler(
    scaleGroupUpdate,
    async ({ group: name, nodes }) => {
      const { live, submissionNow: submission } = run;
      const group = groupNamed(run, name);
      // The validator let it in: a run with a ranged group is live and, RUNNING, has a submission.
      if (!live || !submission) throw ApplicationFailure.nonRetryable(`run ${run.input.plan.run_name} is not running`, 'ScaleFailed');
      live.resizing.add(group.index);
      try {
        await checkRoom(run, group, nodes);
        return await resize(run, live, submission, group, nodes);
      } finally {
        live.resizing.delete(group.index);
      }
    },
    { validator: ({ group: name, nodes }) => validate(run, name, nodes) },
  );
}

function groupNamed(run: Run, name: string): GroupPlan {
  const group = run.input.plan.groups.find((g) => g.name === name);
  if (!group) throw new Error(`run ${run.input.plan.run_name} has no group "${name}" (its groups: ${run.input.plan.groups.map((g) => g.name).join(', ')})`);
  return group;
}

/** Refusals say what to change; nothing of a refused update reaches the run's history. */
function validate(run: Run, name: string, nodes: number): void {
  const group = groupNamed(run, name);
  const range = group.nodes_range;
  if (!range) throw new Error(`group ${name} has a fixed size (nodes: ${group.nodes}); declare nodes: MIN..MAX in the task to resize it`);
  if (!Number.isInteger(nodes) || nodes < range.min || nodes > range.max) {
    throw new Error(`group ${name} takes ${range.min}..${range.max} nodes (its nodes range), not ${nodes}`);
  }
  if (run.handingOver && !stopAsked(run)) {
    // The client tries again (RunHandle.scaleGroup): the next execution (or this one, once its groups are back) takes it.
    throw ApplicationFailure.retryable(`run ${run.input.plan.run_name} is continuing as new (its history is long); try again in a moment`, HANDING_OVER);
  }
  if (run.live?.resizing.has(group.index)) throw new Error(`group ${name} is being resized already; try again when that ends`);
  const refused = runRefusal(run, group);
  if (refused) throw new Error(refused);
}

/** Why the run cannot take a resize of the group now, or null (no hand-over starts while a resize is under way). */
function runRefusal(run: Run, group: GroupPlan): string | null {
  const { state } = run;
  if (state.status !== 'RUNNING' || stopAsked(run) || !run.live || !run.submissionNow) {
    return `run ${run.input.plan.run_name} is ${stopAsked(run) ? 'stopping' : state.status}: a group is resized while the run is RUNNING`;
  }
  // Over once every node is READY again, as the state shows it, even before the loop has told its dependents.
  if (run.core.live?.groups[group.index]?.restarting && !restartOver(run.core, group.index)) return `group ${group.name} is restarting; try again once its nodes are READY`;
  return null;
}

/**
 * A validator cannot call activities: the fleet's room is asked first thing in the handler, before
 * any change. A short timeout: the answer takes a fleet query at most (10 s), and a worker killed
 * meanwhile delays the resize by this much before another one asks.
 */
const roomActivities = proxyActivities<TroupeActivities>({
  startToCloseTimeout: '20s',
  retry: { initialInterval: '1s', maximumInterval: '10s', maximumAttempts: 3, nonRetryableErrorTypes: [FailureType.UnknownBackend] },
});

/**
 * A growth the fleet has no room for is refused whole, the run as it was (no rank taken, no book
 * version). Room taken by others between this answer and provisioning still fails the resize
 * there, and it is undone.
 */
async function checkRoom(run: Run, group: GroupPlan, nodes: number): Promise<void> {
  const count = nodes - groupMembers(run.state.jobs, group.index).length;
  if (count <= 0) return;
  const s = count === 1 ? '' : 's';
  const room = await roomActivities.fleetRoom.executeWithOptions({ summary: `room for ${count} more ${group.name} node${s}` }, [
    { backend: run.input.backend, request: { group, count, fleets: run.input.plan.fleets } },
  ]);
  if (room.fits < count) {
    const why = room.reason ? `: ${room.reason}` : '';
    throw ApplicationFailure.nonRetryable(`${room.fleet} has room for ${room.fits} more ${group.name} node${room.fits === 1 ? '' : 's'}, not ${count}${why}`, 'ScaleFailed');
  }
  // The run may have moved on while the fleet answered.
  const refused = runRefusal(run, group);
  if (refused) throw ApplicationFailure.nonRetryable(refused, 'ScaleFailed');
}

async function resize(run: Run, live: LiveRun, submission: Submission, group: GroupPlan, nodes: number): Promise<ScaleGroupResult> {
  const members = groupMembers(run.state.jobs, group.index);
  const stateGroup = run.state.groups[group.index];
  let added: number[] = [];
  let removed: number[] = [];
  try {
    if (nodes > members.length) added = await grow(run, live, submission, group, nodes - members.length);
    else if (nodes < members.length) removed = await shrink(run, group, members, members.length - nodes);
  } finally {
    if (stateGroup) stateGroup.nodes = groupMembers(run.state.jobs, group.index).length;
    run.version += 1;
  }
  if (added.length > 0 || removed.length > 0) metricsOfRun.groupResized(group.name, added.length > 0 ? 'up' : 'down');
  // Answered once every running node has the book that shows the change.
  await condition(() => peersSettled(run) || run.state.status !== 'RUNNING');
  return { group: group.name, nodes: stateGroup?.nodes ?? nodes, added, removed, peers_version: run.state.peers_version };
}

/** `count` new nodes: a rank this group gave up before, else the next rank of the run. */
async function grow(run: Run, live: LiveRun, submission: Submission, group: GroupPlan, count: number): Promise<number[]> {
  const { state } = run;
  const jobs: JobState[] = [];
  for (let i = 0; i < count; i++) {
    const reused = state.jobs.find((job) => job.removed && job.group_index === group.index);
    if (reused) {
      reused.removed = false;
      nextAttempt(reused, { status: 'TERMINATED', reason: 'TERMINATED_BY_SERVER', message: null }, false, new Date().toISOString());
      jobs.push(reused);
      continue;
    }
    const jobNum = state.jobs.length;
    const groupRank = state.jobs.filter((job) => job.group_index === group.index).length;
    const plan = newRankPlan(run.input.plan.run_name, group, jobNum, groupRank);
    live.addedPlans.set(jobNum, plan);
    const job = freshJob(jobNum, plan.job_name, group.index, group.name, groupRank, new Date().toISOString());
    state.jobs.push(job);
    jobs.push(job);
  }
  run.core = withAttemptsToStart(withAddedByResize(run.core, jobs.map((job) => job.job_num), true), jobs);
  // The start-up order's first pass must not also tell the group about them.
  for (const job of jobs) submission.signalled.add(job.job_num);
  const plans = jobs.map((job) => jobPlanOf(run.input.plan, live, job));
  await submission.children[group.index]?.signal(newAttemptsSignal, { jobs: plans, release: [] });
  run.version += 1;
  const plan = run.input.plan;
  await condition(
    () => run.state.status !== 'RUNNING' || jobs.some((job) => job.removed || isJobFinished(job)) || jobs.every((job) => job.running_at !== null && isJobReady(plan, job)),
  );
  run.core = withAddedByResize(run.core, jobs.map((job) => job.job_num), false);
  const failed = jobs.find((job) => job.removed || isJobFinished(job));
  if (run.state.status !== 'RUNNING') throw ApplicationFailure.nonRetryable(`the run ended (${run.state.status}) before ${group.name} grew`, 'ScaleFailed');
  if (failed) {
    // The resize is undone whole: no gap is left in the group's ranks.
    const others = jobs.filter((job) => !job.removed);
    await shrink(run, group, others, others.length, 'the resize failed');
    const why = failed.message ?? failed.termination_reason ?? 'it ended';
    throw ApplicationFailure.nonRetryable(`${group.name}/${failed.group_job_index} (job ${failed.job_num}) did not start: ${why}`, 'ScaleFailed');
  }
  return jobs.map((job) => job.job_num);
}

/** The group's `count` highest ranks: out of the run at once, then stopped and their machines given back. */
async function shrink(run: Run, group: GroupPlan, members: JobState[], count: number, why?: string): Promise<number[]> {
  const victims = [...members].sort((a, b) => b.job_num - a.job_num).slice(0, count);
  const size = groupMembers(run.state.jobs, group.index).length - count;
  const reason = why ?? `${group.name} resized to ${size}`;
  const refs: JobRef[] = [];
  for (const job of victims) {
    const ref = jobRefOf(run, job);
    if (ref) refs.push(ref);
    job.removed = true;
    run.core = withoutAttemptsToStart(run.core, [job.job_num]);
    if (!isJobFinished(job)) endJob(job, 'TERMINATED', 'TERMINATED_BY_SERVER', `removed: ${reason}`, new Date().toISOString());
  }
  run.version += 1;
  if (refs.length > 0) {
    await teardownActivities.releaseJobs.executeWithOptions(
      { summary: `remove ${group.name} rank${refs.length === 1 ? '' : 's'} ${victims.map((j) => j.job_num).join(', ')} (${reason})` },
      [{ backend: run.input.backend, jobs: refs, grace_s: run.input.options.stop_grace_s }],
    );
  }
  return victims.map((job) => job.job_num);
}
