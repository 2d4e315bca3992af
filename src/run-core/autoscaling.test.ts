import { describe, expect, it } from 'vitest';
import type { Plan } from '../plan/plan-schema';
import { answersTo, openService, pass, play, servingCore, T0 } from '../../test/helpers/run-core';
import type { Effect } from './effects';
import type { RunEvent } from './events';
import { groupMembers } from './jobs';
import { revisionOf } from './revisions';
import { AUTOSCALE_READ_MS, AUTOSCALE_RETRY_MS, autoscaleDeadline } from './autoscaling';
import { SCALE_FROM_ZERO_HOLD_S, tableOf } from './routing';
import { nextDeadline } from './decide';
import type { RunCore } from './state';

/**
 * The autoscaler over sequences of events, no server: it reads the gateways' figures every
 * AUTOSCALE_READ_MS, one reading at a time; sizes an entry group on its own traffic and a group behind
 * the entry on the service's; grows once its size is scale_up_delay old and shrinks once it is
 * scale_down_delay old, within the range; mid-rollout its resize is the new revision's target.
 */

const web = (scaling: string, commands = 'serve'): Plan =>
  openService([`{name: web, replicas: 1..4, scaling: {${scaling}}, commands: [${commands}]}`], ['rollout: {coherence: revision}']);

/** The figures the gateways would answer: `rows` per group (requests over the window, in flight now). */
const figures = (window_s: number, rows: Array<{ group: string; requests: number; inflight?: number; revision?: number }>, held = { now: 0, total: 0 }): Extract<RunEvent, { kind: 'figures' }> => ({
  kind: 'figures',
  purpose: 'autoscale',
  window_s,
  revisions: [],
  groups: rows.map((r) => ({ revision: r.revision ?? 0, group: r.group, requests: r.requests, inflight: r.inflight ?? 0 })),
  held: held.now,
  held_total: held.total,
  error: null,
});

const reads = (effects: Effect[]) => effects.flatMap((e) => (e.kind === 'read-figures' && e.purpose === 'autoscale' ? [e.window_s] : []));
const size = (core: RunCore, group = 0) => groupMembers(core.run.jobs, group).length;

/** A service serving, the readings asked so far answered with no traffic at T0 + 5 s (its groups' sizes first seen then); the next reading due 2 s after. */
function started(plan: Plan): RunCore {
  const first = pass(servingCore(plan), [figures(30, [])], T0 + 5000).core;
  return pass(first, [figures(30, [])], T0 + 5001).core;
}

/** One reading answered with `event`, at `now`, and what follows played out as the shell and nodes would (every other reading left unanswered). */
function readAndPlay(core: RunCore, event: RunEvent, now: number) {
  const step = pass(core, [event], now);
  return play(step.core, step.effects, now, (at, e) => (e.kind === 'read-figures' ? [] : answersTo(at, e)));
}

