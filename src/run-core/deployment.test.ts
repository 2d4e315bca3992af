import { describe, expect, it } from 'vitest';
import type { Plan } from '../plan/plan-schema';
import { answersTo, coreOf, exited, jobs, openService, pass, provisioned, ready, running, T0 } from '../../test/helpers/run-core';
import { deploymentChange } from './deployment';
import type { Effect } from './effects';
import { groupMembers } from './jobs';
import { peersSettled } from './peers';
import type { RunCore } from './state';

/**
 * A service's deployments over sequences of events, no server: what changes in place, what rolls
 * (a new replica READY before an old one is drained and removed, one at a time), what is refused,
 * and a rollout whose new replica cannot start stopping where it is.
 */

function service(commands: string, extra: string[] = []): Plan {
  return openService(['{name: router, replicas: 1, router: {type: smg}, commands: [route]}', `{name: decode, replicas: 2..3, scaling: {metric: rps, target: 5}, commands: [${commands}]}`], extra);
}

/** Every routing push and drain answered, new ranks provisioned, started and READY: what the shell and the nodes would do. */
function settle(core: RunCore, effects: Effect[], now: number): RunCore {
  let state = core;
  let pending = effects;
  for (let i = 0; i < 50 && pending.length > 0; i++) {
    const step = pass(state, pending.flatMap((e) => answersTo(state, e)), now + i);
    state = step.core;
    pending = step.effects;
  }
  return state;
}

function serving(plan = service('serve-v1')): RunCore {
  let core = coreOf(plan);
  const all = plan.jobs.map((j) => j.job_num);
  const first = pass(core, [jobs(core, all.map((n) => provisioned(n))), { kind: 'unlocked' }, { kind: 'announced' }], T0 + 1000);
  core = settle(first.core, first.effects, T0 + 1000);
  const up = pass(core, [jobs(core, all.flatMap((n) => [running(n), ready(n)]))], T0 + 2000);
  return settle(up.core, up.effects, T0 + 2000);
}

const commandsOf = (core: RunCore, group: number) =>
  groupMembers(core.run.jobs, group).map((job) => (core.live?.added_plans[job.job_num] ?? core.plan.jobs[job.job_num])?.commands[0]);

