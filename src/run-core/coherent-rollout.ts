import type { Plan } from '../plan/plan-schema';
import type { Effect } from './effects';
import type { RunEvent } from './events';
import { judgeCanary } from './rollout-gates';
import { activeJobs, describeJob, groupMembers } from './jobs';
import { takeOutFailed } from './live';
import { ofRevisionRolling, revisionOf, servingRevision } from './revisions';
import { replicaUrl, routesSettled } from './routing';
import { beginStep, rolloutOver, serviceOf, specOf, withLiveResizes, withService, withSpec, type StepPhase } from './rollout-steps';
import type { JobState } from '../contract/run-state';
import { abandonGrowth, resizeOf } from './scaling';
import type { RunCore } from './state';
import type { CoherentRollout } from '../contract/core-state-schema';

/**
 * A rollout that keeps revisions apart (`rollout.coherence: revision`, Troupe's extension), in
 * rounds (`rollout.steps`, more where `max_surge` allows fewer new replicas at once): each round
 * starts its share of the new revision — its groups in depends_on order, each READY before the next
 * starts, every replica seeing only peers of its own revision —, gives it its share of new requests
 * (the canary's first, gated over its soak where there is one), then drains and stops as much of the
 * old revision. The last round moves every new request to the new revision in one table, then the
 * rest of the old one is drained and stopped, entry groups first. A new replica that cannot start, a
 * failed gate, or a round still starting at its progress deadline rolls it back: traffic back on the
 * old revision at once, its retired replicas started again, the new ones stopped, the plan the old
 * one again. A healthy revision is never stopped before its successor serves. Pure: `now` comes in.
 */

/** How often a canary's figures are read over its soak. */
export const CANARY_READ_MS = 1000;

/** How long past its soak a canary whose figures cannot be read is waited on before it is rolled back. */
const CANARY_UNREAD_MS = 60_000;

/**
 * The rollout's first move: the plan as deployed is the core's, `undo` the plan before it; `counts` the new
 * revision's replicas, `from` the old one's, by group. `restore` (the last good spec again, by hand): no
 * canary — gate A and the rounds as asked, but no share watched against the revision being left.
 */
export function beginCoherent(core: RunCore, undo: Plan, counts: number[], from: number[], now: number, effects: Effect[], restore = false): RunCore {
  const service = serviceOf(core);
  const rollout = service.rollout;
  const spec = specOf(undo);
  const settings = core.plan.service?.rollout;
  if (!rollout || !spec || !settings) return core;
  const coherent: CoherentRollout = {
    revision: rollout.number,
    from: service.current_revision,
    phase: 'starting',
    queue: startOrder(core.plan),
    counts,
    from_counts: from,
    round: 1,
    rounds: roundsOf(settings, counts),
    share_percent: null,
    undo: spec,
    deadline_ms: now + settings.gates.progress_deadline_s * 1000,
    cause: null,
    canary: { traffic_percent: restore ? null : (settings.canary?.traffic_percent ?? null), since_ms: null, reading: false, read_at_ms: null, gate: null },
    paused_at_ms: null,
    synthetic: null,
  };
  return advanceCoherent(withService(core, { ...service, rollout: { ...rollout, coherent } }), now, effects);
}

/**
 * How many rounds: `steps`, or more where `max_surge` lets fewer new replicas start at once (50%: 2;
 * a count N: as many as the largest group needs, N at a time); never more than the largest group has
 * replicas (a round must start one).
 */
export function roundsOf(settings: NonNullable<Plan['service']>['rollout'], counts: readonly number[]): number {
  const largest = Math.max(1, ...counts);
  const surge = settings.max_surge;
  const bySurge = surge.kind === 'percent' ? Math.ceil(100 / surge.p) : Math.ceil(largest / surge.n);
  return Math.max(1, Math.min(largest, Math.max(settings.steps, bySurge)));
}

/** The new revision's replicas of `group` once round `round` has started (all of them in the last). */
function newShare(coherent: CoherentRollout, group: number, round = coherent.round): number {
  return Math.ceil(((coherent.counts[group] ?? 0) * round) / coherent.rounds);
}

/** The old revision's replicas of `group` a round but the last leaves running. */
function oldKept(coherent: CoherentRollout, group: number): number {
  const had = coherent.from_counts[group] ?? 0;
  return had - Math.floor((had * coherent.round) / coherent.rounds);
}

