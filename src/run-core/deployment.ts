import type { GroupPlan, Plan } from '../plan/plan-schema';
import type { Decision, Effect } from './effects';
import type { RunEvent } from './events';
import { groupMembers, isJobFinished } from './jobs';
import { answerWithRollout, resizeOf } from './scaling';
import { advanceCoherent, beginCoherent, canaryRead, failedNew, revisionChecked } from './coherent-rollout';
import { keepsRevisionsApart, revisionOf } from './revisions';
import { rolloutStatusOf, steerRollout } from './rollout-control';
import { beginStep, deploymentRefusal, rolloutOver, serviceOf, specOf, withLiveResizes, withService, withSpec } from './rollout-steps';
import type { RunCore, ServiceCore } from './state';

/**
 * A service's deployments: `troupe apply` of a changed service (the applyService Update) is
 * deployment N+1 of the running run, as dstack numbers them. `replicas` and the endpoint's settings
 * (`auth`, `rate_limits`, `strip_prefix`) change in place; changed `commands` roll, one replica at
 * a time per group (surge 1, dstack's baseline): a replica of the new deployment is added and must
 * be READY (and so on the gateways) before an old one is drained and removed. What cannot change in
 * a running service is refused before anything changes. A replica that cannot start stops the
 * deployment where it is: the old replicas still serve. Pure: `now` comes in.
 */

/** What applying `next` to a service running `current` does, or why it cannot. */
export type DeploymentChange =
  | { kind: 'refused'; message: string }
  | { kind: 'change'; resize: Array<{ group: number; nodes: number }>; roll: number[]; endpoint: boolean };

/** Fields of a group that a running service cannot change (Troupe rolls commands only, for now). */
const FIXED_GROUP_FIELDS = ['resources', 'ports', 'depends_on', 'ready', 'ready_min', 'on_failure', 'on_dependency_restart', 'on_peers_change'] as const;
const FIXED_RUN_FIELDS = ['image', 'working_dir', 'env', 'secret_env', 'startup_order', 'fleets'] as const;

/** A run field as two submissions can compare it: a secret's value is sealed anew each time, so only its name counts. */
function comparable(plan: Plan, field: (typeof FIXED_RUN_FIELDS)[number]): unknown {
  if (field !== 'env') return plan[field];
  const secret = new Set(plan.secret_env ?? []);
  return Object.fromEntries(Object.entries(plan.env).map(([k, v]) => [k, secret.has(k) ? '(sealed)' : v]));
}

const same = (a: unknown, b: unknown): boolean => JSON.stringify(a ?? null) === JSON.stringify(b ?? null);

/**
 * The change from `current` to `next` (both services' plans), judged against the group sizes now
 * (`sizes`, by group index); pure, shared by the Update's validator and the core.
 */
export function deploymentChange(current: Plan, next: Plan, sizes: readonly number[]): DeploymentChange {
  const refuse = (message: string): DeploymentChange => ({ kind: 'refused', message });
  if (!current.service || !next.service) return refuse(`run ${current.run_name} is not a service`);
  if (next.run_name !== current.run_name) return refuse(`the config names run ${next.run_name}, not ${current.run_name}`);
  const names = (plan: Plan) => plan.groups.map((g) => g.name).join(', ');
  if (names(current) !== names(next)) return refuse(`the groups changed (${names(current)} → ${names(next)}): a running service keeps its groups; stop it and apply it again`);
  const fixed: string[] = [];
  if (next.service.port !== current.service.port) fixed.push('port');
  for (const field of FIXED_RUN_FIELDS) if (!same(comparable(current, field), comparable(next, field))) fixed.push(field);
  for (const group of current.groups) {
    const other = next.groups[group.index] as GroupPlan;
    for (const field of FIXED_GROUP_FIELDS) if (!same(group[field], other[field])) fixed.push(`groups[${group.name}].${field === 'ready' ? 'probes' : field}`);
  }
  if (fixed.length > 0) {
    return refuse(
      `${fixed.join(', ')} changed: a running service changes replicas, scaling, auth, rate_limits and strip_prefix in place and rolls commands; for the rest, stop it and apply it again`,
    );
  }
  const resize = current.groups.flatMap((group) => {
    const other = next.groups[group.index] as GroupPlan;
    const size = sizes[group.index] ?? group.nodes;
    const range = other.nodes_range ?? { min: other.nodes, max: other.nodes };
    const nodes = Math.min(Math.max(size, range.min), range.max);
    return nodes === size ? [] : [{ group: group.index, nodes }];
  });
  const roll = current.groups.filter((group) => !same(group.commands, next.groups[group.index]?.commands)).map((g) => g.index);
  const endpoint = !same(current.service, { ...next.service, auth: authOf(current, next) });
  return { kind: 'change', resize, roll, endpoint };
}