describe("a service's deployments", () => {
  it('changed commands roll one replica at a time: a new one READY first, then an old one drained and removed', () => {
    let core = serving();
    expect(commandsOf(core, 1)).toEqual(['serve-v1', 'serve-v1']);
    let step = pass(core, [{ kind: 'deploy', id: 7, plan: service('serve-v2') }], T0 + 3000);
    // Surge 1: one new rank asked for, no old one touched yet.
    const asked = step.effects.filter((e) => e.kind === 'new-attempts');
    expect(asked).toHaveLength(1);
    expect(step.effects.some((e) => e.kind === 'drain' || e.kind === 'release')).toBe(false);
    expect(core.service?.deployment).toBe(0);
    expect(step.core.run.service?.deployment).toBe(1);

    // Play it out step by step, watching that the group never has fewer than 2 READY replicas.
    let pending = step.effects;
    core = step.core;
    for (let i = 0; i < 60 && !(core.service?.rollout?.over ?? true); i++) {
      for (const e of pending) {
        // Drained only once the table without the victim is what the gateways have, and the book the router reads.
        if (e.kind === 'drain') expect([core.service?.delivered_key, peersSettled(core)]).toEqual([core.service?.key, true]);
      }
      const events = pending.flatMap((e) => answersTo(core, e));
      step = pass(core, events, T0 + 4000 + i);
      core = step.core;
      pending = step.effects;
      const readyDecode = groupMembers(core.run.jobs, 1).filter((j) => j.status === 'READY');
      expect(readyDecode.length).toBeGreaterThanOrEqual(2);
    }
    expect(core.service?.rollout).toMatchObject({ id: 7, number: 1, over: true, error: null, rolled: [1] });
    expect(commandsOf(core, 1)).toEqual(['serve-v2', 'serve-v2']);
    expect(commandsOf(core, 0)).toEqual(['route']);
    // Answered: forgotten, and no resize of its own is left behind.
    core = pass(core, [{ kind: 'deploy-answered', id: 7 }], T0 + 9000).core;
    expect(core.service?.rollout).toBeNull();
    expect(core.live?.resizes).toEqual([]);
  });

  it('replicas and the endpoint change in place: a resize, no roll', () => {
    const core = serving();
    const next = service('serve-v1', ['rate_limits: [{rps: 5}]']);
    next.groups[1]!.nodes_range = { min: 3, max: 4 };
    next.groups[1]!.nodes = 3;
    const change = deploymentChange(core.plan, next, [1, 2]);
    expect(change).toEqual({ kind: 'change', resize: [{ group: 1, nodes: 3 }], roll: [], endpoint: true });
    const step = pass(core, [{ kind: 'deploy', id: 1, plan: next }], T0 + 3000);
    const done = settle(step.core, step.effects, T0 + 3000);
    expect(done.service?.rollout).toMatchObject({ over: true, error: null, rolled: [] });
    expect(groupMembers(done.run.jobs, 1)).toHaveLength(3);
    expect(done.plan.service?.rate_limits).toEqual([{ prefix: '/', rps: 5, burst: 0, key: { type: 'ip_address' } }]);
  });

  it('refuses what a running service cannot change, naming each field, and changes nothing', () => {
    const core = serving();
    const moved = service('serve-v1');
    moved.service = { ...moved.service!, port: 9000 };
    moved.env = { A: '1' };
    moved.groups[1]!.ready = null;
    const change = deploymentChange(core.plan, moved, [1, 2]);
    expect(change).toEqual({
      kind: 'refused',
      message:
        'port, env, groups[decode].probes changed: a running service changes replicas, scaling, auth, rate_limits and strip_prefix in place and rolls commands; for the rest, stop it and apply it again',
    });
    const step = pass(core, [{ kind: 'deploy', id: 2, plan: moved }], T0 + 3000);
    expect(step.effects.filter((e) => e.kind !== 'push-routes')).toEqual([]);
    expect(step.core.service?.rollout).toMatchObject({ over: true, error: change.kind === 'refused' ? change.message : '' });
    expect(step.core.plan).toEqual(core.plan);
    expect(deploymentChange(core.plan, { ...core.plan, groups: core.plan.groups.slice(0, 1) }, [1, 2])).toEqual({
      kind: 'refused',
      message: 'the groups changed (router, decode → router): a running service keeps its groups; stop it and apply it again',
    });
  });

  it('a new replica that cannot start stops the deployment where it is: the old ones still serve', () => {
    let core = serving();
    const step = pass(core, [{ kind: 'deploy', id: 3, plan: service('broken') }], T0 + 3000);
    const [asked] = step.effects.filter((e): e is Extract<Effect, { kind: 'new-attempts' }> => e.kind === 'new-attempts');
    const rank = asked!.jobs[0]!;
    core = pass(step.core, [jobs(step.core, [provisioned(rank.job_num, rank.attempt)]), jobs(step.core, [running(rank.job_num, rank.attempt), exited(rank.job_num, 1, rank.attempt)])], T0 + 4000).core;
    core = settle(core, pass(core, [], T0 + 4100).effects, T0 + 4100);
    expect(core.service?.rollout?.over).toBe(true);
    expect(core.service?.rollout?.error).toMatch(/^deployment 1 stopped: decode\/2 \(job 3\) did not start/);
    expect(groupMembers(core.run.jobs, 1).map((j) => j.status)).toEqual(['READY', 'READY']);
    expect(commandsOf(core, 1)).toEqual(['serve-v1', 'serve-v1']);
    expect(core.submission.ending).toBeNull();
  });
});
