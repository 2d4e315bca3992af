import { ApplicationFailure, condition, proxyActivities, setHandler } from '@temporalio/workflow';
import type { TroupeActivities } from '../../activities';
import type { GroupPlan } from '../../src/plan/plan-schema';
import type { Effect } from '../../src/run-core/effects';
import { groupMembers } from '../../src/run-core/jobs';
import { growthOf, resizeOf, resizeRefusal, rolloutRefusal } from '../../src/run-core/scaling';
import { FailureType } from '../../src/run-core/failure-table';
import { rootMessage } from '../failures';
import { teardownActivities } from '../node-group/node-group-activities';
import { scaleGroupUpdate, type ScaleGroupResult } from '../../src/contract/messages';
import { refuseWhileHandingOver, stopAsked, type Run } from './run-context';
import { attemptRefsOf } from './run-job-refs';
import { peersSettled } from '../../src/run-core/peers';
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
      const { live } = run;
      const group = groupNamed(run, name);
      // The validator let it in: a run with a ranged group is live.
      if (!live) throw ApplicationFailure.nonRetryable(`run ${run.core.plan.run_name} is not running`, FailureType.ScaleFailed);
      live.resizing.add(group.index);
      try {
        await checkRoom(run, group, nodes);
        return await resize(run, group, nodes);
      } finally {
        live.resizing.delete(group.index);
      }
    },
    { validator: ({ group: name, nodes }) => validate(run, name, nodes) },
  );
}

function groupNamed(run: Run, name: string): GroupPlan {
  const group = run.core.plan.groups.find((g) => g.name === name);
  if (!group) throw new Error(`run ${run.core.plan.run_name} has no group "${name}" (its groups: ${run.core.plan.groups.map((g) => g.name).join(', ')})`);
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
  refuseWhileHandingOver(run);
  if (run.live?.resizing.has(group.index)) throw new Error(`group ${name} is being resized already; try again when that ends`);
  const refused = runRefusal(run, group);
  if (refused) throw new Error(refused);
}

/** Why the run cannot take a resize of the group now, or null (no hand-over starts while a resize is under way). */
function runRefusal(run: Run, group: GroupPlan): string | null {
  return rolloutRefusal(run.core) ?? resizeRefusal(run.core, group, stopAsked(run));
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
  const count = growthOf(run.core, group.index, nodes);
  if (count <= 0) return;
  const s = count === 1 ? '' : 's';
  const room = await roomActivities.fleetRoom.executeWithOptions({ summary: `room for ${count} more ${group.name} node${s}` }, [
    { backend: run.input.backend, request: { group, count, fleets: run.core.plan.fleets } },
  ]);
  if (room.fits < count) {
    const why = room.reason ? `: ${room.reason}` : '';
    throw ApplicationFailure.nonRetryable(`${room.fleet} has room for ${room.fits} more ${group.name} node${room.fits === 1 ? '' : 's'}, not ${count}${why}`, FailureType.ScaleFailed);
  }
  // The run may have moved on while the fleet answered.
  const refused = runRefusal(run, group);
  if (refused) throw ApplicationFailure.nonRetryable(refused, FailureType.ScaleFailed);
}

/**
 * The resize, as the run's core decides it (src/run-core/scaling.ts): asked through the run's loop,
 * answered once its new nodes run or its removed ones are given back, and every running node has
 * the book that shows the change.
 */
async function resize(run: Run, group: GroupPlan, nodes: number): Promise<ScaleGroupResult> {
  const id = (run.resizesAsked += 1);
  run.inbox.push({ kind: 'resize', id, group: group.index, nodes });
  await condition(() => resizeOf(run.core, id)?.phase === 'over' || run.state.status !== 'RUNNING');
  const answer = resizeOf(run.core, id);
  run.inbox.push({ kind: 'resize-answered', id });
  if (answer?.phase !== 'over') throw ApplicationFailure.nonRetryable(`the run ended (${run.state.status}) before ${group.name} was resized`, FailureType.ScaleFailed);
  if (answer.error) throw ApplicationFailure.nonRetryable(answer.error, FailureType.ScaleFailed);
  const { added, removed } = answer;
  if (added.length > 0 || removed.length > 0) metricsOfRun.groupResized(group.name, added.length > 0 ? 'up' : 'down');
  await condition(() => peersSettled(run.core) || run.state.status !== 'RUNNING');
  const result = { group: group.name, nodes: run.state.groups[group.index]?.nodes ?? nodes, added, removed, peers_version: run.state.peers_version };
  return answer.with_deployment === undefined ? result : { ...result, deployment: answer.with_deployment };
}

/** The ranks a resize took out, stopped and their machines given back; the run's loop is told when that is done. */
export function releaseRemoved(run: Run, effect: Extract<Effect, { kind: 'release' }>): void {
  const refs = attemptRefsOf(run, effect.jobs);
  void teardownActivities.releaseJobs
    .executeWithOptions({ summary: effect.summary }, [{ backend: run.input.backend, jobs: refs, grace_s: run.input.options.stop_grace_s }])
    .then(
      () => run.inbox.push({ kind: 'released', id: effect.resize, error: null }),
      (err: unknown) => run.inbox.push({ kind: 'released', id: effect.resize, error: `machines not given back: ${rootMessage(err)}` }),
    );
}