/** The rollout's next move: its step under way watched, then the phase's next group, then the next phase. */
export function advanceCoherent(core: RunCore, now: number, effects: Effect[]): RunCore {
  const service = serviceOf(core);
  const rollout = service.rollout;
  const coherent = rollout?.coherent;
  if (!rollout || rollout.over || !coherent) return core;
  // Paused by hand: no next move (a resize under way finishes on its own and is read on resume).
  if (coherent.paused_at_ms !== null) return core;
  const step = rollout.step;
  if (step !== null) {
    const resize = resizeOf(core, step.resize);
    // Past the deadline, a share still starting is given up: the growth undone, then rolled back below;
    // and a rollback asked meanwhile gives it up at once.
    if (resize?.phase === 'growing' && coherent.phase === 'starting' && now >= coherent.deadline_ms) {
      return advanceCoherent(abandonGrowth(core, resize.id, pastDeadline(core), now, effects), now, effects);
    }
    if (resize?.phase === 'growing' && coherent.phase === 'rolling-back' && step.phase === 'adding') {
      return advanceCoherent(abandonGrowth(core, resize.id, coherent.cause ?? 'rolled back', now, effects), now, effects);
    }
    if (!resize || resize.phase !== 'over') return core;
    const forgotten = withLiveResizes(core, (resizes) => resizes.filter((r) => r.id !== step.resize));
    const next = withCoherent({ ...forgotten, service: { ...serviceOf(forgotten), rollout: { ...rollout, step: null } } }, coherent);
    if (resize.error === null) return advanceCoherent(next, now, effects);
    if (coherent.phase === 'starting') return advanceCoherent(turnBack(next, coherent, resize.error, now), now, effects);
    // A growth given up by the rollback itself: its new ranks are out already. An old replica that
    // could not start again: the rollback goes on (the new revision still goes), and says so at its end.
    if (coherent.phase === 'rolling-back' && step.phase === 'adding') return advanceCoherent(next, now, effects);
    if (coherent.phase === 'rolling-back' && step.phase === 'restoring') {
      // Not asked again: the group keeps the old replicas it has.
      const has = groupMembers(next.run.jobs, step.group).filter((j) => revisionOf(next, j.job_num) === coherent.from).length;
      const from_counts = coherent.from_counts.map((n, g) => (g === step.group ? has : n));
      const cause = `${coherent.cause ?? 'asked'}; an old replica did not start again: ${resize.error}`;
      return advanceCoherent(withCoherent(next, { ...coherent, from_counts, cause }), now, effects);
    }
    if (coherent.phase === 'rolling-back') return rolloutOver(next, `${rolledBack(rollout.number, coherent)}; and stopping it: ${resize.error}`);
    // An old replica that could not be taken out: the new revision serves; say what is left.
    return rolloutOver(next, `deployment ${rollout.number}: revision ${coherent.revision} serves, but an old replica was not removed: ${resize.error}`);
  }
  if (coherent.phase !== 'rolling-back' && !(coherent.phase === 'starting' && now >= coherent.deadline_ms)) {
    const matched = matchTarget(core, coherent, now, effects);
    if (matched) return matched;
  }
  switch (coherent.phase) {
    case 'starting':
      if (now >= coherent.deadline_ms) return advanceCoherent(turnBack(core, coherent, pastDeadline(core), now), now, effects);
      return startNext(core, coherent, now, effects);
    case 'canary':
      return watchCanary(core, coherent, now, effects);
    case 'shifting':
      // Every gateway sends new requests to the new revision before an old replica leaves.
      if (!routesSettled(core)) return core;
      return advanceCoherent(withCoherent(core, { ...coherent, phase: 'retiring', queue: retireOrder(core.plan) }), now, effects);
    case 'retiring':
      return retire(core, coherent, now, effects);
    case 'rolling-back': {
      const restored = restoreOld(core, coherent, now, effects);
      if (restored) return restored;
      const isNew = (n: number) => revisionOf(core, n) === coherent.revision;
      return removeNext(core, coherent, (jobs) => jobs.filter((j) => isNew(j.job_num)), (at) => rolloutOver(at, rolledBack(rollout.number, coherent)), now, effects);
    }
  }
}