/**
 * The tokens after a deployment: a service that had them keeps them (a new config brings a new token
 * made by `troupe apply`, which is not meant to replace the one its callers hold); `auth: false`
 * opens it, and `auth` switched on takes the new one.
 */
function authOf(current: Plan, next: Plan): NonNullable<Plan['service']>['auth'] {
  const had = current.service?.auth ?? null;
  const wants = next.service?.auth ?? null;
  return had && wants ? had : wants;
}

/** The plan a deployment runs from now on: the new commands, ranges and endpoint; the same ranks. */
function deployedPlan(current: Plan, next: Plan): Plan {
  const spec = specOf(next);
  return spec ? withSpec(current, { ...spec, service: { ...spec.service, auth: authOf(current, next) } }) : current;
}

export function decideDeployment(core: RunCore, event: RunEvent, now: number): Decision<RunCore> {
  const decided = decide(core, event, now);
  // A user's resize taken as the rollout's target is answered once the rollout is over.
  const decision = { ...decided, state: answerWithRollout(decided.state) };
  // What the run shows of its rollout follows what was decided.
  if (decision.state.run.service) {
    decision.state.run.service = { ...decision.state.run.service, rollout: rolloutStatusOf(decision.state) };
    // Each replica's revision, as `troupe ps` counts them per group.
    for (const job of decision.state.run.jobs) job.revision = revisionOf(decision.state, job.job_num);
  }
  return decision;
}

function decide(core: RunCore, event: RunEvent, now: number): Decision<RunCore> {
  const effects: Effect[] = [];
  const service = core.service;
  if (!service || !core.live) return { state: core, effects };
  if (event.kind === 'deploy') return { state: deploy(core, service, event, now, effects), effects };
  if (event.kind === 'deploy-answered') {
    const done = service.rollout?.id === event.id && service.rollout.over;
    return { state: done ? withService(core, { ...service, rollout: null }) : core, effects };
  }
  if (event.kind === 'figures') return { state: canaryRead(core, event, now, effects), effects };
  if (event.kind === 'revision-checked') return { state: revisionChecked(core, event, now, effects), effects };
  if (event.kind === 'rollout-control') return { state: steerRollout(core, event.action, now, effects, event.why), effects };
  if (event.kind !== 'tick' || !service.rollout || service.rollout.over) return { state: core, effects };
  return { state: service.rollout.coherent ? advanceCoherent(failedNew(core, now, effects), now, effects) : advance(core, now, effects), effects };
}

