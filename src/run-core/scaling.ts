import type { GroupPlan } from '../plan/plan-schema';
import type { JobState } from '../contract/run-state';
import type { Decision, Effect } from './effects';
import type { RunEvent } from './events';
import { restartOver } from './healing';
import { endJob, freshJob, groupMembers, isJobFinished, nextAttempt } from './jobs';
import { rankPlan } from '../plan/expand';
import type { LiveCore, Resize } from './live';
import type { RunCore } from './state';
import { peersSettled } from './peers';
import { isJobReady } from './startup-order';
import { DRAIN_TIMEOUT_S, replicaUrl, routesSettled } from './routing';
import { sleepsBehindRouter } from '../plan/scale-from-zero';

/**
 * Resizing a running group within its `nodes: MIN..MAX` (Troupe's extension; the scaleGroup
 * Update asks, once the fleet has room). New nodes take a rank this group gave up before, else the
 * next rank of the run; they must run (READY with a probe), or the resize is undone whole. Removed
 * nodes are the group's highest ranks: out of the run at once, then stopped and given back — a
 * service's drained first (off the gateways, their requests in flight finished). Pure:
 * `now` comes in; the job records of `core.run` change in place (jobs.ts), the rest is a new core.
 */
export function decideScaling(core: RunCore, event: RunEvent, now: number): Decision<RunCore> {
  const effects: Effect[] = [];
  const live = core.live;
  if (!live) return { state: core, effects };
  switch (event.kind) {
    case 'resize':
      return { state: beginResize(core, event, now, effects), effects };
    case 'released':
      return { state: resizeOf(core, event.id)?.phase === 'releasing' ? finish(core, event.id, null, event.error) : core, effects };
    case 'drained':
      return { state: drained(core, event, now, effects), effects };
    case 'resize-answered':
      return { state: { ...core, live: { ...live, resizes: live.resizes.filter((r) => r.id !== event.id) } }, effects };
    case 'tick':
      return {
        state: live.resizes.reduce((next, r) => (r.phase === 'growing' ? growing(next, r, now, effects) : r.phase === 'draining' ? draining(next, r, effects) : next), core),
        effects,
      };
    default:
      return { state: core, effects };
  }
}

/** Why the run cannot take a resize of the group now, or null (`stopping`: a stop was asked). */
export function resizeRefusal(core: RunCore, group: GroupPlan, stopping: boolean): string | null {
  const { run } = core;
  if (run.status !== 'RUNNING' || stopping || !core.live || core.submission.ending) {
    return `run ${run.run_name} is ${stopping ? 'stopping' : run.status}: a group is resized while the run is RUNNING`;
  }
  // Over once every node is READY again, as the state shows it, even before healing has told its dependents.
  if (core.live.groups[group.index]?.restarting && !restartOver(core, group.index)) return `group ${group.name} is restarting; try again once its nodes are READY`;
  // Neither a deployment's own step on the group nor a resize its rollout took as a target holds one up.
  const under = (r: Resize) => r.phase !== 'over' && r.phase !== 'with-rollout' && !isDeploymentStep(r);
  if (core.live.resizes.some((r) => r.group === group.index && under(r))) return `group ${group.name} is being resized already; try again when that ends`;
  return null;
}

/** Resizes a deployment makes have ids from here up (the scaleGroup Update's count from 1)… */
export const DEPLOY_RESIZE_IDS = 1_000_000;
/** …and the autoscaler's from here (autoscaling.ts). */
export const AUTOSCALE_RESIZE_IDS = 2_000_000;

/** Who resized, where a user would not guess it: the autoscaler's resizes say so. */
function byWhom(id: number): string {
  return id >= AUTOSCALE_RESIZE_IDS ? ' by the autoscaler' : '';
}

/** A deployment's own step: it holds no user's resize of its group up (the rollout takes that as a target). */
export function isDeploymentStep(resize: Resize): boolean {
  return resize.id >= DEPLOY_RESIZE_IDS && resize.id < AUTOSCALE_RESIZE_IDS;
}