/**
 * The old revision's share retired: the round's (a round but the last: as much of it as the new
 * revision took, the new one still taking its share), or all of it once the new one is current.
 * Then the next round, or the rollout through — the spec it replaced is what a rollback by hand
 * deploys again.
 */
function retire(core: RunCore, coherent: CoherentRollout, now: number, effects: Effect[]): RunCore {
  const last = servingRevision(core) === coherent.revision;
  const isOld = (n: number) => revisionOf(core, n) !== coherent.revision;
  const victims = (jobs: JobState[], group: number) => {
    const old = jobs.filter((j) => isOld(j.job_num)).sort((a, b) => b.job_num - a.job_num);
    return last ? old : old.slice(0, Math.max(0, old.length - oldKept(coherent, group)));
  };
  const then = (at: RunCore): RunCore => {
    if (!last) {
      const next = { ...coherent, phase: 'starting' as const, queue: startOrder(at.plan), round: coherent.round + 1, deadline_ms: now + progressDeadlineS(at) * 1000 };
      return advanceCoherent(withCoherent(at, { ...next, canary: { ...coherent.canary, since_ms: null, reading: false, read_at_ms: null } }), now, effects);
    }
    const done = rolloutOver(at, null);
    return withService(done, { ...serviceOf(done), last_good: coherent.undo });
  };
  return removeNext(core, coherent, victims, then, now, effects);
}

/** A rollback after rounds that retired old replicas: the next group's started again (the old plan's, of the old revision) before any new one goes; null: none missing. */
function restoreOld(core: RunCore, coherent: CoherentRollout, now: number, effects: Effect[]): RunCore | null {
  for (const group of startOrder(core.plan)) {
    const members = groupMembers(core.run.jobs, group);
    const old = members.filter((j) => revisionOf(core, j.job_num) === coherent.from).length;
    const had = coherent.from_counts[group] ?? old;
    if (old < had) return addOf(core, coherent.from, { group, phase: 'restoring' }, members.length + had - old, now, effects);
  }
  return null;
}

/** The next group's share of the new revision for this round starts; once every group's runs, the round's traffic moves. */
function startNext(core: RunCore, coherent: CoherentRollout, now: number, effects: Effect[]): RunCore {
  const [group, ...rest] = coherent.queue;
  if (group === undefined) {
    // The round's share READY: gate A first, a request through it end to end.
    if (coherent.synthetic?.round !== coherent.round || coherent.synthetic.state !== 'passed') return checkThrough(core, coherent, effects);
    // Then it takes its share of new requests (a canary's first) where a round is left
    // or a canary is asked; else all new requests at once.
    if (coherent.round < coherent.rounds || coherent.canary.traffic_percent !== null) {
      return advanceCoherent(withCoherent(core, { ...coherent, phase: 'canary', queue: [], share_percent: shareOf(coherent) }), now, effects);
    }
    return shift(core, coherent);
  }
  const popped = withCoherent(core, { ...coherent, queue: rest });
  return toShare(popped, coherent, group, now, effects) ?? startNext(popped, { ...coherent, queue: rest }, now, effects);
}

/**
 * Gate A: the round's share READY, a synthetic request — the entry group's first probe, as a client
 * would send it, else `GET /` — goes to each new entry replica (the new router, which passes it on to
 * the new revision's groups behind it), once per round; the share takes traffic only once every one
 * passed (revisionChecked).
 */
function checkThrough(core: RunCore, coherent: CoherentRollout, effects: Effect[]): RunCore {
  if (coherent.synthetic?.round === coherent.round) return core;
  const entry = core.plan.service?.entry ?? [];
  const urls = entry.flatMap((group) =>
    groupMembers(core.run.jobs, group).flatMap((job) => {
      const url = revisionOf(core, job.job_num) === coherent.revision && job.ready_at !== null ? replicaUrl(core, job) : null;
      return url ? [url] : [];
    }),
  );
  effects.push({ kind: 'check-revision', revision: coherent.revision, round: coherent.round, urls, probe: core.plan.service?.probes?.[0] ?? null });
  return withCoherent(core, { ...coherent, synthetic: { round: coherent.round, state: 'checking', note: null } });
}