describe('the autoscaler', () => {
  it('reads the figures every 2 s, one reading at a time, and says when the loop must look again', () => {
    const core = started(web('metric: rps, target: 10, window: 30s'));
    expect(autoscaleDeadline(core)).toBe(T0 + 5000 + AUTOSCALE_READ_MS);
    const first = pass(core, [], T0 + 10_000);
    expect(reads(first.effects)).toEqual([30]);
    expect(autoscaleDeadline(first.core)).toBeNull();
    // Not answered: no second reading.
    expect(reads(pass(first.core, [], T0 + 15_000).effects)).toEqual([]);
    const answered = pass(first.core, [figures(30, [{ group: 'web', requests: 30 }])], T0 + 10_500);
    expect(reads(answered.effects)).toEqual([]);
    expect(autoscaleDeadline(answered.core)).toBe(T0 + 10_000 + AUTOSCALE_READ_MS);
    expect(nextDeadline(answered.core)).toBeLessThanOrEqual(T0 + 10_000 + AUTOSCALE_READ_MS);
    expect(reads(pass(answered.core, [], T0 + 12_000).effects)).toEqual([30]);
    expect(answered.core.service?.autoscale.last[0]).toEqual({ value: 1, wanted: 1, at_ms: T0 + 10_500 });
  });

  it('grows an entry group on its own traffic once its size is scale_up_delay old, up to its range', () => {
    let core = started(web('metric: rps, target: 10, window: 30s, scale_up_delay: 10s, scale_down_delay: 60s'));
    core = pass(core, [], T0 + 10_000).core;
    // 40 rps over the window: 4 wanted; the size 1 was first seen at 5 s, so not before 15 s.
    const seen = readAndPlay(core, figures(30, [{ group: 'web', requests: 1200 }]), T0 + 10_100).core;
    expect(size(seen)).toBe(1);
    expect(seen.service?.autoscale.last[0]).toMatchObject({ value: 40, wanted: 4 });
    const later = pass(seen, [], T0 + 15_200).core;
    const grown = readAndPlay(later, figures(30, [{ group: 'web', requests: 1200 }]), T0 + 15_300).core;
    expect(size(grown)).toBe(4);
    expect(grown.live?.resizes).toEqual([]);
    // 90 rps would want 9: never past the range's 4.
    const more = readAndPlay(pass(grown, [], T0 + 30_000).core, figures(30, [{ group: 'web', requests: 2700 }]), T0 + 30_100).core;
    expect(size(more)).toBe(4);
    expect(more.service?.autoscale.last[0]).toMatchObject({ value: 90, wanted: 4 });
  });

  it('shrinks once its size is scale_down_delay old, draining the replicas it removes', () => {
    let core = started(web('metric: rps, target: 10, window: 30s, scale_up_delay: 0s, scale_down_delay: 20s'));
    core = pass(core, [], T0 + 10_000).core;
    core = readAndPlay(core, figures(30, [{ group: 'web', requests: 900 }]), T0 + 10_100).core;
    expect(size(core)).toBe(3);
    // The load is gone: 1 wanted; the size 3 began at 10.1 s (first seen on the next reading).
    core = readAndPlay(pass(core, [], T0 + 12_200).core, figures(30, [{ group: 'web', requests: 0 }]), T0 + 12_300).core;
    expect(size(core)).toBe(3);
    core = readAndPlay(pass(core, [], T0 + 25_000).core, figures(30, [{ group: 'web', requests: 0 }]), T0 + 25_100).core;
    expect(size(core)).toBe(3);
    const step = pass(pass(core, [], T0 + 33_000).core, [figures(30, [{ group: 'web', requests: 0 }])], T0 + 33_100);
    const { core: shrunk, seen } = play(step.core, step.effects, T0 + 33_100, (at, e) => (e.kind === 'read-figures' ? [] : answersTo(at, e)));
    expect(size(shrunk)).toBe(1);
    expect(seen.filter(({ effect }) => effect.kind === 'drain')).toHaveLength(1);
  });

  it('sizes a group behind the entry on the service traffic through its entry group; concurrency counts requests in flight', () => {
    const plan = openService([
      '{name: router, replicas: 1, router: {type: smg}, depends_on: [decode], commands: [route]}',
      '{name: decode, replicas: 1..3, scaling: {metric: rps, target: 5, window: 30s, scale_up_delay: 0s}, commands: [serve]}',
    ]);
    let core = pass(started(plan), [], T0 + 10_000).core;
    core = readAndPlay(core, figures(30, [{ group: 'router', requests: 300 }]), T0 + 10_100).core;
    expect(size(core, 1)).toBe(2);

    let busy = pass(started(web('metric: concurrency, target: 2, window: 30s, scale_up_delay: 0s')), [], T0 + 10_000).core;
    busy = readAndPlay(busy, figures(30, [{ group: 'web', requests: 10, inflight: 5 }]), T0 + 10_100).core;
    expect(size(busy)).toBe(3);
  });

  it('a failed reading is kept as the problem and read again 10 s later (2 s once one is read); nothing resized', () => {
    const core = pass(started(web('metric: rps, target: 10, window: 30s, scale_up_delay: 0s')), [], T0 + 10_000).core;
    const failed = pass(core, [{ ...figures(30, []), error: 'no gateway answered' }], T0 + 10_100).core;
    expect(failed.service?.autoscale).toMatchObject({ reading: [], problem: "the gateways' figures could not be read: no gateway answered" });
    expect(size(failed)).toBe(1);
    expect(autoscaleDeadline(failed)).toBe(T0 + 10_000 + AUTOSCALE_RETRY_MS);
    expect(reads(pass(failed, [], T0 + 12_000).effects)).toEqual([]);
    const again = pass(failed, [], T0 + 20_000);
    expect(reads(again.effects)).toEqual([30]);
    const read = pass(again.core, [figures(30, [{ group: 'web', requests: 30 }])], T0 + 20_100).core;
    expect(read.service?.autoscale.problem).toBeNull();
    expect(autoscaleDeadline(read)).toBe(T0 + 20_000 + AUTOSCALE_READ_MS);
  });

  it('in the middle of a rollout by revision, its resize is the new revision\'s target', () => {
    let core = pass(started(web('metric: rps, target: 10, window: 30s, scale_up_delay: 0s')), [], T0 + 10_000).core;
    // The rollout's new replica runs but is not READY yet: the rollout is still starting.
    const deploying = pass(core, [figures(30, [{ group: 'web', requests: 30 }]), { kind: 'deploy', id: 1, plan: web('metric: rps, target: 10, window: 30s, scale_up_delay: 0s', 'serve-v2') }], T0 + 10_100);
    core = play(deploying.core, deploying.effects, T0 + 10_100, (at, e) => (e.kind === 'read-figures' || e.kind === 'new-attempts' ? [] : answersTo(at, e))).core;
    expect(core.service?.rollout?.coherent?.phase).toBe('starting');
    const spike = pass(pass(core, [], T0 + 12_200).core, [figures(30, [{ group: 'web', requests: 900 }])], T0 + 12_300).core;
    expect(spike.service?.rollout?.coherent?.counts).toEqual([3]);
    expect(spike.live?.resizes.find((r) => r.phase === 'with-rollout')).toMatchObject({ group: 0, with_deployment: 1 });
    expect(groupMembers(spike.run.jobs, 0).filter((j) => revisionOf(spike, j.job_num) === 0)).toHaveLength(1);
  });
});