/**
 * Why a user's resize must wait for a service's deployment under way, or null. A rollout by revision
 * takes it as its new revision's target for the group (coherent-rollout.ts), unless it is rolling
 * back; dstack's rolling (one replica at a time, its steps picking ranks by deployment) does not.
 */
export function rolloutRefusal(core: RunCore): string | null {
  const rollout = core.service?.rollout;
  if (!rollout || rollout.over) return null;
  const name = core.run.run_name;
  if (!rollout.coherent) return `deployment ${rollout.number} of ${name} rolls as dstack does (rollout.coherence: independent); resize a group once it ends`;
  if (rollout.coherent.phase === 'rolling-back') return `deployment ${rollout.number} of ${name} is rolling back; resize a group once it ends`;
  return null;
}

/** A group's size as a resize counts it: a rollout by revision's target for it while one is under way (its steps get there), else its replicas. */
export function sizeNow(core: RunCore, group: number): number {
  const coherent = core.service?.rollout?.over === false ? core.service.rollout.coherent : null;
  return coherent ? (coherent.counts[group] ?? 0) : groupMembers(core.run.jobs, group).length;
}

/** How many more nodes a user's resize of `group` to `nodes` needs from the fleet: past a rollout's target for it while one is under way. */
export function growthOf(core: RunCore, group: number, nodes: number): number {
  return nodes - sizeNow(core, group);
}

export function resizeOf(core: RunCore, id: number): Resize | null {
  return core.live?.resizes.find((r) => r.id === id) ?? null;
}

/** What a resize asks: group `group` to `nodes` nodes; `victims`: the ranks to remove (default: its highest). */
export interface ResizeRequest {
  id: number;
  group: number;
  nodes: number;
  victims?: readonly number[];
  /** A deployment's own step: taken while its rollout is under way (a user's resize waits for it to end). */
  by_deployment?: boolean;
}

/** A resize begins (asked by the scaleGroup Update, or by a deployment): the new core; its effects pushed to `effects`. */
export function beginResize(core: RunCore, event: ResizeRequest, now: number, effects: Effect[]): RunCore {
  const live = core.live;
  if (!live) return core;
  const group = core.plan.groups[event.group];
  const refused = group ? ((event.by_deployment ? null : rolloutRefusal(core)) ?? resizeRefusal(core, group, core.stop_request !== null)) : `no group ${event.group}`;
  const resize: Resize = { id: event.id, group: event.group, phase: 'over', added: [], removed: [], draining: [], drain_asked: false, error: refused };
  if (!group || refused) return { ...core, live: { ...live, resizes: [...live.resizes, resize] } };
  if (!event.by_deployment && core.service?.rollout?.coherent && !core.service.rollout.over) return retarget(core, live, resize, event.nodes);
  const members = groupMembers(core.run.jobs, group.index);
  if (event.nodes > members.length) return grow(core, live, group, resize, event.nodes - members.length, now, effects);
  if (event.nodes < members.length) {
    const chosen = members.filter((job) => event.victims?.includes(job.job_num));
    const victims = chosen.length === members.length - event.nodes ? chosen : [...members].sort((a, b) => b.job_num - a.job_num).slice(0, members.length - event.nodes);
    // A service's replicas leave the gateways first, and what is in flight to them finishes.
    if (core.service) return withNew(core, { ...resize, phase: 'draining', draining: victims.map((job) => job.job_num) });
    return takeOut(withNew(core, resize), resize.id, group, victims, `${group.name} resized to ${event.nodes}${byWhom(resize.id)}`, now, effects);
  }
  return withNew(core, resize);
}

/**
 * A user's resize while a rollout by revision is under way: the new revision's target for the group
 * (the rollout starts, adds or drains its replicas to match, coherent-rollout.ts); the old revision
 * keeps its replicas until it is retired. Answered once the rollout is over (answerWithRollout).
 */