function deploy(core: RunCore, service: ServiceCore, event: Extract<RunEvent, { kind: 'deploy' }>, now: number, effects: Effect[]): RunCore {
  const number = service.deployment + 1;
  const refused = deploymentRefusal(core, core.stop_request !== null);
  const sizes = core.plan.groups.map((g) => groupMembers(core.run.jobs, g.index).length);
  const change = refused ? { kind: 'refused' as const, message: refused } : deploymentChange(core.plan, event.plan, sizes);
  if (change.kind === 'refused') {
    return withService(core, { ...service, rollout: { id: event.id, number: service.deployment, steps: [], step: null, rolled: [], coherent: null, error: change.message, over: true } });
  }
  const steps = [
    ...change.resize.map((r) => ({ kind: 'resize' as const, group: r.group, nodes: r.nodes })),
    ...change.roll.map((group) => ({ kind: 'roll' as const, group, nodes: 0 })),
  ];
  core.run.service = core.run.service ? { ...core.run.service, deployment: number } : core.run.service;
  const next = { ...core, plan: deployedPlan(core.plan, event.plan) };
  if (keepsRevisionsApart(next.plan) && change.roll.length > 0) {
    // By revision: every group gets the new revision's replicas, as many as it has (or is resized to) now.
    const counts = core.plan.groups.map((g) => change.resize.find((r) => r.group === g.index)?.nodes ?? sizes[g.index] ?? g.nodes);
    const rollout = { id: event.id, number, steps: [], step: null, rolled: core.plan.groups.map((g) => g.index), coherent: null, error: null, over: false };
    const from = core.plan.groups.map((g) => sizes[g.index] ?? g.nodes);
    return beginCoherent(withService(next, { ...service, deployment: number, rollout }), core.plan, counts, from, now, effects, event.restore === true);
  }
  const rollout = { id: event.id, number, steps, step: null, rolled: [], coherent: null, error: null, over: false };
  return advance(withService(next, { ...service, deployment: number, rollout }), now, effects);
}

/** The rollout's next move: its step under way watched, then the next step begun, until none is left. */
function advance(core: RunCore, now: number, effects: Effect[]): RunCore {
  const service = serviceOf(core);
  const rollout = service.rollout;
  if (!rollout || rollout.over) return core;
  const step = rollout.step;
  if (step !== null) {
    const resize = resizeOf(core, step.resize);
    if (!resize || resize.phase !== 'over') return core;
    // The deployment's own resize is forgotten once read (no Update answers it).
    const forgotten = withLiveResizes(core, (resizes) => resizes.filter((r) => r.id !== step.resize));
    if (resize.error) return rolloutOver(forgotten, `deployment ${rollout.number} stopped: ${resize.error}`);
    if (step.phase === 'adding') {
      const revision_of = { ...service.revision_of };
      for (const n of resize.added) revision_of[n] = rollout.number;
      const added = withService(forgotten, { ...service, revision_of, rollout: { ...rollout, step: null } });
      const victim = oldest(added, step.group, rollout.number);
      if (victim === null) return advance(added, now, effects);
      const members = groupMembers(added.run.jobs, step.group).length;
      return beginStep(added, { group: step.group, phase: 'removing' }, { nodes: members - 1, victims: [victim] }, now, effects);
    }
    // A resize step, or an old replica out: on to the next move (a roll stays first until none is old).
    return advance(withService(forgotten, { ...service, rollout: { ...rollout, step: null } }), now, effects);
  }
  const [next, ...rest] = rollout.steps;
  if (!next) return rolloutOver(core, null);
  const members = groupMembers(core.run.jobs, next.group).length;
  if (next.kind === 'resize') {
    const popped = withService(core, { ...service, rollout: { ...rollout, steps: rest } });
    return beginStep(popped, { group: next.group, phase: 'resizing' }, { nodes: next.nodes }, now, effects);
  }
  // A roll: one more replica of the new deployment, then one old one out, until none is old.
  if (oldest(core, next.group, rollout.number) === null) {
    return advance(withService(core, { ...service, rollout: { ...rollout, steps: rest, rolled: [...rollout.rolled, next.group] } }), now, effects);
  }
  return beginStep(core, { group: next.group, phase: 'adding' }, { nodes: members + 1 }, now, effects);
}

/** The group's replica of the oldest deployment still running (lowest rank first), or null when all are of `number`. */
function oldest(core: RunCore, group: number, number: number): number | null {
  const service = serviceOf(core);
  const old = groupMembers(core.run.jobs, group).filter((job) => !isJobFinished(job) && (service.revision_of[job.job_num] ?? 0) < number);
  old.sort((a, b) => (service.revision_of[a.job_num] ?? 0) - (service.revision_of[b.job_num] ?? 0) || a.job_num - b.job_num);
  return old[0]?.job_num ?? null;
}

