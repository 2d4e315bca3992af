import { describe, expect, it } from 'vitest';
import type { Plan } from '../plan/plan-schema';
import { answersTo, jobs, openService, pass, play, provisioned, ready, running, servingCore, T0 } from '../../test/helpers/run-core';
import type { Effect } from './effects';
import type { RunEvent } from './events';
import { activeJobs, groupMembers } from './jobs';
import { revisionOf } from './revisions';
import { lastGoodPlan, revertOf, rolloutControlRefusal } from './rollout-control';
import { rolloutDeadline } from './coherent-rollout';
import { rolloutRefusal } from './scaling';
import type { RunCore } from './state';

/**
 * A coherent rollout steered by hand over sequences of events, no server: paused where it is and
 * resumed with its clocks where they stopped, rolled back while the old revision serves, and — once
 * one went through — its old spec deployed again; what cannot be asked is refused, saying why.
 */

function service(decode: string, extra = ''): Plan {
  return openService(
    ['{name: router, replicas: 1, router: {type: smg}, depends_on: [decode], commands: [route]}', `{name: decode, replicas: 2, commands: [${decode}]}`],
    [`rollout: {coherence: revision${extra}}`],
  );
}

/** New replicas provisioned and running, never READY: a rollout that stays in `starting`. */
const slow = (at: RunCore, e: Effect): RunEvent[] =>
  e.kind === 'new-attempts' ? [jobs(at, e.jobs.map((j) => provisioned(j.job_num, j.attempt))), jobs(at, e.jobs.map((j) => running(j.job_num, j.attempt)))] : answersTo(at, e);

const decodeCommands = (core: RunCore) => groupMembers(core.run.jobs, 1).map((job) => (core.live?.added_plans[job.job_num] ?? core.plan.jobs[job.job_num])?.commands[0]);

/** A service whose decode may be resized (2..4), its rollout to serve-v2 started and still starting; the decodes it had. */
function startingWithRange() {
  const plan = (decode: string) => openService(
    ['{name: router, replicas: 1, router: {type: smg}, depends_on: [decode], commands: [route]}', `{name: decode, replicas: 2..4, scaling: {metric: rps, target: 10}, commands: [${decode}]}`],
    ['rollout: {coherence: revision}'],
  );
  const before = servingCore(plan('serve-v1'));
  const oldDecode = groupMembers(before.run.jobs, 1).map((j) => j.job_num);
  const deploying = pass(before, [{ kind: 'deploy', id: 1, plan: plan('serve-v2') }], T0 + 3000);
  return { oldDecode, starting: play(deploying.core, deploying.effects, T0 + 3000, slow).core };
}