/**
 * A replica of the new revision failed past what its group heals (`on_failure: fail-run`, the default,
 * or its restart budget spent; healing.ts leaves it to the rollout): it is taken out and the rollout
 * turns back (held, with rollback: manual) — the serving revision goes on, where a plain failure would
 * end the service; one failing while the rollout rolls back or is held only goes. Run before the
 * rollout's next move, and before the outcome judges the run.
 */
export function failedNew(core: RunCore, now: number, effects: Effect[]): RunCore {
  const coherent = core.service?.rollout?.coherent;
  if (!coherent) return core;
  const failed = activeJobs(core.run).filter((job) => job.status === 'FAILED' && ofRevisionRolling(core, job.job_num));
  const [first] = failed;
  if (!first) return core;
  const out = takeOutFailed(core, failed, effects);
  // Rolling back already, or held for a decision: the failed replica only goes (its revision is going, or waits on that decision).
  if (coherent.phase === 'rolling-back' || coherent.cause !== null) return out;
  const group = core.plan.groups[first.group_index];
  const budget = group?.on_failure && group.on_failure.action !== 'fail-run' ? ` (group ${group.name}'s restart budget spent: max_restarts ${group.on_failure.max_restarts})` : '';
  const cause = `revision ${coherent.revision}'s ${describeJob(first)}${budget}`;
  return turnBack(out, coherent, cause, now);
}

/** Gate A's answer: passed, the round goes on; failed, the rollout turns back (held, with rollback: manual). */
export function revisionChecked(core: RunCore, event: Extract<RunEvent, { kind: 'revision-checked' }>, now: number, effects: Effect[]): RunCore {
  const coherent = core.service?.rollout?.coherent;
  const asked = coherent?.synthetic;
  if (!coherent || coherent.phase !== 'starting' || coherent.revision !== event.revision || asked?.round !== event.round || asked.state !== 'checking') return core;
  if (event.error !== null) {
    const failed = { ...coherent, synthetic: { ...asked, note: event.error } };
    return advanceCoherent(turnBack(core, failed, `gate A failed: ${event.error}`, now), now, effects);
  }
  return advanceCoherent(withCoherent(core, { ...coherent, synthetic: { ...asked, state: 'passed', note: event.note } }), now, effects);
}

/** The new revision's share of new requests once this round's replicas are READY: the canary's in the first round where there is one, else in proportion to the rounds done. */
function shareOf(coherent: CoherentRollout): number {
  if (coherent.round === 1 && coherent.canary.traffic_percent !== null) return coherent.canary.traffic_percent;
  return Math.round((100 * coherent.round) / coherent.rounds);
}

/**
 * A group whose new replicas started already but number other than the rollout's target for it
 * (a user resized it meanwhile): its new revision grows to the target, or its newest replicas are
 * drained and stopped down to it — one group at a time, as the rollout's next step; null: none.
 * The old revision keeps its replicas until it is retired.
 */
function matchTarget(core: RunCore, coherent: CoherentRollout, now: number, effects: Effect[]): RunCore | null {
  for (const group of core.plan.groups) {
    // Groups still queued start at their target anyway.
    if (coherent.phase === 'starting' && coherent.queue.includes(group.index)) continue;
    const moved = toShare(core, coherent, group.index, now, effects);
    if (moved) return moved;
  }
  return null;
}

/** The step that brings the group's new replicas to the round's share (more started, or its newest drained), or null: it has that many. */
function toShare(core: RunCore, coherent: CoherentRollout, group: number, now: number, effects: Effect[]): RunCore | null {
  const members = groupMembers(core.run.jobs, group);
  const fresh = members.filter((job) => revisionOf(core, job.job_num) === coherent.revision);
  const target = newShare(coherent, group);
  if (fresh.length < target) return addNew(core, coherent, group, members.length + target - fresh.length, now, effects);
  if (fresh.length === target) return null;
  const victims = [...fresh].sort((a, b) => b.job_num - a.job_num).slice(0, fresh.length - target).map((job) => job.job_num);
  return beginStep(core, { group, phase: 'removing' }, { nodes: members.length - victims.length, victims }, now, effects);
}

/** The group grows to `nodes` as the rollout's step, its new ranks the new revision's from the start (their book and peers are its own). */
function addNew(core: RunCore, coherent: CoherentRollout, group: number, nodes: number, now: number, effects: Effect[]): RunCore {
  return addOf(core, coherent.revision, { group, phase: 'adding' }, nodes, now, effects);
}

