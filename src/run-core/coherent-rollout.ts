import type { Plan } from '../plan/plan-schema';
import type { Effect } from './effects';
import { groupMembers } from './jobs';
import { revisionOf } from './revisions';
import { routesSettled } from './routing';
import { beginStep, rolloutOver, serviceOf, withLiveResizes, withService } from './rollout-steps';
import { abandonGrowth, resizeOf } from './scaling';
import type { RunCore } from './state';
import type { CoherentRollout } from '../contract/core-state-schema';

/**
 * A rollout that keeps revisions apart (`rollout.coherence: revision`, Troupe's extension): the
 * deployment's new revision starts whole beside the old one — its groups in depends_on order, each
 * READY before the next starts, every replica seeing only peers of its own revision — then the
 * gateways move new requests to it in one table, then the old revision is drained (its requests in
 * flight finish) and stopped, entry groups first. A new replica that cannot start, or a rollout
 * still starting at its progress deadline, rolls it back: the old revision never stopped serving,
 * the new one is stopped, the plan is the old one again. A healthy revision is never stopped
 * before its successor serves. Pure: `now` comes in.
 */

/** The rollout's first move: the plan as deployed is the core's, `undo` the plan before it. */
export function beginCoherent(core: RunCore, undo: Plan, counts: number[], now: number, effects: Effect[]): RunCore {
  const service = serviceOf(core);
  const rollout = service.rollout;
  if (!rollout || !undo.service) return core;
  const coherent: CoherentRollout = {
    revision: rollout.number,
    from: service.current_revision,
    phase: 'starting',
    queue: startOrder(core.plan),
    counts,
    undo: {
      service: undo.service,
      groups: undo.groups.map((g) => ({ commands: [...g.commands], nodes: g.nodes, nodes_range: g.nodes_range ?? null })),
    },
    deadline_ms: now + (core.plan.service?.rollout.gates.progress_deadline_s ?? 600) * 1000,
    cause: null,
  };
  return advanceCoherent(withService(core, { ...service, rollout: { ...rollout, coherent } }), now, effects);
}

/** The rollout's next move: its step under way watched, then the phase's next group, then the next phase. */
export function advanceCoherent(core: RunCore, now: number, effects: Effect[]): RunCore {
  const service = serviceOf(core);
  const rollout = service.rollout;
  const coherent = rollout?.coherent;
  if (!rollout || rollout.over || !coherent) return core;
  const step = rollout.step;
  if (step !== null) {
    const resize = resizeOf(core, step.resize);
    // Past the deadline, a share still starting is given up: the growth undone, then rolled back below.
    if (resize?.phase === 'growing' && coherent.phase === 'starting' && now >= coherent.deadline_ms) {
      return advanceCoherent(abandonGrowth(core, resize.id, pastDeadline(core), now, effects), now, effects);
    }
    if (!resize || resize.phase !== 'over') return core;
    const forgotten = withLiveResizes(core, (resizes) => resizes.filter((r) => r.id !== step.resize));
    const next = withCoherent({ ...forgotten, service: { ...serviceOf(forgotten), rollout: { ...rollout, step: null } } }, coherent);
    if (resize.error === null) return advanceCoherent(next, now, effects);
    if (coherent.phase === 'starting') return advanceCoherent(rollBack(next, coherent, resize.error), now, effects);
    if (coherent.phase === 'rolling-back') return rolloutOver(next, `${rolledBack(rollout.number, coherent)}; and stopping it: ${resize.error}`);
    // An old replica that could not be taken out: the new revision serves; say what is left.
    return rolloutOver(next, `deployment ${rollout.number}: revision ${coherent.revision} serves, but an old replica was not removed: ${resize.error}`);
  }
  switch (coherent.phase) {
    case 'starting':
      if (now >= coherent.deadline_ms) return advanceCoherent(rollBack(core, coherent, pastDeadline(core)), now, effects);
      return startNext(core, coherent, now, effects);
    case 'shifting':
      // Every gateway sends new requests to the new revision before an old replica leaves.
      if (!routesSettled(core)) return core;
      return advanceCoherent(withCoherent(core, { ...coherent, phase: 'retiring', queue: retireOrder(core.plan) }), now, effects);
    case 'retiring':
      return removeNext(core, coherent, (n) => revisionOf(core, n) !== coherent.revision, null, now, effects);
    case 'rolling-back':
      return removeNext(core, coherent, (n) => revisionOf(core, n) === coherent.revision, rolledBack(rollout.number, coherent), now, effects);
  }
}

