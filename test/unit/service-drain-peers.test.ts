import { describe, expect, it } from 'vitest';
import type { Effect } from '../../src/run-core/effects';
import type { RunEvent } from '../../src/run-core/events';
import type { RunCore } from '../../src/run-core/state';
import { answersTo, coreOf, jobs, openService, pass, provisioned, ready, running, T0 } from '../helpers/run-core';

/**
 * A replica behind a router group leaves the router's address book (peers.json) as it leaves the
 * gateways' table: `draining`, not ready, delivered before its drain is asked and long before it is
 * released. Found by test/e2e/service-endurance.test.ts: the book used to list it `ready` until the
 * pass that stopped it, and a router sent it requests as it stopped. Over the run core's passes, no server.
 */

/** router in front of decode (1..3): the router forwards to decode replicas it reads from the book. */
const plan = () => openService(['{name: router, replicas: 1, router: {type: smg}, commands: [route]}', '{name: decode, replicas: 1..3, scaling: {metric: rps, target: 10}, commands: [serve]}']);

interface Trace {
  passes: number;
  effects: Array<{ pass: number; effect: Effect }>;
}

/** Each pass's effects, answered in the next pass, until nothing more comes; every effect noted with its pass. */
function settle(core: RunCore, events: RunEvent[], now: number, trace: Trace): RunCore {
  let next = events;
  for (let i = 0; i === 0 || next.length > 0; i++) {
    if (i > 20) throw new Error('the run core did not settle in 20 passes');
    const step = pass(core, next, now + i * 10);
    core = step.core;
    trace.passes += 1;
    for (const effect of step.effects) trace.effects.push({ pass: trace.passes, effect });
    next = step.effects.filter((e) => e.kind !== 'new-attempts').flatMap((e) => answersTo(core, e));
  }
  return core;
}

/** decode at 2 READY replicas, every push and book delivered; then scaled to 1: the effects of the scale-down in order. */
function scaleDown(): Trace['effects'] {
  const trace: Trace = { passes: 0, effects: [] };
  let core = coreOf(plan());
  core = settle(core, [jobs(core, [provisioned(0), provisioned(1)]), { kind: 'unlocked' }, { kind: 'announced' }], T0 + 1000, trace);
  core = settle(core, [jobs(core, [running(0), running(1)])], T0 + 2000, trace);
  core = settle(core, [jobs(core, [ready(0), ready(1)])], T0 + 3000, trace);
  core = settle(core, [{ kind: 'resize', id: 1, group: 1, nodes: 2 }], T0 + 4000, trace);
  core = settle(core, [jobs(core, [provisioned(2), running(2), ready(2)])], T0 + 5000, trace);
  core = settle(core, [{ kind: 'resize-answered', id: 1 }], T0 + 6000, trace);
  const before = trace.effects.length;
  settle(core, [{ kind: 'resize', id: 2, group: 1, nodes: 1 }], T0 + 7000, trace);
  return trace.effects.slice(before);
}

/** decode/1 (job 2) as a published book lists it: ready, or not (absent, ended, draining). */
function decodeOneReady(effect: Extract<Effect, { kind: 'publish-peers' }>): boolean {
  const book = JSON.parse(effect.books[0]?.json ?? '{}') as { groups: Array<{ name: string; nodes: Array<{ rank: number; ready: boolean }> }> };
  return book.groups.find((g) => g.name === 'decode')?.nodes.find((n) => n.rank === 2)?.ready === true;
}

describe("a drained replica behind a service's router", () => {
  it('is drained on the gateways, then released (the sequence the test below looks at)', () => {
    const kinds = scaleDown().map((e) => e.effect.kind);
    expect(kinds).toContain('push-routes');
    expect(kinds.indexOf('drain')).toBeGreaterThan(kinds.indexOf('push-routes'));
    expect(kinds.indexOf('release')).toBeGreaterThan(kinds.indexOf('drain'));
  });

  it('leaves the book the router reads before it is released, as it leaves the gateways first', () => {
    const log = scaleDown();
    const release = log.find((e) => e.effect.kind === 'release');
    expect(release).toBeDefined();
    const dropped = log.find((e) => e.effect.kind === 'publish-peers' && !decodeOneReady(e.effect));
    // Published (and answered: the pass after) before the pass that releases it.
    expect(dropped?.pass ?? Infinity).toBeLessThan(release?.pass ?? 0);
  });
});
