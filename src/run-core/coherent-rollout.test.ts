import { describe, expect, it } from 'vitest';
import type { Plan } from '../plan/plan-schema';
import { answersTo, exited, jobs, openService, pass, play, provisioned, ready, running, servingCore, T0 } from '../../test/helpers/run-core';
import type { Effect } from './effects';
import type { RunEvent } from './events';
import { activeJobs, groupMembers } from './jobs';
import { nextDeadline } from './decide';
import { booksToStartWith } from './peers';
import { withoutAttemptsToStart } from './live';
import { rolloutDeadline } from './coherent-rollout';
import { rolloutControlRefusal } from './rollout-control';
import { revisionOf } from './revisions';
import type { RunCore } from './state';

/**
 * A rollout that keeps revisions apart (`rollout.coherence: revision`) over sequences of events, no
 * server: the new revision starts whole in depends_on order, each replica seeing only its own
 * revision's peers; the gateways move to it in one table; only then is the old one drained and
 * stopped, its router first. A new replica that cannot start rolls the deployment back with the old
 * revision serving all along.
 */

const ROUTER = 0;
const DECODE = 1;

function service(decode: string): Plan {
  return openService(
    ['{name: router, replicas: 1, router: {type: smg}, depends_on: [decode], commands: [route]}', `{name: decode, replicas: 2, commands: [${decode}]}`],
    ['rollout: {coherence: revision}'],
  );
}

const serving = (plan = service('serve-v1')): RunCore => servingCore(plan);

const tables = (seen: Array<{ effect: Effect }>) => seen.flatMap(({ effect }) => (effect.kind === 'push-routes' ? [effect.table] : []));
const readyUrls = (table: ReturnType<typeof tables>[number], revision: number, group: string) =>
  table.revisions.find((r) => r.number === revision)?.groups.find((g) => g.name === group)?.replicas.map((r) => r.url) ?? [];
const commandsOf = (core: RunCore, group: number) =>
  groupMembers(core.run.jobs, group).map((job) => (core.live?.added_plans[job.job_num] ?? core.plan.jobs[job.job_num])?.commands[0]);