function addOf(core: RunCore, revision: number, step: { group: number; phase: StepPhase }, nodes: number, now: number, effects: Effect[]): RunCore {
  const begun = beginStep(core, step, { nodes }, now, effects);
  const id = serviceOf(begun).rollout?.step?.resize;
  const added = id === undefined ? [] : (resizeOf(begun, id)?.added ?? []);
  const service = serviceOf(begun);
  return withService(begun, { ...service, revision_of: { ...service.revision_of, ...Object.fromEntries(added.map((n) => [n, revision])) } });
}

/** The new revision serves every new request: one table makes it current on every gateway. */
function shift(core: RunCore, coherent: CoherentRollout): RunCore {
  const service = serviceOf(core);
  return withCoherent(withService(core, { ...service, current_revision: coherent.revision }), { ...coherent, phase: 'shifting', queue: [], share_percent: null });
}

/**
 * The canary's soak: from when every gateway gives the new revision its share, its figures are read
 * every CANARY_READ_MS and judged against the old revision's (rollout-gates.ts), and once more after
 * the soak; a failed gate rolls back at once, a passed one after the soak moves all traffic.
 */
function watchCanary(core: RunCore, coherent: CoherentRollout, now: number, effects: Effect[]): RunCore {
  const { canary } = coherent;
  if (canary.since_ms === null && !routesSettled(core)) return core;
  // No canary asked: the round's share is on every gateway, so the old revision's share may go.
  if (canary.traffic_percent === null) return roundThrough(core, coherent, now, effects);
  if (canary.since_ms === null) return withCoherent(core, { ...coherent, canary: { ...canary, since_ms: now } });
  if (canary.reading) return core;
  const soakEnd = soakEndOf(core, canary.since_ms);
  if (canary.read_at_ms !== null && now < canary.read_at_ms + CANARY_READ_MS && !(now >= soakEnd && canary.read_at_ms < soakEnd)) return core;
  const window_s = Math.min(300, Math.max(1, Math.ceil((now - canary.since_ms) / 1000)));
  effects.push({ kind: 'read-figures', window_s, purpose: 'canary' });
  return withCoherent(core, { ...coherent, canary: { ...canary, reading: true, read_at_ms: now } });
}

/** A reading of the figures is in: the gate's verdict, and the soak over or not. */
export function canaryRead(core: RunCore, event: Extract<RunEvent, { kind: 'figures' }>, now: number, effects: Effect[]): RunCore {
  const coherent = core.service?.rollout?.coherent;
  const rollout = core.plan.service?.rollout;
  if (event.purpose !== 'canary' || !coherent || coherent.phase !== 'canary' || !coherent.canary.reading || coherent.canary.since_ms === null || !rollout) return core;
  const canary = { ...coherent.canary, reading: false };
  const soakEnd = soakEndOf(core, coherent.canary.since_ms);
  const readAfterSoak = (canary.read_at_ms ?? 0) >= soakEnd;
  if (event.error !== null) {
    const gate = `the figures could not be read: ${event.error}`;
    // Gateways that cannot say how the canary does for a minute past its soak: it is not let through.
    if (now >= soakEnd + CANARY_UNREAD_MS) return advanceCoherent(turnBack(core, { ...coherent, canary: { ...canary, gate } }, `gate: ${gate}`, now), now, effects);
    return withCoherent(core, { ...coherent, canary: { ...canary, gate } });
  }
  const verdict = judgeCanary(rollout.gates, event.revisions, coherent.from, coherent.revision);
  // A failed gate rolls back even while paused: the old revision is the safe one.
  if (!verdict.ok) return advanceCoherent(turnBack(core, { ...coherent, paused_at_ms: null, canary: { ...canary, gate: verdict.why } }, `the canary's gate failed: ${verdict.why}`, now), now, effects);
  const passed = withCoherent(core, { ...coherent, canary: { ...canary, gate: verdict.note } });
  const through = readAfterSoak && coherent.paused_at_ms === null;
  return through ? roundThrough(passed, { ...coherent, canary: { ...canary, gate: verdict.note } }, now, effects) : passed;
}