describe('a group that scales to zero', () => {
  const zero = (scaling: string) => openService([`{name: web, replicas: 0..3, scaling: {${scaling}}, commands: [serve]}`]);

  it('serves with no replica (the gateways hold its requests), and a held request wakes it at once, whatever scale_up_delay says', () => {
    const plan = zero('metric: rps, target: 10, window: 30s, scale_up_delay: 5m, scale_down_delay: 10s');
    const core = started(plan);
    expect(core.run.status).toBe('RUNNING');
    expect(core.submission.ending).toBeNull();
    expect(tableOf(core)).toMatchObject({ hold_s: SCALE_FROM_ZERO_HOLD_S, revisions: [{ groups: [{ name: 'web', replicas: [] }] }] });
    // No request: none wanted, and not done for having no job.
    let c = readAndPlay(pass(core, [], T0 + 10_000).core, figures(30, []), T0 + 10_100).core;
    expect(size(c)).toBe(0);
    expect(c.submission.ending).toBeNull();
    // One request held now: one replica at once, though its size was first seen 5 s ago and scale_up_delay is 5 min.
    c = readAndPlay(pass(c, [], T0 + 12_000).core, figures(30, [], { now: 1, total: 1 }), T0 + 12_100).core;
    expect(size(c)).toBe(1);
    expect(c.service?.autoscale.last[0]).toEqual({ value: 0, wanted: 1, at_ms: T0 + 12_100, held: 1 });
    expect(tableOf(c).revisions[0]?.groups[0]?.replicas).toHaveLength(1);
  });

  it("holds requests for the group's own `scaling.hold` where it sets one (the longest of the service's groups that scale from zero)", () => {
    const plan = openService([
      '{name: a, replicas: 0..2, scaling: {metric: rps, target: 10, hold: 10m}, commands: [a]}',
      '{name: b, replicas: 0..2, scaling: {metric: rps, target: 10, hold: 30s}, commands: [b]}',
    ]);
    expect(plan.groups.map((g) => g.scaling?.hold_s)).toEqual([600, 30]);
    expect(tableOf(started(plan)).hold_s).toBe(600);
  });

  it('goes back to zero, drained, once no request came for scale_down_delay, and a request held later wakes it again', () => {
    let c = started(zero('metric: rps, target: 10, window: 30s, scale_down_delay: 10s'));
    c = readAndPlay(pass(c, [], T0 + 10_000).core, figures(30, [], { now: 3, total: 3 }), T0 + 10_100).core;
    expect(size(c)).toBe(1);
    // Its traffic (3 requests in the window) keeps one; gone from the window, none wanted, and once its size is the delay old none left.
    c = readAndPlay(pass(c, [], T0 + 20_000).core, figures(30, [{ group: 'web', requests: 3 }], { now: 0, total: 3 }), T0 + 20_100).core;
    expect(size(c)).toBe(1);
    c = readAndPlay(pass(c, [], T0 + 25_000).core, figures(30, []), T0 + 25_100).core;
    expect(size(c)).toBe(1);
    const idle = readAndPlay(pass(c, [], T0 + 31_000).core, figures(30, []), T0 + 31_100);
    c = idle.core;
    expect(size(c)).toBe(0);
    expect(idle.seen.some(({ effect }) => effect.kind === 'drain')).toBe(true);
    expect(c.run.status).toBe('RUNNING');
    expect(c.submission.ending).toBeNull();
    c = readAndPlay(pass(c, [], T0 + 60_000).core, figures(30, [], { now: 1, total: 1 }), T0 + 60_100).core;
    expect(size(c)).toBe(1);
  });

  it('keeps the replica it woke while requests are still held, though none was answered yet (a replica slower to start than scale_down_delay)', () => {
    let c = started(zero('metric: rps, target: 10, window: 30s, scale_down_delay: 5s'));
    c = readAndPlay(pass(c, [], T0 + 10_000).core, figures(30, [], { now: 2, total: 2 }), T0 + 10_100).core;
    expect(size(c)).toBe(1);
    // 20 s on, still held and nothing answered: one wanted, kept.
    c = readAndPlay(pass(c, [], T0 + 12_000).core, figures(30, [], { now: 2, total: 2 }), T0 + 12_100).core;
    c = readAndPlay(pass(c, [], T0 + 30_000).core, figures(30, [], { now: 2, total: 2 }), T0 + 30_100).core;
    expect(c.service?.autoscale.last[0]).toMatchObject({ value: 0, wanted: 1 });
    expect(size(c)).toBe(1);
  });

  it('is woken only where the gateways hold requests: a group that still has a replica is sized on its traffic alone', () => {
    const plan = openService([
      '{name: a, replicas: 1..3, scaling: {metric: rps, target: 10, window: 30s, scale_up_delay: 0s}, commands: [a]}',
      '{name: b, replicas: 0..3, scaling: {metric: rps, target: 10, window: 30s}, commands: [b]}',
    ]);
    expect(plan.service?.entry).toEqual([0, 1]);
    // a serves every request: nothing held, b stays at zero.
    let c = readAndPlay(pass(started(plan), [], T0 + 10_000).core, figures(30, [{ group: 'a', requests: 30 }]), T0 + 10_100).core;
    expect([size(c, 0), size(c, 1)]).toEqual([1, 0]);
    c = readAndPlay(pass(c, [], T0 + 12_000).core, figures(30, [{ group: 'a', requests: 30 }], { now: 2, total: 2 }), T0 + 12_100).core;
    expect([size(c, 0), size(c, 1)]).toEqual([1, 1]);
  });
});