function retarget(core: RunCore, live: LiveCore, resize: Resize, nodes: number): RunCore {
  const service = core.service;
  const rollout = service?.rollout;
  const coherent = rollout?.coherent;
  if (!service || !rollout || !coherent) return core;
  const counts = coherent.counts.map((count, group) => (group === resize.group ? nodes : count));
  const withTarget = { ...service, rollout: { ...rollout, coherent: { ...coherent, counts } } };
  return { ...core, service: withTarget, live: { ...live, resizes: [...live.resizes, { ...resize, phase: 'with-rollout', with_deployment: rollout.number }] } };
}

/**
 * Resizes taken as a rollout's targets, answered once it is over: through, with the group's size as
 * it is then; rolled back, with why (the old revision keeps the size it had).
 */
export function answerWithRollout(core: RunCore): RunCore {
  const live = core.live;
  const rollout = core.service?.rollout ?? null;
  if (!live || !live.resizes.some((r) => r.phase === 'with-rollout')) return core;
  const resizes = live.resizes.map((r) => {
    if (r.phase !== 'with-rollout' || (rollout && rollout.number === r.with_deployment && !rollout.over)) return r;
    const group = core.plan.groups[r.group];
    const stateGroup = core.run.groups[r.group];
    if (stateGroup) stateGroup.nodes = groupMembers(core.run.jobs, r.group).length;
    const ended = core.run.status !== 'RUNNING' ? `the run ended (${core.run.status}) before deployment ${r.with_deployment} was over` : null;
    const why = ended ?? (rollout?.error ? `${rollout.error}: ${group?.name ?? `group ${r.group}`} keeps ${stateGroup?.nodes ?? 0}` : null);
    return { ...r, phase: 'over' as const, error: why };
  });
  return { ...core, live: { ...live, resizes } };
}

/** `count` new nodes: a rank this group gave up before, else the next rank of the run. */
function grow(core: RunCore, live: LiveCore, group: GroupPlan, resize: Resize, count: number, now: number, effects: Effect[]): RunCore {
  const iso = new Date(now).toISOString();
  const { jobs } = core.run;
  const added: JobState[] = [];
  const plans = { ...live.added_plans };
  for (let i = 0; i < count; i++) {
    const reused = jobs.find((job) => job.removed && job.group_index === group.index);
    if (reused) {
      reused.removed = false;
      nextAttempt(reused, { status: 'TERMINATED', reason: 'TERMINATED_BY_SERVER', message: null }, false, iso);
      // The group as it is now: a deployment may have changed its commands since the rank last ran.
      plans[reused.job_num] = rankPlan(core.plan.run_name, group, reused.job_num, reused.group_job_index, core.plan.service?.revision);
      added.push(reused);
      continue;
    }
    const jobNum = jobs.length;
    const plan = rankPlan(core.plan.run_name, group, jobNum, jobs.filter((job) => job.group_index === group.index).length, core.plan.service?.revision);
    plans[jobNum] = plan;
    const job = freshJob(jobNum, plan.job_name, group.index, group.name, plan.node_group_job_index, iso);
    jobs.push(job);
    added.push(job);
  }
  const attempts = added.map((job) => ({ job_num: job.job_num, attempt: job.attempt }));
  effects.push({ kind: 'new-attempts', group: group.index, jobs: attempts, release: [], restart: false });
  // A service's new replicas are of the revision serving (a rollout's own resizes say theirs after).
  const service = core.service;
  const revision_of = service ? { ...service.revision_of, ...Object.fromEntries(attempts.map((a) => [a.job_num, service.current_revision])) } : null;
  return {
    ...core,
    service: service && revision_of ? { ...service, revision_of } : service,
    live: {
      ...live,
      added_plans: plans,
      added_by_resize: [...live.added_by_resize, ...attempts.map((a) => a.job_num)],
      attempts_to_start: { ...live.attempts_to_start, ...Object.fromEntries(attempts.map((a) => [a.job_num, a.attempt])) },
      resizes: [...live.resizes, { ...resize, phase: 'growing', added: attempts.map((a) => a.job_num) }],
    },
  };
}