/** The round's share took its traffic (and passed its gate): the old revision's share retired, or, in the last round, all new requests moved. */
function roundThrough(core: RunCore, coherent: CoherentRollout, now: number, effects: Effect[]): RunCore {
  if (coherent.round >= coherent.rounds) return advanceCoherent(shift(core, coherent), now, effects);
  return advanceCoherent(withCoherent(core, { ...coherent, phase: 'retiring', queue: retireOrder(core.plan) }), now, effects);
}

function soakEndOf(core: RunCore, since: number): number {
  return since + (core.plan.service?.rollout.canary?.soak_s ?? 0) * 1000;
}

/** The next group's replicas `victims` picks are drained and stopped; none left in the queue: `then`. */
function removeNext(
  core: RunCore,
  coherent: CoherentRollout,
  victims: (members: JobState[], group: number) => JobState[],
  then: (core: RunCore) => RunCore,
  now: number,
  effects: Effect[],
): RunCore {
  const [group, ...rest] = coherent.queue;
  if (group === undefined) return then(core);
  const popped = withCoherent(core, { ...coherent, queue: rest });
  const members = groupMembers(core.run.jobs, group);
  const chosen = victims(members, group).map((job) => job.job_num);
  if (chosen.length === 0) return removeNext(popped, { ...coherent, queue: rest }, victims, then, now, effects);
  return beginStep(popped, { group, phase: 'removing' }, { nodes: members.length - chosen.length, victims: chosen }, now, effects);
}

/**
 * The rollout's own reason to turn back (a failed gate, a new replica that cannot start, the progress
 * deadline): rolled back at once with `rollback: auto`; with `manual`, held for a decision by hand —
 * paused, the new revision given no new requests (its replicas kept), until `troupe rollout rollback`
 * or `resume` (steerRollout).
 */
function turnBack(core: RunCore, coherent: CoherentRollout, cause: string, now: number): RunCore {
  if (core.plan.service?.rollout.rollback !== 'manual') return rollBack(core, coherent, cause);
  return withCoherent(core, { ...coherent, paused_at_ms: now, cause, share_percent: null });
}

/** A rollout held for a decision (rollback: manual) goes on: its clocks and its canary's soak start again, the round's share given back. */
export function goOnAfterHold(coherent: CoherentRollout, now: number, progressDeadlineS: number): CoherentRollout {
  const canary = { ...coherent.canary, since_ms: null, reading: false, read_at_ms: null, gate: null };
  const share = coherent.phase === 'canary' ? shareOf(coherent) : coherent.share_percent;
  // A gate A that did not pass is asked again.
  const synthetic = coherent.synthetic?.state === 'passed' ? coherent.synthetic : null;
  return { ...coherent, paused_at_ms: null, cause: null, deadline_ms: now + progressDeadlineS * 1000, share_percent: share, canary, synthetic };
}

/** The rollout turns back: the old revision serves (it may never have stopped), the old plan is the plan again, the new revision's replicas go. */
export function rollBack(core: RunCore, coherent: CoherentRollout, cause: string): RunCore {
  const service = serviceOf(core);
  const back = withService({ ...core, plan: withSpec(core.plan, coherent.undo) }, { ...service, current_revision: coherent.from });
  return withCoherent(back, { ...coherent, phase: 'rolling-back', queue: retireOrder(core.plan), cause, share_percent: null });
}

function progressDeadlineS(core: RunCore): number {
  return core.plan.service?.rollout.gates.progress_deadline_s ?? 600;
}

function pastDeadline(core: RunCore): string {
  return `the new revision was not READY within the progress deadline (${progressDeadlineS(core)} s)`;
}

/** When a rollout still starting must be looked at again without an event: its deadline (epoch ms), or null. */
export function rolloutDeadline(core: RunCore): number | null {
  const coherent = core.service?.rollout?.coherent;
  if (!coherent || core.service?.rollout?.over || coherent.paused_at_ms !== null) return null;
  if (coherent.phase === 'starting') return coherent.deadline_ms;
  const { since_ms, reading, read_at_ms } = coherent.canary;
  if (coherent.phase !== 'canary' || coherent.canary.traffic_percent === null || since_ms === null || reading) return null;
  const soakEnd = soakEndOf(core, since_ms);
  if (read_at_ms === null) return since_ms;
  return read_at_ms < soakEnd ? Math.min(read_at_ms + CANARY_READ_MS, soakEnd) : read_at_ms + CANARY_READ_MS;
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