describe('a rollout steered by hand', () => {
  it('pauses where it is (no next step, no deadline) and resumes with its deadline moved by the pause', () => {
    const before = servingCore(service('serve-v1'));
    expect(rolloutControlRefusal(before, 'pause', false)).toBe('service pd has no rollout under way');
    const deploying = pass(before, [{ kind: 'deploy', id: 1, plan: service('serve-v2') }], T0 + 3000);
    const starting = play(deploying.core, deploying.effects, T0 + 3000, slow).core;
    const deadline = rolloutDeadline(starting);
    const paused = pass(starting, [{ kind: 'rollout-control', action: 'pause' }], T0 + 10_000).core;
    expect(paused.run.service?.rollout).toMatchObject({ deployment: 1, coherence: 'revision', phase: 'starting', paused: true });
    expect(rolloutDeadline(paused)).toBeNull();
    expect(rolloutControlRefusal(paused, 'pause', false)).toBe('deployment 1 of pd is paused already');
    // Long past the deadline, paused: nothing is rolled back.
    const later = pass(paused, [], T0 + 3000 + 700_000).core;
    expect(later.service?.rollout?.over).toBe(false);
    const resumed = pass(later, [{ kind: 'rollout-control', action: 'resume' }], T0 + 3000 + 700_000).core;
    expect(resumed.run.service?.rollout?.paused).toBe(false);
    expect(rolloutDeadline(resumed)).toBe(deadline! + (3000 + 700_000 - 10_000));
    expect(rolloutControlRefusal(resumed, 'resume', false)).toBe('deployment 1 of pd is not paused');
  });

  it('rolls back the rollout under way by hand: the old revision serves throughout, the new one is stopped', () => {
    const before = servingCore(service('serve-v1'));
    const deploying = pass(before, [{ kind: 'deploy', id: 1, plan: service('serve-v2') }], T0 + 3000);
    const starting = play(deploying.core, deploying.effects, T0 + 3000, slow).core;
    expect(rolloutControlRefusal(starting, 'rollback', false)).toBeNull();
    const back = pass(starting, [{ kind: 'rollout-control', action: 'rollback' }], T0 + 20_000);
    const { core } = play(back.core, back.effects, T0 + 20_000);
    expect(core.service?.rollout?.error).toBe('deployment 1 rolled back: rolled back by hand; revision 0 serves');
    expect(core.run.service?.rollout).toMatchObject({ phase: 'over', can_roll_back: false });
    expect(activeJobs(core.run).map((j) => j.job_num)).toEqual(activeJobs(before.run).map((j) => j.job_num));
    expect(decodeCommands(core)).toEqual(['serve-v1', 'serve-v1']);
    expect(rolloutControlRefusal(core, 'rollback', false)).toBe('service pd has no rollout to roll back: none went through with rollout.coherence: revision');
  });

  it('once one went through, deploys the spec it replaced again as the next deployment, and can go forth again', () => {
    const before = servingCore(service('serve-v1'));
    const deploying = pass(before, [{ kind: 'deploy', id: 1, plan: service('serve-v2') }], T0 + 3000);
    let core = play(deploying.core, deploying.effects, T0 + 3000).core;
    core = pass(core, [{ kind: 'deploy-answered', id: 1 }], T0 + 4000).core;
    expect(core.run.service?.rollout).toMatchObject({ deployment: 1, phase: 'over', error: null, can_roll_back: true });
    expect(rolloutControlRefusal(core, 'rollback', false)).toBeNull();
    const old = lastGoodPlan(core)!;
    expect(old.service?.revision).toBe(before.plan.service?.revision);
    const back = pass(core, [{ kind: 'deploy', id: 2, plan: old }], T0 + 5000);
    core = play(back.core, back.effects, T0 + 5000).core;
    expect(core.service?.rollout).toMatchObject({ number: 2, over: true, error: null });
    expect(core.plan.service?.revision).toBe(before.plan.service?.revision);
    expect(decodeCommands(core)).toEqual(['serve-v1', 'serve-v1']);
    expect(activeJobs(core.run).map((j) => revisionOf(core, j.job_num))).toEqual([2, 2, 2]);
    // And the one it rolled away from is the next rollback's.
    expect(lastGoodPlan(core)?.service?.revision).toBe(service('serve-v2').service?.revision);
  });

  it('deploys the last good spec again without its canary: gate A and the rounds, no share judged against the revision being left', () => {
    const canary = ', canary: {traffic: 20, soak: 10s}';
    const before = servingCore(service('serve-v1', canary));
    // v2 (no canary of its own) goes through; v1's spec, canary and all, is the last good one.
    const deploying = pass(before, [{ kind: 'deploy', id: 1, plan: service('serve-v2') }], T0 + 3000);
    let core = play(deploying.core, deploying.effects, T0 + 3000).core;
    core = pass(core, [{ kind: 'deploy-answered', id: 1 }], T0 + 4000).core;
    const old = lastGoodPlan(core)!;
    expect(old.service?.rollout.canary).toEqual({ traffic_percent: 20, soak_s: 10 });
    // Deployed as an apply would (no restore): its canary takes 20 % and waits for its soak's figures.
    const applied = pass(core, [{ kind: 'deploy', id: 2, plan: old }], T0 + 5000);
    const soaking = play(applied.core, applied.effects, T0 + 5000);
    expect(soaking.core.service?.rollout?.over).toBe(false);
    expect(soaking.core.service?.rollout?.coherent).toMatchObject({ phase: 'canary', share_percent: 20 });
    // As the rollback by hand deploys it: gate A still asked, no canary read, through at once.
    const restoring = pass(core, [{ kind: 'deploy', id: 2, plan: old, restore: true }], T0 + 5000);
    const restored = play(restoring.core, restoring.effects, T0 + 5000);
    expect(restored.seen.some(({ effect }) => effect.kind === 'check-revision')).toBe(true);
    expect(restored.seen.some(({ effect }) => effect.kind === 'read-figures')).toBe(false);
    expect(restored.core.service?.rollout).toMatchObject({ number: 2, over: true, error: null });
    expect(decodeCommands(restored.core)).toEqual(['serve-v1', 'serve-v1']);
    expect(activeJobs(restored.core.run).map((j) => revisionOf(restored.core, j.job_num))).toEqual([2, 2, 2]);
  });

  it("takes a user's resize in the middle of a rollout as the new revision's target, and answers it once the rollout went through", () => {
    const { oldDecode, starting } = startingWithRange();
    expect(rolloutRefusal(starting)).toBeNull();
    const asked = pass(starting, [{ kind: 'resize', id: 7, group: 1, nodes: 3 }], T0 + 4000);
    expect(asked.core.live?.resizes.find((r) => r.id === 7)).toMatchObject({ phase: 'with-rollout', with_deployment: 1, error: null });
    // Nothing more asked while the new decodes still start; the old ones untouched.
    expect(asked.effects.some((e) => e.kind === 'new-attempts' || e.kind === 'release')).toBe(false);
    const newDecode = groupMembers(asked.core.run.jobs, 1).filter((j) => revisionOf(asked.core, j.job_num) === 1).map((j) => j.job_num);
    expect(newDecode).toHaveLength(2);
    const up = pass(asked.core, [jobs(asked.core, newDecode.map((n) => ready(n)))], T0 + 5000);
    const { core, seen } = play(up.core, up.effects, T0 + 5000);
    // The third new decode was asked before the old revision lost a replica.
    const third = seen.findIndex(({ effect }) => effect.kind === 'new-attempts' && effect.group === 1);
    const firstRelease = seen.findIndex(({ effect }) => effect.kind === 'release');
    expect(third).toBeGreaterThanOrEqual(0);
    expect(third).toBeLessThan(firstRelease);
    expect(core.service?.rollout).toMatchObject({ over: true, error: null });
    const decode = groupMembers(core.run.jobs, 1);
    expect(decode.map((j) => revisionOf(core, j.job_num))).toEqual([1, 1, 1]);
    expect(decode.some((j) => oldDecode.includes(j.job_num))).toBe(false);
    expect(decodeCommands(core)).toEqual(['serve-v2', 'serve-v2', 'serve-v2']);
    expect(core.live?.resizes.find((r) => r.id === 7)).toMatchObject({ phase: 'over', error: null, with_deployment: 1 });
    expect(core.run.groups[1]?.nodes).toBe(3);
  });

  it('shrinks the new revision to a smaller target by draining its newest replicas; the old revision keeps its own until retired', () => {
    const { oldDecode, starting } = startingWithRange();
    const asked = pass(starting, [{ kind: 'resize', id: 7, group: 1, nodes: 1 }], T0 + 4000).core;
    const newDecode = groupMembers(asked.run.jobs, 1).filter((j) => revisionOf(asked, j.job_num) === 1).map((j) => j.job_num);
    const up = pass(asked, [jobs(asked, newDecode.map((n) => ready(n)))], T0 + 5000);
    const { core, seen } = play(up.core, up.effects, T0 + 5000);
    // Drained in turn: the newest new decode (the old revision still serving whole), then the old router, then the old decodes.
    const drained = seen.flatMap(({ core: at, effect }) => (effect.kind === 'drain' ? [at.live?.resizes.find((r) => r.id === effect.resize)?.draining ?? []] : []));
    expect(drained).toEqual([[Math.max(...newDecode)], [0], oldDecode]);
    expect(core.service?.rollout).toMatchObject({ over: true, error: null });
    expect(groupMembers(core.run.jobs, 1).map((j) => j.job_num)).toEqual([Math.min(...newDecode)]);
    expect(core.live?.resizes.find((r) => r.id === 7)).toMatchObject({ phase: 'over', error: null });
  });

  it("answers a resize taken by a rollout that rolled back with why: the old revision keeps its size", () => {
    const before = servingCore(service('serve-v1'));
    const deploying = pass(before, [{ kind: 'deploy', id: 1, plan: service('serve-v2') }], T0 + 3000);
    const starting = play(deploying.core, deploying.effects, T0 + 3000, slow).core;
    const asked = pass(starting, [{ kind: 'resize', id: 7, group: 1, nodes: 3 }], T0 + 4000).core;
    const back = pass(asked, [{ kind: 'rollout-control', action: 'rollback' }], T0 + 5000);
    expect(rolloutRefusal(back.core)).toBe('deployment 1 of pd is rolling back; resize a group once it ends');
    const { core } = play(back.core, back.effects, T0 + 5000);
    expect(core.live?.resizes.find((r) => r.id === 7)).toMatchObject({
      phase: 'over',
      error: 'deployment 1 rolled back: rolled back by hand; revision 0 serves: decode keeps 2',
    });
    expect(activeJobs(core.run).map((j) => j.job_num)).toEqual(activeJobs(before.run).map((j) => j.job_num));
  });

  it('refuses what a rollout cannot be asked, saying why', () => {
    const dstack = servingCore(openService(['{name: web, replicas: 2, commands: [v1]}']));
    const rolling = pass(dstack, [{ kind: 'deploy', id: 1, plan: openService(['{name: web, replicas: 2, commands: [v2]}']) }], T0 + 3000).core;
    expect(rolloutControlRefusal(rolling, 'pause', false)).toBe('deployment 1 of pd rolls as dstack does (rollout.coherence: independent): it cannot be paused or rolled back');
    expect(rolloutControlRefusal(rolling, 'rollback', false)).toBe('deployment 1 of pd rolls as dstack does (rollout.coherence: independent): it cannot be paused or rolled back');
    expect(rolloutRefusal(rolling)).toBe('deployment 1 of pd rolls as dstack does (rollout.coherence: independent); resize a group once it ends');
  });
});