describe('a coherent rollout (rollout.coherence: revision)', () => {
  it('starts the new revision whole in depends_on order, moves the traffic in one table, then retires the old one, router first', () => {
    const before = serving();
    const oldRanks = activeJobs(before.run).map((j) => j.job_num);
    const hashBefore = before.plan.service?.revision;
    const step = pass(before, [{ kind: 'deploy', id: 3, plan: service('serve-v2') }], T0 + 3000);
    // decode first (the router depends on it), both its new replicas at once; nothing old touched.
    const asked = step.effects.flatMap((e) => (e.kind === 'new-attempts' ? [e] : []));
    expect(asked.map((e) => [e.group, e.jobs.length])).toEqual([[DECODE, 2]]);
    expect(step.effects.some((e) => e.kind === 'drain' || e.kind === 'release')).toBe(false);

    const { core, seen } = play(step.core, step.effects, T0 + 3000);
    expect(core.service?.rollout).toMatchObject({ id: 3, number: 1, over: true, error: null });
    // Only the new revision is left, with the new commands, each replica told its revision's hash.
    const left = activeJobs(core.run);
    expect(left.map((j) => revisionOf(core, j.job_num))).toEqual([1, 1, 1]);
    expect(left.some((j) => oldRanks.includes(j.job_num))).toBe(false);
    expect(commandsOf(core, DECODE)).toEqual(['serve-v2', 'serve-v2']);
    const hashAfter = core.plan.service?.revision;
    expect(hashAfter).not.toBe(hashBefore);
    expect(left.map((j) => core.live?.added_plans[j.job_num]?.revision)).toEqual([hashAfter, hashAfter, hashAfter]);

    // The new router was asked for only once both new decodes had run READY.
    const routerAsked = seen.findIndex(({ effect }) => effect.kind === 'new-attempts' && effect.group === ROUTER);
    expect(routerAsked).toBeGreaterThan(0);
    const atRouter = seen[routerAsked]!.core;
    expect(groupMembers(atRouter.run.jobs, DECODE).filter((j) => revisionOf(atRouter, j.job_num) === 1 && j.status === 'READY')).toHaveLength(2);

    // Tables: revision 0 current while 1 starts (its own pool), then 1 current in one push, then 0 gone.
    const pushed = tables(seen);
    const firstOnOne = pushed.findIndex((t) => t.current_revision === 1);
    expect(firstOnOne).toBeGreaterThan(0);
    for (const t of pushed.slice(0, firstOnOne)) {
      expect(t.current_revision).toBe(0);
      expect(readyUrls(t, 0, 'router')).toHaveLength(1);
      expect(readyUrls(t, 0, 'decode')).toHaveLength(2);
    }
    const switched = pushed[firstOnOne]!;
    expect(switched.revisions.map((r) => r.number)).toEqual([0, 1]);
    expect(readyUrls(switched, 1, 'router')).toHaveLength(1);
    expect(readyUrls(switched, 1, 'decode')).toHaveLength(2);
    expect(pushed.at(-1)!.revisions.map((r) => r.number)).toEqual([1]);

    // No old replica drained before the gateways had the new revision current; the router's drained first.
    const drains = seen.flatMap(({ core: at, effect }) => (effect.kind === 'drain' ? [{ at, effect }] : []));
    expect(drains.length).toBeGreaterThanOrEqual(2);
    for (const { at } of drains) expect(JSON.parse(at.service!.delivered_key!)).toMatchObject({ current_revision: 1 });
    const routerUrl = before.run.jobs[0]!.instance!.internal_ip;
    expect(drains[0]!.effect.urls).toEqual([`http://${routerUrl}:8000`]);
  });

  it("gives each revision's replicas only their own revision's peers: in the book, DSTACK_* and ${{ }} values", () => {
    const before = serving();
    const step = pass(before, [{ kind: 'deploy', id: 3, plan: service('serve-v2') }], T0 + 3000);
    // Answer the new decodes' attempts, then look at the book the new ones start with.
    const asked = step.effects.find((e) => e.kind === 'new-attempts');
    if (asked?.kind !== 'new-attempts') throw new Error('no new attempts');
    const placed = pass(step.core, [jobs(step.core, asked.jobs.map((j) => provisioned(j.job_num, j.attempt)))], T0 + 3100).core;
    const newDecodes = asked.jobs.map((j) => placed.run.jobs[j.job_num]!);
    const { starts } = booksToStartWith(placed, [...newDecodes, placed.run.jobs[1]!]);
    expect(starts?.map((s) => s.jobs.map((j) => j.job_num))).toEqual([newDecodes.map((j) => j.job_num), [1]]);
    const [fresh, old] = starts!;
    // Old ranks are out of the new ones' view (as removed ranks are), and the other way round.
    expect(fresh!.book.removed).toEqual([0, 1, 2]);
    expect(old!.book.removed).toEqual(newDecodes.map((j) => j.job_num));
    expect(fresh!.book.peers?.revision).toBe(1);
    expect(fresh!.book.peers?.groups.flatMap((g) => g.nodes.map((n) => n.rank))).toEqual(newDecodes.map((j) => j.job_num));
    expect(old!.book.peers?.groups.flatMap((g) => g.nodes.map((n) => n.rank))).toEqual([0, 1, 2]);

    // Every publication gives each node its own revision's view.
    const { seen } = play(placed, [], T0 + 3200);
    const later = play(pass(placed, [jobs(placed, newDecodes.flatMap((j) => [running(j.job_num, j.attempt), ready(j.job_num, j.attempt)]))], T0 + 3300).core, [], T0 + 3300);
    for (const { effect } of [...seen, ...later.seen]) {
      if (effect.kind !== 'publish-peers') continue;
      for (const view of effect.books) {
        const book = JSON.parse(view.json) as { revision?: number; groups: Array<{ nodes: Array<{ rank: number }> }> };
        const ranks = book.groups.flatMap((g) => g.nodes.map((n) => n.rank));
        for (const job of view.jobs) expect(ranks).toContain(job.job_num);
        expect(new Set(ranks.map((n) => revisionOf(placed, n)))).toEqual(new Set([book.revision]));
      }
    }
  });

  it('rolls back when a new replica cannot start: the old revision serves all along, the new one is stopped, the plan is the old one', () => {
    const before = serving();
    const step = pass(before, [{ kind: 'deploy', id: 4, plan: service('serve-broken') }], T0 + 3000);
    let failedOne = false;
    const failing = (at: RunCore, e: Effect): RunEvent[] => {
      if (e.kind !== 'new-attempts' || failedOne) return answersTo(at, e);
      failedOne = true;
      // The first new decode starts, then exits before it is READY.
      const [first, ...rest] = e.jobs;
      return [
        jobs(at, e.jobs.map((j) => provisioned(j.job_num, j.attempt))),
        jobs(at, [running(first!.job_num, first!.attempt), exited(first!.job_num, 1, first!.attempt), ...rest.map((j) => running(j.job_num, j.attempt))]),
      ];
    };
    const { core, seen } = play(step.core, step.effects, T0 + 3000, failing);
    const rollout = core.service?.rollout;
    expect(rollout?.over).toBe(true);
    expect(rollout?.error).toMatch(/^deployment 1 rolled back: decode\/\d \(job \d+\) did not start: .*; revision 0 serves$/);
    // The old replicas were never drained, released or restarted; the table never moved off revision 0.
    const oldRanks = activeJobs(before.run).map((j) => j.job_num);
    expect(activeJobs(core.run).map((j) => j.job_num)).toEqual(oldRanks);
    expect(activeJobs(core.run).every((j) => j.status === 'READY' && j.restarts === 0)).toBe(true);
    expect(tables(seen).every((t) => t.current_revision === 0)).toBe(true);
    for (const { effect } of seen) {
      if (effect.kind === 'release') expect(effect.jobs.some((j) => oldRanks.includes(j.job_num))).toBe(false);
    }
    expect(core.plan.groups[DECODE]?.commands).toEqual(['serve-v1']);
    expect(core.plan.service?.revision).toBe(before.plan.service?.revision);
    expect(tables(seen).at(-1)!.revisions.map((r) => r.number)).toEqual([0]);
  });

  it('rolls back a new revision not READY by the progress deadline: its growth given up, the old one untouched', () => {
    const before = serving();
    const step = pass(before, [{ kind: 'deploy', id: 6, plan: service('serve-slow') }], T0 + 3000);
    // The new decodes run but never pass their probe.
    const slow = (at: RunCore, e: Effect): RunEvent[] =>
      e.kind === 'new-attempts' ? [jobs(at, e.jobs.map((j) => provisioned(j.job_num, j.attempt))), jobs(at, e.jobs.map((j) => running(j.job_num, j.attempt)))] : answersTo(at, e);
    const waiting = play(step.core, step.effects, T0 + 3000, slow).core;
    expect(waiting.service?.rollout).toMatchObject({ over: false, coherent: { phase: 'starting' } });
    const deadline = waiting.service!.rollout!.coherent!.deadline_ms;
    expect(deadline).toBe(T0 + 3000 + 600_000);
    expect(rolloutDeadline(waiting)).toBe(deadline);
    expect(nextDeadline(waiting)).toBeLessThanOrEqual(deadline);
    const late = pass(waiting, [], deadline);
    const { core } = play(late.core, late.effects, deadline);
    expect(core.service?.rollout?.error).toBe('deployment 1 rolled back: the new revision was not READY within the progress deadline (600 s); revision 0 serves');
    expect(activeJobs(core.run).map((j) => j.job_num)).toEqual(activeJobs(before.run).map((j) => j.job_num));
    expect(core.plan.groups[DECODE]?.commands).toEqual(['serve-v1']);
  });

  it('a change of replicas only keeps the revision: resized in place, the new replica of the serving revision', () => {
    const before = serving(
      openService(
        ['{name: router, replicas: 1, router: {type: smg}, depends_on: [decode], commands: [route]}', '{name: decode, replicas: 2..3, scaling: {metric: rps, target: 5}, commands: [serve-v1]}'],
        ['rollout: {coherence: revision}'],
      ),
    );
    const bigger = openService(
      ['{name: router, replicas: 1, router: {type: smg}, depends_on: [decode], commands: [route]}', '{name: decode, replicas: 3, commands: [serve-v1]}'],
      ['rollout: {coherence: revision}'],
    );
    const step = pass(before, [{ kind: 'deploy', id: 5, plan: bigger }], T0 + 3000);
    const { core } = play(step.core, step.effects, T0 + 3000);
    expect(core.service?.rollout).toMatchObject({ over: true, error: null, coherent: null });
    expect(activeJobs(core.run).map((j) => revisionOf(core, j.job_num))).toEqual([0, 0, 0, 0]);
    expect(core.service?.current_revision).toBe(0);
  });
});