/** A growth under way: over once every new node runs (READY with a probe); undone whole when one of them ends first, or the run does. */
function growing(core: RunCore, resize: Resize, now: number, effects: Effect[]): RunCore {
  const group = core.plan.groups[resize.group];
  const added = resize.added.flatMap((n) => core.run.jobs[n] ?? []);
  const failed = added.find((job) => job.removed || isJobFinished(job));
  const runEnded = core.run.status !== 'RUNNING' || core.submission.ending !== null;
  const done = added.every((job) => job.running_at !== null && isJobReady(core.plan, job));
  if (!group || (!runEnded && !failed && !done)) return core;
  const settled = settle(core, resize.added);
  if (runEnded) return finish(settled, resize.id, [], `the run ended (${core.run.status}) before ${group.name} grew`);
  if (failed) {
    const why = failed.message ?? failed.termination_reason ?? 'it ended';
    return undo(settled, resize, group, `${group.name}/${failed.group_job_index} (job ${failed.job_num}) did not start: ${why}`, now, effects);
  }
  return finish(settled, resize.id, resize.added, null);
}

/** The growth is undone whole (`error`: why), no gap left in the group's ranks: its new nodes out and stopped. */
function undo(core: RunCore, resize: Resize, group: GroupPlan, error: string, now: number, effects: Effect[]): RunCore {
  const others = resize.added.flatMap((n) => core.run.jobs[n] ?? []).filter((job) => !job.removed);
  return takeOut(withResize(core, resize.id, (r) => ({ ...r, error })), resize.id, group, others, 'the resize failed', now, effects);
}

/** A growth still under way given up (a rollout past its deadline): undone as if a new node had failed. */
export function abandonGrowth(core: RunCore, id: number, error: string, now: number, effects: Effect[]): RunCore {
  const resize = resizeOf(core, id);
  const group = resize ? core.plan.groups[resize.group] : undefined;
  if (!resize || !group || resize.phase !== 'growing') return core;
  return undo(settle(core, resize.added), resize, group, error, now, effects);
}

/**
 * A service's ranks to remove: once every gateway has the table without them, wait for their
 * requests in flight (DRAIN_TIMEOUT_S at most); if the run ends first, teardown has them.
 */
function draining(core: RunCore, resize: Resize, effects: Effect[]): RunCore {
  const group = core.plan.groups[resize.group];
  if (!group) return core;
  if (core.run.status !== 'RUNNING' || core.submission.ending !== null) {
    return finish(core, resize.id, [], `the run ended (${core.run.status}) before ${group.name} shrank`);
  }
  // Off the gateways' table, and not ready in the book a router reads (peers.json), before the drain is
  // asked; a book that cannot be delivered (its problem is the run's message) does not hold the drain up.
  const bookOut = peersSettled(core) || (core.live?.peers.problem ?? null) !== null;
  if (resize.drain_asked || !routesSettled(core) || !bookOut) return core;
  const urls = resize.draining.flatMap((n) => {
    const job = core.run.jobs[n];
    return job ? (replicaUrl(core, job) ?? []) : [];
  });
  // A group behind the router going to zero: the entry is off the table with it (the gateways hold new
  // requests), and the requests the router is passing on to it are the entry's in flight.
  const last = groupMembers(core.run.jobs, group.index).length === resize.draining.length;
  const entry = last && sleepsBehindRouter(core.plan, group) ? core.run.jobs.filter((j) => core.plan.service?.entry.includes(j.group_index) && !j.removed && !isJobFinished(j)) : [];
  urls.push(...entry.flatMap((job) => replicaUrl(core, job) ?? []));
  effects.push({ kind: 'drain', resize: resize.id, urls, timeout_s: DRAIN_TIMEOUT_S });
  return withResize(core, resize.id, (r) => ({ ...r, drain_asked: true }));
}