/** The next group's share of the new revision starts; once every group's runs, the traffic moves. */
function startNext(core: RunCore, coherent: CoherentRollout, now: number, effects: Effect[]): RunCore {
  const [group, ...rest] = coherent.queue;
  if (group === undefined) {
    const service = serviceOf(core);
    return withCoherent(withService(core, { ...service, current_revision: coherent.revision }), { ...coherent, phase: 'shifting', queue: [] });
  }
  const popped = withCoherent(core, { ...coherent, queue: rest });
  const count = coherent.counts[group] ?? 0;
  if (count === 0) return startNext(popped, { ...coherent, queue: rest }, now, effects);
  const members = groupMembers(core.run.jobs, group).length;
  const begun = beginStep(popped, { group, phase: 'adding' }, { nodes: members + count }, now, effects);
  // The ranks it added are the new revision's from the start: their book and peers are its own.
  const id = serviceOf(begun).rollout?.step?.resize;
  const added = id === undefined ? [] : (resizeOf(begun, id)?.added ?? []);
  const service = serviceOf(begun);
  return withService(begun, { ...service, revision_of: { ...service.revision_of, ...Object.fromEntries(added.map((n) => [n, coherent.revision])) } });
}

/** The next group's replicas that `leaves` picks are drained and stopped; none left: the rollout is over (`error`). */
function removeNext(core: RunCore, coherent: CoherentRollout, leaves: (jobNum: number) => boolean, error: string | null, now: number, effects: Effect[]): RunCore {
  const [group, ...rest] = coherent.queue;
  if (group === undefined) return rolloutOver(core, error);
  const popped = withCoherent(core, { ...coherent, queue: rest });
  const members = groupMembers(core.run.jobs, group);
  const victims = members.filter((job) => leaves(job.job_num)).map((job) => job.job_num);
  if (victims.length === 0) return removeNext(popped, { ...coherent, queue: rest }, leaves, error, now, effects);
  return beginStep(popped, { group, phase: 'removing' }, { nodes: members.length - victims.length, victims }, now, effects);
}

/** The rollout turns back: the old revision serves (it may never have stopped), the old plan is the plan again, the new revision's replicas go. */
function rollBack(core: RunCore, coherent: CoherentRollout, cause: string): RunCore {
  const service = serviceOf(core);
  const plan: Plan = {
    ...core.plan,
    service: coherent.undo.service,
    groups: core.plan.groups.map((group) => {
      const was = coherent.undo.groups[group.index];
      return was ? { ...group, commands: was.commands, nodes: was.nodes, nodes_range: was.nodes_range } : group;
    }),
  };
  const back = withService({ ...core, plan }, { ...service, current_revision: coherent.from });
  return withCoherent(back, { ...coherent, phase: 'rolling-back', queue: retireOrder(core.plan), cause });
}

function pastDeadline(core: RunCore): string {
  return `the new revision was not READY within the progress deadline (${core.plan.service?.rollout.gates.progress_deadline_s ?? 600} s)`;
}

/** When a rollout still starting must be looked at again without an event: its deadline (epoch ms), or null. */
export function rolloutDeadline(core: RunCore): number | null {
  const coherent = core.service?.rollout?.coherent;
  return coherent && !core.service?.rollout?.over && coherent.phase === 'starting' ? coherent.deadline_ms : null;
}

function rolledBack(number: number, coherent: CoherentRollout): string {
  return `deployment ${number} rolled back: ${coherent.cause ?? 'asked'}; revision ${coherent.from} serves`;
}

/** Groups in depends_on order (a group after those it depends on), by index otherwise. */
export function startOrder(plan: Plan): number[] {
  const order: number[] = [];
  const visit = (index: number, seen: Set<number>) => {
    if (order.includes(index) || seen.has(index)) return;
    seen.add(index);
    for (const dep of plan.groups[index]?.depends_on ?? []) visit(dep, seen);
    order.push(index);
  };
  for (const group of plan.groups) visit(group.index, new Set());
  return order;
}

/** Groups to take out: the entry groups first (no new chain begins on the old revision), then the rest, dependents before what they depend on. */
export function retireOrder(plan: Plan): number[] {
  const entry = plan.service?.entry ?? [];
  return [...entry, ...startOrder(plan).reverse().filter((g) => !entry.includes(g))];
}

function withCoherent(core: RunCore, coherent: CoherentRollout): RunCore {
  const service = serviceOf(core);
  return service.rollout ? withService(core, { ...service, rollout: { ...service.rollout, coherent } }) : core;
}
