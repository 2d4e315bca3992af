import { describe, expect, it } from 'vitest';
import type { Plan } from '../plan/plan-schema';
import { answersTo, openService, pass, play, servingCore, T0 } from '../../test/helpers/run-core';
import type { Effect } from './effects';
import type { RunEvent } from './events';
import { groupMembers } from './jobs';
import { autoscaleDeadline } from './autoscaling';
import { ownTraffic, replicaTargets } from './replica-traffic';
import { SCALE_FROM_ZERO_HOLD_S, tableOf } from './routing';
import type { RunCore } from './state';

/**
 * A group behind the router sized on its OWN traffic (Troupe's `scaling.replica_metrics`): the loop
 * reads its READY replicas' Prometheus endpoints beside the gateways' figures; its rps is what its
 * replicas answered over the window's samples ÷ their span; its concurrency the sum of the gauges. The group that reads the service's traffic (dstack's way) is sized on the router's.
 */

const COUNTER = 'stand_in_chat_completions_total';
const GAUGE = 'stand_in_chat_completions_running';

const pd = (decodeScaling: string): Plan =>
  openService([
    '{name: router, replicas: 1, router: {type: smg}, depends_on: [prefill, decode], commands: [route]}',
    '{name: prefill, replicas: 1..3, scaling: {metric: rps, target: 10, window: 30s, scale_up_delay: 0s}, commands: [prefill]}',
    `{name: decode, replicas: 1..3, scaling: {${decodeScaling}}, commands: [decode]}`,
  ]);

const ownRps = `metric: rps, target: 10, window: 30s, scale_up_delay: 0s, scale_down_delay: 20s, replica_metrics: {port: 9000, requests: ${COUNTER}}`;

const figures = (requests: number): RunEvent => ({
  kind: 'figures',
  purpose: 'autoscale',
  window_s: 30,
  revisions: [],
  groups: [{ revision: 0, group: 'router', requests, inflight: 0 }],
  held: 0,
  held_total: 0,
  error: null,
});

/** The replicas read now answer `values` (by url; null: it cannot be read). */
const metrics = (core: RunCore, values: (url: string) => Record<string, number> | null): RunEvent => ({
  kind: 'replica-metrics',
  replicas: replicaTargets(core, core.plan.groups).map((t) => {
    const v = values(t.url);
    return { group: t.group, url: t.url, values: v, error: v === null ? 'connect ECONNREFUSED' : null };
  }),
});

const scrapes = (effects: Effect[]) => effects.flatMap((e) => (e.kind === 'read-replica-metrics' ? [e] : []));
const size = (core: RunCore, group: number) => groupMembers(core.run.jobs, group).length;

/** The reading under way answered at `now` (the router's `requests`, the replicas' `values`), and what follows played out (the next reading, asked meanwhile, left unanswered). */
function reading(core: RunCore, now: number, routerRequests: number, values: (url: string) => Record<string, number> | null): RunCore {
  const step = pass(core, [figures(routerRequests), metrics(core, values)], now);
  return play(step.core, step.effects, now, (at, e) => (e.kind === 'read-figures' || e.kind === 'read-replica-metrics' ? [] : answersTo(at, e))).core;
}