describe('a coherent rollout with a canary', () => {
  const canaried = (decode: string) =>
    openService(
      ['{name: router, replicas: 1, router: {type: smg}, depends_on: [decode], commands: [route]}', `{name: decode, replicas: 2, commands: [${decode}]}`],
      ['rollout: {coherence: revision, canary: {traffic: 10, soak: 5s}}'],
    );
  /** The canary's figures as the gateways would give them: `errors` of every 20 of its answers, none of the old's. */
  const figures = (errors: number) => (e: Effect): RunEvent[] =>
    e.kind === 'read-figures'
      ? [{ kind: 'figures', purpose: 'canary', window_s: e.window_s, revisions: [{ revision: 0, requests: 180, errors: 0, p95_ms: 40 }, { revision: 1, requests: 20, errors, p95_ms: 45 }], groups: [], held: 0, held_total: 0, error: null }]
      : [];
  /** Passes half a second apart, every effect answered (read-figures by `answer`); what was seen, with when. */
  function run(core: RunCore, effects: Effect[], from: number, answer: (e: Effect) => RunEvent[]) {
    const seen: Array<{ at: number; core: RunCore; effect: Effect }> = [];
    let state = core;
    let pending = effects;
    let now = from;
    for (let i = 0; i < 120 && !(state.service?.rollout?.over ?? true); i++) {
      seen.push(...pending.map((effect) => ({ at: now, core: state, effect })));
      const events = pending.flatMap((e) => (e.kind === 'read-figures' ? answer(e) : answersTo(state, e)));
      now += 500;
      const step = pass(state, events, now);
      state = step.core;
      pending = step.effects;
    }
    return { core: state, seen };
  }

  describe('a new replica that fails after READY, past what its group heals', () => {
    const healing = (decode: string, onFailure: string) =>
      openService(
        ['{name: router, replicas: 1, router: {type: smg}, depends_on: [decode], commands: [route]}', `{name: decode, replicas: 2, on_failure: ${onFailure}, commands: [${decode}]}`],
        ['rollout: {coherence: revision, canary: {traffic: 10, soak: 5s}}'],
      );
    /** Each canary reading answered with healthy figures; while `crashes` are left, a new decode exits 1 beside it. */
    const crashing = (crashes: number) => {
      let left = crashes;
      return (at: RunCore, e: Effect): RunEvent[] => {
        if (e.kind !== 'read-figures') return answersTo(at, e);
        const victim = activeJobs(at.run).find((j) => j.group_index === DECODE && revisionOf(at, j.job_num) === 1 && j.status === 'READY');
        if (left === 0 || !victim) return figures(0)(e);
        left -= 1;
        return [jobs(at, [exited(victim.job_num, 1, victim.attempt)]), ...figures(0)(e)];
      };
    };
    /** Passes half a second apart; as the workflow does, a new attempt that runs is no longer waiting to start. */
    function stepped(core: RunCore, effects: Effect[], from: number, answer: (at: RunCore, e: Effect) => RunEvent[]) {
      let state = core;
      let pending = effects;
      let now = from;
      for (let i = 0; i < 120 && !(state.service?.rollout?.over ?? true) && state.submission.ending === null; i++) {
        const events = pending.flatMap((e) => answer(state, e));
        now += 500;
        const step = pass(state, events, now);
        state = withoutAttemptsToStart(step.core, activeJobs(step.core.run).flatMap((j) => (j.running_at !== null ? [j.job_num] : [])));
        pending = step.effects;
      }
      return state;
    }

    it('fail-run (the default): the rollout rolls back, the service goes on, the old revision untouched', () => {
      const before = serving(healing('serve-v1', 'fail-run'));
      const step = pass(before, [{ kind: 'deploy', id: 8, plan: healing('serve-v2', 'fail-run') }], T0 + 3000);
      const core = stepped(step.core, step.effects, T0 + 3000, crashing(1));
      expect(core.submission.ending).toBeNull();
      expect(core.service?.rollout?.error).toMatch(/^deployment 1 rolled back: revision 1's job \d+ \(decode\/\d\) on local failed: CONTAINER_EXITED_WITH_ERROR: exited with code 1; revision 0 serves$/);
      const oldRanks = activeJobs(before.run).map((j) => j.job_num);
      expect(activeJobs(core.run).map((j) => j.job_num)).toEqual(oldRanks);
      expect(activeJobs(core.run).every((j) => j.status === 'READY' && j.restarts === 0)).toBe(true);
    });

    it('another new replica failing while the rollout is held (rollback: manual) only goes; rolled back by hand, the service never fails', () => {
      const plan = (decode: string, rollback: string) =>
        openService(
          ['{name: router, replicas: 1, router: {type: smg}, depends_on: [decode], commands: [route]}', `{name: decode, replicas: 2, commands: [${decode}]}`],
          [`rollout: {coherence: revision, canary: {traffic: 10, soak: 5s}, rollback: ${rollback}}`],
        );
      const newDecode = (at: RunCore) => activeJobs(at.run).find((j) => j.group_index === DECODE && revisionOf(at, j.job_num) === 1 && j.status === 'READY');
      for (const rollback of ['manual']) {
        const before = serving(plan('serve-v1', rollback));
        const step = pass(before, [{ kind: 'deploy', id: 8, plan: plan('serve-v2', rollback) }], T0 + 3000);
        const crashed = stepped(step.core, step.effects, T0 + 3000, crashing(1));
        const firstCause = crashed.service?.rollout?.coherent?.cause;
        expect(firstCause).toMatch(/^revision 1's job \d+ \(decode\/\d\)/);
        const second = newDecode(crashed);
        expect(second, rollback).toBeDefined();
        let at = pass(crashed, [jobs(crashed, [exited(second!.job_num, 1, second!.attempt)])], T0 + 200_000);
        expect(at.core.submission.ending).toBeNull();
        expect(at.core.service?.rollout?.coherent?.cause).toBe(firstCause);
        if (rollback === 'manual') at = pass(at.core, [...at.effects.flatMap((e) => answersTo(at.core, e)), { kind: 'rollout-control', action: 'rollback' }], T0 + 201_000);
        const core = stepped(at.core, at.effects, T0 + 202_000, answersTo);
        expect(core.submission.ending).toBeNull();
        expect(core.service?.rollout).toMatchObject({ over: true });
        expect(activeJobs(core.run).every((j) => revisionOf(core, j.job_num) === 0 && j.status === 'READY')).toBe(true);
      }
    });

    it('rollback: auto — a second new replica failing while the rollout rolls back only goes: the old revision serves, the service never fails', () => {
      const before = serving(healing('serve-v1', 'fail-run'));
      const step = pass(before, [{ kind: 'deploy', id: 8, plan: healing('serve-v2', 'fail-run') }], T0 + 3000);
      // Until the first crash turns it back: stepped by hand, one pass at a time, stopping once it rolls back with a new decode still READY.
      let state = step.core;
      let pending = step.effects;
      let now = T0 + 3000;
      const answer = crashing(1);
      const newReady = (at: RunCore) => activeJobs(at.run).filter((j) => j.group_index === DECODE && revisionOf(at, j.job_num) === 1 && j.status === 'READY');
      for (let i = 0; i < 120 && !(state.service?.rollout?.coherent?.phase === 'rolling-back' && newReady(state).length > 0); i++) {
        const events = pending.flatMap((e) => answer(state, e));
        now += 500;
        const next = pass(state, events, now);
        state = withoutAttemptsToStart(next.core, activeJobs(next.core.run).flatMap((j) => (j.running_at !== null ? [j.job_num] : [])));
        pending = next.effects;
      }
      expect(state.service?.rollout?.coherent?.phase).toBe('rolling-back');
      const firstCause = state.service?.rollout?.coherent?.cause;
      expect(firstCause).toMatch(/^revision 1's job \d+ \(decode\/\d\)/);
      const second = newReady(state)[0];
      expect(second).toBeDefined();
      if (!second) return;
      // The second crash, in the middle of the rollback: with the answers to what the last pass asked.
      const crash = pass(state, [...pending.flatMap((e) => answersTo(state, e)), jobs(state, [exited(second.job_num, 1, second.attempt)])], now + 500);
      expect(crash.core.submission.ending).toBeNull();
      expect(crash.core.service?.rollout?.coherent?.cause).toBe(firstCause);
      const core = stepped(crash.core, crash.effects, now + 500, answersTo);
      expect(core.submission.ending).toBeNull();
      expect(core.service?.rollout).toMatchObject({ over: true });
      expect(core.service?.rollout?.error).toMatch(/^deployment 1 rolled back: revision 1's job \d+ \(decode\/\d\) on local failed: CONTAINER_EXITED_WITH_ERROR: exited with code 1; revision 0 serves$/);
      const oldRanks = activeJobs(before.run).map((j) => j.job_num);
      expect(activeJobs(core.run).map((j) => j.job_num)).toEqual(oldRanks);
      expect(activeJobs(core.run).every((j) => revisionOf(core, j.job_num) === 0 && j.status === 'READY' && j.restarts === 0)).toBe(true);
    });

    it('restart-node: a failure within its budget is healed and the rollout goes through; past it, rolled back naming the budget', () => {
      const policy = '{action: restart-node, max_restarts: 1}';
      const before = serving(healing('serve-v1', policy));
      const once = pass(before, [{ kind: 'deploy', id: 8, plan: healing('serve-v2', policy) }], T0 + 3000);
      const healed = stepped(once.core, once.effects, T0 + 3000, crashing(1));
      expect(healed.service?.rollout).toMatchObject({ over: true, error: null });
      expect(activeJobs(healed.run).every((j) => revisionOf(healed, j.job_num) === 1)).toBe(true);

      const twice = pass(before, [{ kind: 'deploy', id: 8, plan: healing('serve-v2', policy) }], T0 + 3000);
      const back = stepped(twice.core, twice.effects, T0 + 3000, crashing(2));
      expect(back.submission.ending).toBeNull();
      expect(back.service?.rollout?.error).toMatch(/^deployment 1 rolled back: revision 1's job \d+ \(decode\/\d\) on local failed: .* \(group decode's restart budget spent: max_restarts 1\); revision 0 serves$/);
      expect(activeJobs(back.run).every((j) => revisionOf(back, j.job_num) === 0 && j.status === 'READY')).toBe(true);
    });
  });

  it('gives the new revision its share once whole, reads its figures over the soak, then moves all traffic and retires the old', () => {
    const before = serving(canaried('serve-v1'));
    const step = pass(before, [{ kind: 'deploy', id: 8, plan: canaried('serve-v2') }], T0 + 3000);
    const { core, seen } = run(step.core, step.effects, T0 + 3000, figures(0));
    expect(core.service?.rollout).toMatchObject({ over: true, error: null });
    expect(activeJobs(core.run).map((j) => revisionOf(core, j.job_num))).toEqual([1, 1, 1]);
    const pushed = tables(seen);
    const canaryTable = pushed.findIndex((t) => t.revisions.some((r) => r.number === 1 && r.traffic === 10));
    expect(canaryTable).toBeGreaterThanOrEqual(0);
    expect(pushed[canaryTable]!.current_revision).toBe(0);
    expect(readyUrls(pushed[canaryTable]!, 1, 'router')).toHaveLength(1);
    // Read about once a second from when the gateways had the share, the last after the soak; then current.
    const reads = seen.filter(({ effect }) => effect.kind === 'read-figures');
    expect(reads.length).toBeGreaterThanOrEqual(5);
    const switched = seen.find(({ effect }) => effect.kind === 'push-routes' && effect.table.current_revision === 1)!;
    const since = reads[0]!.core.service!.rollout!.coherent!.canary.since_ms!;
    expect(switched.at - since).toBeGreaterThanOrEqual(5000);
    expect(reads.at(-1)!.at).toBeGreaterThanOrEqual(since + 5000);
    // No old replica leaves before that.
    const firstDrain = seen.find(({ effect }) => effect.kind === 'drain')!;
    expect(firstDrain.at).toBeGreaterThanOrEqual(switched.at);
  });

  it("rolls back on a failed gate: the share gone in the next table, the new revision stopped, the old one never touched", () => {
    const before = serving(canaried('serve-v1'));
    const step = pass(before, [{ kind: 'deploy', id: 9, plan: canaried('serve-bad') }], T0 + 3000);
    const { core, seen } = run(step.core, step.effects, T0 + 3000, figures(4));
    expect(core.service?.rollout?.error).toBe(
      "deployment 1 rolled back: the canary's gate failed: error rate 20% (4 of 20) above 5% and the old revision's 0%; revision 0 serves",
    );
    const failedAt = seen.find(({ effect }) => effect.kind === 'read-figures')!.at;
    // The table right after the failing reading: no share for revision 1, revision 0 current.
    const after = tables(seen.filter(({ at }) => at > failedAt));
    expect(after[0]!.current_revision).toBe(0);
    expect(after[0]!.revisions.every((r) => r.traffic === undefined)).toBe(true);
    expect(tables(seen).every((t) => t.current_revision === 0)).toBe(true);
    expect(activeJobs(core.run).map((j) => j.job_num)).toEqual(activeJobs(before.run).map((j) => j.job_num));
    expect(core.service?.rollout?.coherent?.canary.gate).toBe('error rate 20% (4 of 20) above 5% and the old revision\'s 0%');
  });

  describe('gate A: a synthetic request through the new revision before it takes traffic', () => {
    const probed = (decode: string, rollback = 'auto') =>
      openService(
        ['{name: router, replicas: 1, router: {type: smg}, depends_on: [decode], commands: [route]}', `{name: decode, replicas: 2, commands: [${decode}]}`],
        ['probes:', '  - {type: http, url: /v1/chat/completions, method: post, body: "{}"}', `rollout: {coherence: revision, rollback: ${rollback}}`],
      );
    /** Every effect answered as all goes well, but gate A with `verdict`. */
    const gateA = (verdict: string | null) => (at: RunCore, e: Effect): RunEvent[] =>
      e.kind === 'check-revision' ? [{ kind: 'revision-checked', revision: e.revision, round: e.round, note: verdict === null ? 'passed' : null, error: verdict }] : answersTo(at, e);

    it("asks it of the new entry replicas once the revision is READY, with the entry group's first probe; traffic moves only after it passed", () => {
      const before = serving(probed('serve-v1'));
      const step = pass(before, [{ kind: 'deploy', id: 5, plan: probed('serve-v2') }], T0 + 3000);
      const { core, seen } = play(step.core, step.effects, T0 + 3000, gateA(null));
      expect(core.service?.rollout).toMatchObject({ over: true, error: null });
      const asked = seen.flatMap(({ core: at, effect }) => (effect.kind === 'check-revision' ? [{ at, effect }] : []));
      expect(asked).toHaveLength(1);
      const { at, effect } = asked[0]!;
      // The new router only, READY; the probe as the service wrote it.
      const newRouter = groupMembers(at.run.jobs, ROUTER).filter((j) => revisionOf(at, j.job_num) === 1);
      expect(newRouter.every((j) => j.status === 'READY')).toBe(true);
      expect(effect).toMatchObject({ revision: 1, round: 1, urls: newRouter.map((j) => `http://${j.instance?.internal_ip}:8000`), probe: { url: '/v1/chat/completions', method: 'post', body: '{}' } });
      // No table made revision 1 current before gate A was answered.
      const askedAt = seen.findIndex(({ effect: e }) => e.kind === 'check-revision');
      expect(tables(seen.slice(0, askedAt + 1)).every((t) => t.current_revision === 0)).toBe(true);
      expect(core.run.service?.rollout?.synthetic).toBe('round 1: passed');
    });

    it('rolls back when it fails: no request ever went to the new revision, the old one untouched, the reason named', () => {
      const before = serving(probed('serve-v1'));
      const step = pass(before, [{ kind: 'deploy', id: 6, plan: probed('serve-v2') }], T0 + 3000);
      const { core, seen } = play(step.core, step.effects, T0 + 3000, gateA('POST /v1/chat/completions to http://10.0.0.9:8000: HTTP 502 after 3 ms'));
      expect(core.service?.rollout?.error).toBe('deployment 1 rolled back: gate A failed: POST /v1/chat/completions to http://10.0.0.9:8000: HTTP 502 after 3 ms; revision 0 serves');
      expect(tables(seen).every((t) => t.current_revision === 0 && t.revisions.every((r) => r.traffic === undefined))).toBe(true);
      const oldRanks = activeJobs(before.run).map((j) => j.job_num);
      expect(activeJobs(core.run).map((j) => j.job_num)).toEqual(oldRanks);
      expect(activeJobs(core.run).every((j) => j.restarts === 0)).toBe(true);
    });

    it('with rollback: manual, a failed gate A holds the rollout; resumed, it is asked again and the rollout goes through', () => {
      const before = serving(probed('serve-v1', 'manual'));
      const step = pass(before, [{ kind: 'deploy', id: 7, plan: probed('serve-v2', 'manual') }], T0 + 3000);
      const held = play(step.core, step.effects, T0 + 3000, gateA('GET / to http://10.0.0.9:8000: connect ECONNREFUSED')).core;
      expect(held.service?.rollout?.over).toBe(false);
      expect(held.run.service?.rollout).toMatchObject({ paused: true, held: 'gate A failed: GET / to http://10.0.0.9:8000: connect ECONNREFUSED', synthetic: 'round 1: failed: GET / to http://10.0.0.9:8000: connect ECONNREFUSED' });
      const resumed = pass(held, [{ kind: 'rollout-control', action: 'resume' }], T0 + 10_000);
      const { core, seen } = play(resumed.core, resumed.effects, T0 + 10_000, gateA(null));
      expect(seen.filter(({ effect }) => effect.kind === 'check-revision')).toHaveLength(1);
      expect(core.service?.rollout).toMatchObject({ over: true, error: null });
    });
  });

  describe('with rollback: manual', () => {
    const held = (decode: string) =>
      openService(
        ['{name: router, replicas: 1, router: {type: smg}, depends_on: [decode], commands: [route]}', `{name: decode, replicas: 2, commands: [${decode}]}`],
        ['rollout: {coherence: revision, canary: {traffic: 10, soak: 5s}, rollback: manual}'],
      );
    /** Until the rollout is over or held: what `run` gives, stopped at the hold. */
    function untilHeld(core: RunCore, effects: Effect[], from: number, answer: (e: Effect) => RunEvent[]) {
      let state = core;
      let pending = effects;
      let now = from;
      const seen: Array<{ at: number; effect: Effect }> = [];
      for (let i = 0; i < 120 && !(state.service?.rollout?.over ?? true) && !state.run.service?.rollout?.held; i++) {
        seen.push(...pending.map((effect) => ({ at: now, effect })));
        const events = pending.flatMap((e) => (e.kind === 'read-figures' ? answer(e) : answersTo(state, e)));
        now += 500;
        const step = pass(state, events, now);
        state = step.core;
        pending = step.effects;
      }
      return { core: state, effects: pending, now, seen };
    }

    it('a failed gate holds the rollout for a decision: the canary given no requests, its replicas kept; rolled back by hand', () => {
      const before = serving(held('serve-v1'));
      const step = pass(before, [{ kind: 'deploy', id: 9, plan: held('serve-bad') }], T0 + 3000);
      const at = untilHeld(step.core, step.effects, T0 + 3000, figures(4));
      expect(at.core.service?.rollout?.over).toBe(false);
      expect(at.core.run.service?.rollout).toMatchObject({ paused: true, held: "the canary's gate failed: error rate 20% (4 of 20) above 5% and the old revision's 0%" });
      // The next table gives the canary no share; the old revision stays current; the canary's replicas run on.
      const next = pass(at.core, at.effects.flatMap((e) => answersTo(at.core, e)), at.now + 500);
      const table = [...at.effects, ...next.effects].flatMap((e) => (e.kind === 'push-routes' ? [e.table] : [])).at(-1)!;
      expect(table.current_revision).toBe(0);
      expect(table.revisions.every((r) => r.traffic === undefined)).toBe(true);
      expect(activeJobs(next.core.run).filter((j) => revisionOf(next.core, j.job_num) === 1)).toHaveLength(3);
      // Held, nothing moves however long it waits.
      expect(pass(next.core, [], at.now + 600_000).effects.filter((e) => e.kind === 'new-attempts' || e.kind === 'drain')).toEqual([]);
      const back = pass(next.core, [{ kind: 'rollout-control', action: 'rollback' }], at.now + 1000);
      const { core } = play(back.core, back.effects, at.now + 1000);
      expect(core.service?.rollout?.error).toBe(
        "deployment 1 rolled back: the canary's gate failed: error rate 20% (4 of 20) above 5% and the old revision's 0%; rolled back by hand; revision 0 serves",
      );
      expect(activeJobs(core.run).map((j) => j.job_num)).toEqual(activeJobs(before.run).map((j) => j.job_num));
    });

    it('resumed after a hold: the canary takes its share again, soaks anew and, passing, goes through', () => {
      const before = serving(held('serve-v1'));
      const step = pass(before, [{ kind: 'deploy', id: 9, plan: held('serve-v2') }], T0 + 3000);
      const at = untilHeld(step.core, step.effects, T0 + 3000, figures(4));
      const resumed = pass(at.core, [...at.effects.flatMap((e) => answersTo(at.core, e)), { kind: 'rollout-control', action: 'resume' }], at.now + 500);
      expect(resumed.core.run.service?.rollout).toMatchObject({ paused: false, held: null, share_percent: 10 });
      const { core } = run(resumed.core, resumed.effects, at.now + 500, figures(0));
      expect(core.service?.rollout).toMatchObject({ over: true, error: null });
      expect(activeJobs(core.run).map((j) => revisionOf(core, j.job_num))).toEqual([1, 1, 1]);
    });

    it('a new replica that cannot start holds it too; resumed, the replica is asked for again', () => {
      const before = serving(held('serve-v1'));
      const step = pass(before, [{ kind: 'deploy', id: 9, plan: held('serve-v2') }], T0 + 3000);
      let fails = 1;
      const failOnce = (at: RunCore, e: Effect): RunEvent[] => {
        if (e.kind !== 'new-attempts' || fails-- <= 0) return answersTo(at, e);
        return [jobs(at, e.jobs.map((j) => provisioned(j.job_num, j.attempt))), jobs(at, e.jobs.map((j) => exited(j.job_num, 1, j.attempt)))];
      };
      const stopped = play(step.core, step.effects, T0 + 3000, failOnce).core;
      expect(stopped.run.service?.rollout?.held).toMatch(/^decode\/\d+ \(job \d+\) did not start: /);
      const resumed = pass(stopped, [{ kind: 'rollout-control', action: 'resume' }], T0 + 10_000);
      expect(resumed.effects.some((e) => e.kind === 'new-attempts' && e.group === DECODE)).toBe(true);
      const { core } = run(resumed.core, resumed.effects, T0 + 10_000, figures(0));
      expect(core.service?.rollout).toMatchObject({ over: true, error: null });
      expect(activeJobs(core.run).map((j) => revisionOf(core, j.job_num))).toEqual([1, 1, 1]);
    });
  });
});

describe('a coherent rollout in rounds (rollout.steps, max_surge)', () => {
  const stepped = (decode: string, rollout: string) =>
    openService(
      ['{name: router, replicas: 1, router: {type: smg}, depends_on: [decode], commands: [route]}', `{name: decode, replicas: 2, commands: [${decode}]}`],
      [`rollout: {coherence: revision, ${rollout}}`],
    );
  const live = (core: RunCore, group: number, revision: number) => groupMembers(core.run.jobs, group).filter((j) => revisionOf(core, j.job_num) === revision).length;

  it.each(['steps: 2', 'max_surge: 50%', 'max_surge: 1'])('%s: half of each group at a time, the new half taking half the traffic before half the old goes', (rollout) => {
    const before = serving(stepped('serve-v1', rollout));
    const oldDecodes = groupMembers(before.run.jobs, DECODE).map((j) => j.job_num);
    const step = pass(before, [{ kind: 'deploy', id: 2, plan: stepped('serve-v2', rollout) }], T0 + 3000);
    expect(step.core.service?.rollout?.coherent).toMatchObject({ round: 1, rounds: 2 });
    const { core, seen } = play(step.core, step.effects, T0 + 3000);
    expect(core.service?.rollout).toMatchObject({ over: true, error: null });
    expect(groupMembers(core.run.jobs, DECODE).map((j) => revisionOf(core, j.job_num))).toEqual([1, 1]);
    expect(commandsOf(core, DECODE)).toEqual(['serve-v2', 'serve-v2']);

    // What was asked, in order: a new decode, the new router; the new revision at 50 %; an old decode
    // drained; the second new decode; the new revision current; the old router, then the last old decode.
    const moves = seen.flatMap(({ core: at, effect }) => {
      if (effect.kind === 'new-attempts') return [`start ${at.plan.groups[effect.group]!.name} ×${effect.jobs.length}`];
      if (effect.kind === 'drain') {
        const ranks = at.live?.resizes.find((r) => r.id === effect.resize)?.draining ?? [];
        return [`drain ${ranks.map((n) => (oldDecodes.includes(n) ? 'old decode' : n === 0 ? 'old router' : `rank ${n}`)).join(', ')}`];
      }
      if (effect.kind === 'push-routes') {
        const share = effect.table.revisions.find((r) => r.number === 1)?.traffic;
        return [`table current ${effect.table.current_revision}${share === undefined ? '' : `, revision 1 at ${share}%`}`];
      }
      return [];
    });
    const firstOf = (m: string) => moves.indexOf(m);
    expect(firstOf('start decode ×1')).toBeLessThan(firstOf('start router ×1'));
    expect(firstOf('start router ×1')).toBeLessThan(firstOf('table current 0, revision 1 at 50%'));
    expect(firstOf('table current 0, revision 1 at 50%')).toBeLessThan(firstOf('drain old decode'));
    expect(moves.filter((m) => m === 'start decode ×1')).toHaveLength(2);
    expect(moves.lastIndexOf('start decode ×1')).toBeGreaterThan(firstOf('drain old decode'));
    expect(moves.lastIndexOf('start decode ×1')).toBeLessThan(firstOf('table current 1'));
    expect(moves.filter((m) => m.startsWith('drain'))).toEqual(['drain old decode', 'drain old router', 'drain old decode']);
    expect(firstOf('table current 1')).toBeLessThan(firstOf('drain old router'));
    // Never more than one decode over its two (the surge), and never fewer than two READY to serve.
    for (const { core: at } of seen) expect(groupMembers(at.run.jobs, DECODE).length).toBeLessThanOrEqual(3);
  });

  it('rolled back in its second round: traffic back on the old revision at once, the old decode it retired started again before a new one goes', () => {
    const rollout = 'steps: 2';
    const before = serving(stepped('serve-v1', rollout));
    const step = pass(before, [{ kind: 'deploy', id: 2, plan: stepped('serve-v2', rollout) }], T0 + 3000);
    // The second round's new decode exits 1 as it starts.
    const failSecond = (at: RunCore, e: Effect): RunEvent[] => {
      const second = e.kind === 'new-attempts' && e.group === DECODE && at.service?.rollout?.coherent?.round === 2 && e.jobs.every((j) => revisionOf(at, j.job_num) === 1);
      if (e.kind !== 'new-attempts' || !second) return answersTo(at, e);
      return [jobs(at, e.jobs.map((j) => provisioned(j.job_num, j.attempt))), jobs(at, e.jobs.map((j) => exited(j.job_num, 1, j.attempt)))];
    };
    const { core, seen } = play(step.core, step.effects, T0 + 3000, failSecond);
    expect(core.service?.rollout?.error).toMatch(/^deployment 1 rolled back: decode\/\d+ \(job \d+\) did not start: .*; revision 0 serves$/);
    expect(live(core, DECODE, 0)).toBe(2);
    expect(live(core, DECODE, 1)).toBe(0);
    expect(live(core, ROUTER, 0)).toBe(1);
    expect(commandsOf(core, DECODE)).toEqual(['serve-v1', 'serve-v1']);
    // The first table after the failure: revision 0 current, revision 1 given no share.
    const failedAt = seen.findIndex(({ core: at }) => at.service?.rollout?.coherent?.phase === 'rolling-back');
    const back = tables(seen.slice(failedAt))[0]!;
    expect(back.current_revision).toBe(0);
    expect(back.revisions.find((r) => r.number === 1)?.traffic).toBeUndefined();
    // The old decode was asked for again before the new router or decode was drained.
    const restart = seen.findIndex(({ effect }, i) => i >= failedAt && effect.kind === 'new-attempts' && effect.group === DECODE);
    const firstDrain = seen.findIndex(({ effect }, i) => i >= failedAt && effect.kind === 'drain');
    expect(restart).toBeGreaterThan(0);
    expect(restart).toBeLessThan(firstDrain);
  });

  it('an old replica that cannot start again does not hold the rollback up: the new revision still goes, and the error says so', () => {
    const rollout = 'steps: 2';
    const before = serving(stepped('serve-v1', rollout));
    const step = pass(before, [{ kind: 'deploy', id: 2, plan: stepped('serve-v2', rollout) }], T0 + 3000);
    // From the second round on, no decode starts: neither the new one nor the old one started again.
    const broken = (at: RunCore, e: Effect): RunEvent[] => {
      if (e.kind !== 'new-attempts' || e.group !== DECODE || at.service?.rollout?.coherent?.round !== 2) return answersTo(at, e);
      return [jobs(at, e.jobs.map((j) => provisioned(j.job_num, j.attempt))), jobs(at, e.jobs.map((j) => exited(j.job_num, 1, j.attempt)))];
    };
    const { core } = play(step.core, step.effects, T0 + 3000, broken);
    expect(core.service?.rollout).toMatchObject({ over: true });
    expect(core.service?.rollout?.error).toMatch(/; an old replica did not start again: decode\/\d+ \(job \d+\) did not start: .*; revision 0 serves$/);
    expect(live(core, DECODE, 0)).toBe(1);
    expect(live(core, DECODE, 1)).toBe(0);
    expect(live(core, ROUTER, 0)).toBe(1);
  });

  it('rolled back by hand while its first round retires an old decode: that decode started again, the new revision gone', () => {
    const rollout = 'steps: 2';
    const before = serving(stepped('serve-v1', rollout));
    let at = pass(before, [{ kind: 'deploy', id: 2, plan: stepped('serve-v2', rollout) }], T0 + 3000);
    let now = T0 + 3000;
    while (at.core.service?.rollout?.coherent?.phase !== 'retiring') at = pass(at.core, at.effects.flatMap((e) => answersTo(at.core, e)), (now += 1));
    expect(rolloutControlRefusal(at.core, 'rollback', false)).toBeNull();
    const back = pass(at.core, [...at.effects.flatMap((e) => answersTo(at.core, e)), { kind: 'rollout-control', action: 'rollback' }], (now += 1));
    const { core } = play(back.core, back.effects, now + 1);
    expect(core.service?.rollout?.error).toBe('deployment 1 rolled back: rolled back by hand; revision 0 serves');
    expect([live(core, ROUTER, 0), live(core, DECODE, 0), live(core, ROUTER, 1), live(core, DECODE, 1)]).toEqual([1, 2, 0, 0]);
    expect(commandsOf(core, DECODE)).toEqual(['serve-v1', 'serve-v1']);
  });
});

describe('what a coherent rollout does not run yet', () => {
  const groups = ['{name: web, replicas: 2, commands: [serve]}'];
  it('plans rollback: manual', () => {
    expect(openService(groups, ['rollout: {coherence: revision, rollback: manual}']).service?.rollout.rollback).toBe('manual');
  });
  it('plans the defaults and dstack rolling', () => {
    expect(openService(groups, ['rollout: {coherence: revision}']).service?.rollout.coherence).toBe('revision');
    expect(openService(groups).service?.rollout.coherence).toBe('independent');
  });
});
