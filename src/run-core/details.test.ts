import { describe, expect, it } from 'vitest';
import { makePlan } from '../../test/helpers/plans';
import { answersTo, openService, pass, play, servingCore, started, T0 } from '../../test/helpers/run-core';
import type { RolloutStatus } from '../contract/run-state';
import { rolloutLine, runDetails } from './details';

/** What the Web UI shows as a run's current details: status, groups, a service's rollout and autoscaling. */

const status = (over: Partial<RolloutStatus>): RolloutStatus => ({
  deployment: 2,
  coherence: 'revision',
  revision: 2,
  from: 1,
  phase: 'canary',
  paused: false,
  canary: { traffic_percent: 20, gate: 'revision 2: 0 errors of 40, p95 12 ms' },
  error: null,
  can_roll_back: false,
  round: { number: 1, of: 2 },
  share_percent: 20,
  held: null,
  synthetic: null,
  ...over,
});

describe("the run's current details", () => {
  it('a rollout in one line: round, phase, share, and the gate only where asked', () => {
    expect(rolloutLine(null)).toBeNull();
    expect(rolloutLine(status({}))).toBe('deployment 2 round 1 of 2: canary, new revision at 20%');
    expect(rolloutLine(status({}), true)).toBe('deployment 2 round 1 of 2: canary, new revision at 20% (gate: revision 2: 0 errors of 40, p95 12 ms)');
    expect(rolloutLine(status({ round: null, phase: 'starting', share_percent: null, paused: true }))).toBe('deployment 2 starting, paused');
    expect(rolloutLine(status({ phase: 'over', error: 'deployment 2 rolled back: asked; revision 1 serves' }))).toBe('deployment 2 over: deployment 2 rolled back: asked; revision 1 serves');
  });

  it("a task: its status and each group's nodes ready", () => {
    const core = started(makePlan('pd', [{ name: 'router', nodes: 1 }, { name: 'prefill', nodes: 2 }]));
    expect(runDetails(core, [])).toBe(['**RUNNING** · 3 of 3 nodes ready', '', '| group | ready / nodes |', '|---|---|', '| router | 1 / 1 |', '| prefill | 2 / 2 |'].join('\n'));
  });

  it("a service: its deployment, the rollout's steps, and each autoscaled group's last verdict", () => {
    const plan = openService(['{name: web, replicas: 1..3, scaling: {metric: rps, target: 10, window: 30s}, commands: [serve]}'], ['rollout: {coherence: revision}']);
    let core = servingCore(plan);
    core = pass(core, [{ kind: 'figures', purpose: 'autoscale', window_s: 30, revisions: [], groups: [{ revision: 0, group: 'web', requests: 450, inflight: 2 }], held: 0, held_total: 0, error: null }], T0 + 5000).core;
    const text = runDetails(core, ['12:00:01 deployment 1 starting']);
    expect(text).toContain('| web | 1 / 1 (1..3) |');
    expect(text).toContain('**Service** · deployment 0 · revision 0 serves · http://gw/services/pd/');
    expect(text).toContain('**Autoscaling**\n- web: 15 rps (target 10 per replica) → 2 wanted');
    expect(text).not.toContain('**Rollout**');
    const deploying = pass(core, [{ kind: 'deploy', id: 1, plan: openService(['{name: web, replicas: 1..3, scaling: {metric: rps, target: 10, window: 30s}, commands: [serve-v2]}'], ['rollout: {coherence: revision}']) }], T0 + 6000);
    const rolled = play(deploying.core, deploying.effects, T0 + 6000, (at, e) => (e.kind === 'read-figures' ? [] : answersTo(at, e))).core;
    expect(runDetails(rolled, ['12:00:01 deployment 1 starting', '12:00:04 deployment 1 shifting'])).toContain(
      '**Rollout**: deployment 1 over: went through\n- 12:00:01 deployment 1 starting\n- 12:00:04 deployment 1 shifting',
    );
  });
});