/** Drained (or its time is up): the ranks are taken out as any resize takes them out. */
function drained(core: RunCore, event: Extract<RunEvent, { kind: 'drained' }>, now: number, effects: Effect[]): RunCore {
  const resize = resizeOf(core, event.id);
  const group = resize ? core.plan.groups[resize.group] : undefined;
  if (!resize || !group || resize.phase !== 'draining') return core;
  const victims = resize.draining.flatMap((n) => core.run.jobs[n] ?? []);
  const size = groupMembers(core.run.jobs, group.index).length - victims.length;
  const cut =
    event.error !== null
      ? `; not drained: ${event.error}`
      : event.left > 0
        ? `; ${event.left} request${event.left === 1 ? '' : 's'} still in flight after ${DRAIN_TIMEOUT_S} s`
        : '';
  return takeOut(core, resize.id, group, victims, `${group.name} resized to ${size}${byWhom(resize.id)}${cut}`, now, effects);
}

/** The ranks out of the run at once (their jobs end), then stopped and their machines given back. */
function takeOut(core: RunCore, id: number, group: GroupPlan, victims: JobState[], reason: string, now: number, effects: Effect[]): RunCore {
  const iso = new Date(now).toISOString();
  const release: Extract<Effect, { kind: 'release' }>['jobs'] = [];
  for (const job of victims) {
    if (job.instance) release.push({ job_num: job.job_num, attempt: job.attempt, instance: job.instance });
    job.removed = true;
    if (!isJobFinished(job)) endJob(job, 'TERMINATED', 'TERMINATED_BY_SERVER', `removed: ${reason}`, iso);
  }
  const removed = victims.map((job) => job.job_num);
  const next = withResize(settle(core, removed), id, (r) => ({ ...r, removed: r.error ? [] : removed }));
  if (release.length === 0) return finish(next, id, null, null);
  const ranks = victims.map((job) => job.job_num).join(', ');
  effects.push({ kind: 'release', resize: id, jobs: release, summary: `remove ${group.name} rank${release.length === 1 ? '' : 's'} ${ranks} (${reason})` });
  return withResize(next, id, (r) => ({ ...r, phase: 'releasing' }));
}

/** These ranks no longer wait to start, nor count as a resize's additions; the group's size as it is now. */
function settle(core: RunCore, jobNums: readonly number[]): RunCore {
  const live = core.live;
  if (!live) return core;
  const waiting = { ...live.attempts_to_start };
  for (const n of jobNums) if (core.run.jobs[n]?.removed) delete waiting[n];
  return { ...core, live: { ...live, attempts_to_start: waiting, added_by_resize: live.added_by_resize.filter((n) => !jobNums.includes(n)) } };
}

/** The resize is answered: `added` (null: keep what it has), or `error`; the group's size as it is now. */
function finish(core: RunCore, id: number, added: number[] | null, error: string | null): RunCore {
  const resize = resizeOf(core, id);
  const stateGroup = resize ? core.run.groups[resize.group] : undefined;
  if (resize && stateGroup) stateGroup.nodes = groupMembers(core.run.jobs, resize.group).length;
  return withResize(core, id, (r) => ({ ...r, phase: 'over', added: added ?? r.added, error: r.error ?? error }));
}

function withNew(core: RunCore, resize: Resize): RunCore {
  const live = core.live;
  return live ? { ...core, live: { ...live, resizes: [...live.resizes, resize] } } : core;
}

function withResize(core: RunCore, id: number, change: (r: Resize) => Resize): RunCore {
  const live = core.live;
  return live ? { ...core, live: { ...live, resizes: live.resizes.map((r) => (r.id === id ? change(r) : r)) } } : core;
}
