import type { Plan } from '../plan/plan-schema';
import type { Spec } from '../contract/core-state-schema';
import type { Effect } from './effects';
import { beginResize, DEPLOY_RESIZE_IDS } from './scaling';
import type { RunCore, ServiceCore } from './state';

/**
 * What both kinds of rollout (deployment.ts: dstack's rolling; coherent-rollout.ts: by revision) do
 * the same way: a step is a resize of one group, begun here with an id of the deployments' own, read
 * once it is over, and forgotten (no Update answers it). Pure.
 */

/** `restoring`: a rollback starting the old revision's replicas that earlier rounds retired. */
export type StepPhase = 'resizing' | 'adding' | 'removing' | 'restoring';

/** A resize of the deployment's begins as its step under way. */
export function beginStep(core: RunCore, step: { group: number; phase: StepPhase }, ask: { nodes: number; victims?: number[] }, now: number, effects: Effect[]): RunCore {
  const service = serviceOf(core);
  const rollout = service.rollout;
  if (!rollout) return core;
  const id = DEPLOY_RESIZE_IDS + service.resizes_made;
  const next = withService(core, { ...service, resizes_made: service.resizes_made + 1, rollout: { ...rollout, step: { ...step, resize: id } } });
  return beginResize(next, { id, group: step.group, ...ask, by_deployment: true }, now, effects);
}

/** The rollout is over (`error`: why it stopped or was undone). */
export function rolloutOver(core: RunCore, error: string | null): RunCore {
  const service = serviceOf(core);
  const rollout = service.rollout;
  return rollout ? withService(core, { ...service, rollout: { ...rollout, step: null, steps: [], error, over: true } }) : core;
}

export function serviceOf(core: RunCore): ServiceCore {
  if (!core.service) throw new Error(`run ${core.plan.run_name} is not a service`);
  return core.service;
}

export function withService(core: RunCore, service: ServiceCore): RunCore {
  return { ...core, service };
}

export function withLiveResizes(core: RunCore, change: (resizes: NonNullable<RunCore['live']>['resizes']) => NonNullable<RunCore['live']>['resizes']): RunCore {
  return core.live ? { ...core, live: { ...core.live, resizes: change(core.live.resizes) } } : core;
}

/** Why the run cannot take a deployment now, or null. */
export function deploymentRefusal(core: RunCore, stopping: boolean): string | null {
  const { run } = core;
  if (run.status !== 'RUNNING' || stopping || core.submission.ending) return `run ${run.run_name} is ${stopping ? 'stopping' : run.status}: a service is deployed to while it is RUNNING`;
  const rollout = core.service?.rollout;
  if (rollout && !rollout.over) return `deployment ${rollout.number} of ${run.run_name} is under way; try again when it ends`;
  if (core.live?.resizes.some((r) => r.phase !== 'over')) return `a group of ${run.run_name} is being resized; try again when that ends`;
  return null;
}

/** What a deployment changes of a service's plan (null: not a service): its service settings, each group's commands, size and scaling. */
export function specOf(plan: Plan): Spec | null {
  if (!plan.service) return null;
  return { service: plan.service, groups: plan.groups.map((g) => ({ commands: [...g.commands], nodes: g.nodes, nodes_range: g.nodes_range ?? null, scaling: g.scaling ?? null })) };
}

/** `plan` with `spec`'s service settings and each group's commands and size: the one way a deployment, a rollback or a redeploy changes a plan. */
export function withSpec(plan: Plan, spec: Spec): Plan {
  return {
    ...plan,
    service: spec.service,
    groups: plan.groups.map((group) => {
      const was = spec.groups[group.index];
      return was ? { ...group, commands: was.commands, nodes: was.nodes, nodes_range: was.nodes_range, scaling: was.scaling ?? null } : group;
    }),
  };
}