describe('a revert: the spec a rollout under way replaces, applied again', () => {
  it('is recognised by its revision and rolls the rollout back, saying so; any other spec is not a revert', () => {
    const before = servingCore(service('serve-v1'));
    const deploying = pass(before, [{ kind: 'deploy', id: 1, plan: service('serve-v2') }], T0 + 3000);
    const starting = play(deploying.core, deploying.effects, T0 + 3000, slow).core;
    expect(starting.service?.rollout?.coherent?.phase).toBe('starting');
    expect(revertOf(starting, service('serve-v1'))).toBe("reverted by an apply of revision 0's spec");
    expect(revertOf(starting, service('serve-v3'))).toBeNull();
    expect(revertOf(before, service('serve-v1'))).toBeNull();
    expect(revertOf(starting, null)).toBeNull();
    const back = pass(starting, [{ kind: 'rollout-control', action: 'rollback', why: "reverted by an apply of revision 0's spec" }], T0 + 5000);
    const { core } = play(back.core, back.effects, T0 + 5000);
    expect(core.service?.rollout?.error).toBe("deployment 1 rolled back: reverted by an apply of revision 0's spec; revision 0 serves");
    expect(activeJobs(core.run).map((j) => j.job_num)).toEqual(activeJobs(before.run).map((j) => j.job_num));
    expect(decodeCommands(core)).toEqual(['serve-v1', 'serve-v1']);
  });
});