describe("a group behind the router on its replicas' own figures", () => {
  it("asks decode's READY replicas for its metric beside the gateways' figures for prefill, one reading at a time", () => {
    const core = servingCore(pd(ownRps));
    // The figures of the reading under way answered, the replicas not yet: no next reading.
    const half = pass(core, [figures(0)], T0 + 5000);
    expect(autoscaleDeadline(half.core)).toBeNull();
    expect(scrapes(pass(half.core, [], T0 + 9000).effects)).toEqual([]);
    // Both answered: the next one is asked, of both.
    const next = pass(half.core, [metrics(core, () => ({ [COUNTER]: 0 }))], T0 + 5100);
    expect(next.effects.filter((e) => e.kind === 'read-figures')).toEqual([{ kind: 'read-figures', window_s: 30, purpose: 'autoscale' }]);
    const decodes = groupMembers(core.run.jobs, 2);
    expect(scrapes(next.effects).map((e) => e.targets)).toEqual([decodes.map((j) => ({ group: 2, url: `http://${j.instance?.internal_ip}:9000/metrics`, names: [COUNTER] }))]);
  });

  it("grows decode on its own rate while prefill follows the router's: 40 rps through the router, 25 rps to decode", () => {
    let core = servingCore(pd(ownRps));
    // First sample: no rate yet, nothing sized for decode; prefill sees 40 rps → 3 (its range's top).
    core = reading(core, T0 + 5000, 1200, () => ({ [COUNTER]: 100 }));
    expect(size(core, 1)).toBe(3);
    expect(size(core, 2)).toBe(1);
    expect(core.service?.autoscale.last[2] ?? null).toBeNull();
    // 2 s later: +50 requests on the one decode replica → 25 rps → 3 wanted.
    core = reading(core, T0 + 7000, 1200, () => ({ [COUNTER]: 150 }));
    expect(core.service?.autoscale.last[2]).toMatchObject({ value: 25, wanted: 3 });
    expect(size(core, 2)).toBe(3);
  });

  it('keeps decode at 1 when its own traffic is small, whatever goes through the router', () => {
    let core = servingCore(pd(ownRps));
    core = reading(core, T0 + 5000, 1800, () => ({ [COUNTER]: 0 }));
    core = reading(core, T0 + 7000, 1800, () => ({ [COUNTER]: 4 }));
    expect(core.service?.autoscale.last[2]).toMatchObject({ value: 2, wanted: 1 });
    expect(size(core, 2)).toBe(1);
    // dstack's way (the service's traffic) would want 6 of it: prefill, which reads it, is at its top.
    expect(core.service?.autoscale.last[1]).toMatchObject({ value: 60, wanted: 3 });
  });

  it('sums the replicas, reads a counter that went down as restarted from 0, and keeps the samples of a replica it could not read', () => {
    let core = servingCore(
      openService([
        '{name: router, replicas: 1, router: {type: smg}, depends_on: [decode], commands: [route]}',
        '{name: decode, replicas: 2..4, scaling: {metric: rps, target: 10, window: 30s, scale_up_delay: 0s, scale_down_delay: 60s, replica_metrics: {port: 9000, requests: c}}, commands: [decode]}',
      ]),
    );
    const [a, b] = groupMembers(core.run.jobs, 1).map((j) => `http://${j.instance?.internal_ip}:9000/metrics`);
    let count = { a: 1000, b: 50 };
    core = reading(core, T0 + 5000, 0, (url) => ({ c: url === a ? count.a : count.b }));
    // a +60; b restarted (50 → 10): 10 since → 70 requests in 2 s = 35 rps → 4 wanted.
    count = { a: 1060, b: 10 };
    core = reading(core, T0 + 7000, 0, (url) => ({ c: url === a ? count.a : count.b }));
    expect(core.service?.autoscale.last[1]).toMatchObject({ value: 35, wanted: 4 });
    expect(size(core, 1)).toBe(4);
    // b cannot be read: the problem is said, and its samples kept (what it answered still counts). Over the
    // window's 4 s: a 80, b 10, and the two replicas started since then 4 each (their counters from 0).
    const failed = reading(core, T0 + 9000, 0, (url) => (url === b ? null : url === a ? { c: 1080 } : { c: 4 }));
    expect(failed.service?.autoscale.problem).toMatch(/^1 of 4 replicas' metrics could not be read: http:\/\/.*:9000\/metrics: connect ECONNREFUSED$/);
    expect(failed.service?.autoscale.samples.filter((s) => s.url === b)).toHaveLength(2);
    expect(failed.service?.autoscale.last[1]).toMatchObject({ value: 24.5, wanted: 3 });
  });

  it("counts over the window what every replica answered: one removed since, and one started since from its counter's 0", () => {
    const group = pd(ownRps).groups[2];
    if (!group) throw new Error('no decode');
    const at = (url: string, at_ms: number, requests: number) => ({ url, group: 2, at_ms: T0 + at_ms, requests, inflight: null });
    const samples = [at('a', 0, 0), at('b', 0, 0), at('a', 20_000, 200), at('b', 20_000, 300), at('c', 20_000, 50), at('a', 30_000, 300), at('c', 30_000, 100)];
    // a 300 + b (gone at 20 s) 300 + c (started after 0 s) 100 = 700 in 30 s.
    expect(ownTraffic(group, samples, ['a', 'c'], T0 + 30_000)).toBeCloseTo(700 / 30);
    // Out of the window: b's samples no longer count, nor a's first.
    expect(ownTraffic(group, samples, ['a', 'c'], T0 + 45_000)).toBeCloseTo((100 + 50) / 10);
  });

  it('concurrency: the sum of the gauges read now', () => {
    const serving = servingCore(pd(`metric: concurrency, target: 2, window: 30s, scale_up_delay: 0s, replica_metrics: {port: 9000, inflight: ${GAUGE}}`));
    expect(replicaTargets(serving, serving.plan.groups).map((t) => t.names)).toEqual([[GAUGE]]);
    const core = reading(serving, T0 + 5000, 0, () => ({ [GAUGE]: 5 }));
    expect(core.service?.autoscale.last[2]).toMatchObject({ value: 5, wanted: 3 });
    expect(size(core, 2)).toBe(3);
  });
});

describe('a group behind the router that scales to zero', () => {
  const plan = openService([
    '{name: router, replicas: 1, router: {type: smg}, commands: [route]}',
    `{name: decode, replicas: 0..2, scaling: {metric: rps, target: 10, window: 30s, scale_up_delay: 5m, scale_down_delay: 10s, replica_metrics: {port: 9000, requests: ${COUNTER}}}, commands: [decode]}`,
  ]);
  const routerRows = (c: RunCore) => tableOf(c).revisions[0]?.groups.find((g) => g.name === 'router')?.replicas ?? [];
  const held = (n: number): RunEvent => ({ ...figures(0), held: n, held_total: n } as RunEvent);

  it('serves with the router off the table while decode sleeps (the gateways hold), wakes it on a held request, and lists the router again once decode is READY', () => {
    let c = servingCore(plan);
    expect(c.run.status).toBe('RUNNING');
    expect(size(c, 1)).toBe(0);
    expect(tableOf(c)).toMatchObject({ hold_s: SCALE_FROM_ZERO_HOLD_S });
    expect(routerRows(c)).toEqual([]);
    // Nothing held: it sleeps on. No replica to read, so no reading of replicas is asked; the gateways' is.
    const quiet = pass(c, [figures(0)], T0 + 5000);
    expect(scrapes(quiet.effects)).toEqual([]);
    expect(quiet.effects.some((e) => e.kind === 'read-figures')).toBe(true);
    c = play(quiet.core, quiet.effects, T0 + 5000, (at, e) => (e.kind === 'read-figures' ? [] : answersTo(at, e))).core;
    expect(size(c, 1)).toBe(0);
    // A held request wakes one decode at once (scale_up_delay is 5 min), and the router is listed once it is READY.
    const woke = pass(c, [held(1)], T0 + 7000);
    c = play(woke.core, woke.effects, T0 + 7000, (at, e) => (e.kind === 'read-figures' || e.kind === 'read-replica-metrics' ? [] : answersTo(at, e))).core;
    expect(size(c, 1)).toBe(1);
    expect(c.service?.autoscale.last[1]).toMatchObject({ wanted: 1, held: 1 });
    expect(routerRows(c)).toHaveLength(1);
  });

  it("goes back to zero on its own idle figures after scale_down_delay: the router off the table first, then the router's requests in flight drained with decode's", () => {
    let c = servingCore(plan);
    const woke = pass(c, [held(2)], T0 + 5000);
    c = play(woke.core, woke.effects, T0 + 5000, (at, e) => (e.kind === 'read-figures' || e.kind === 'read-replica-metrics' ? [] : answersTo(at, e))).core;
    expect(size(c, 1)).toBe(1);
    // Its counter still: 0 rps, none wanted; not before its size is 10 s old (first judged at 9 s, its second sample).
    c = reading(c, T0 + 7000, 0, () => ({ [COUNTER]: 2 }));
    c = reading(c, T0 + 9000, 0, () => ({ [COUNTER]: 2 }));
    expect(size(c, 1)).toBe(1);
    c = reading(c, T0 + 17_000, 0, () => ({ [COUNTER]: 2 }));
    expect(size(c, 1)).toBe(1);
    // (Job records change in place as the loop goes: the urls now.)
    const urls = (group: number) => c.run.jobs.filter((j) => j.group_index === group && !j.removed).map((j) => `http://${j.instance?.internal_ip}:8000`);
    const [decodeUrls, routerUrls] = [urls(1), urls(0)];
    const step = pass(c, [figures(0), metrics(c, () => ({ [COUNTER]: 2 }))], T0 + 19_000);
    const { core: slept, seen } = play(step.core, step.effects, T0 + 19_000, (at, e) => (e.kind === 'read-figures' || e.kind === 'read-replica-metrics' ? [] : answersTo(at, e)));
    expect(size(slept, 1)).toBe(0);
    const drain = seen.find(({ effect }) => effect.kind === 'drain');
    expect(drain?.effect).toMatchObject({ urls: [...decodeUrls, ...routerUrls] });
    // When the drain was asked, the table on the gateways already listed no router.
    expect(drain && routerRows(drain.core)).toEqual([]);
    expect(slept.run.status).toBe('RUNNING');
    expect(routerRows(slept)).toEqual([]);
  });
});
