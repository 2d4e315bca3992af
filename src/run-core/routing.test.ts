import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadServicePlan, serviceRunPlan } from '../plan';
import type { Plan } from '../plan/plan-schema';
import { coreOf, exited, jobs, openService, pass, provisioned, ready, running, T0 } from '../../test/helpers/run-core';
import type { Instance } from '../backends/backend';
import { nextDeadline } from './decide';
import type { Effect } from './effects';
import type { RunEvent } from './events';
import { DRAIN_TIMEOUT_S, ROUTES_REFRESH_MS, ROUTES_RETRY_MS, routesSettled, tableOf } from './routing';
import { ServiceTableSchema } from '../gateway/routing-table';
import type { RunCore } from './state';

/**
 * A service's routing table over sequences of events, no server: pushed when what it lists changes,
 * one push at a time with rising generations, READY replicas only, none once the end is decided, a
 * failed push tried again after a while with its problem in the run's message.
 */

const HASH = 'b'.repeat(64);

/** router (1 replica) in front of decode (2): the router is the entry; decode restarts a failed node. */
function pd(): Plan {
  const text = [
    'type: service',
    'name: pd',
    'port: 8000',
    'groups:',
    '  - {name: router, replicas: 1, router: {type: smg}, commands: [route]}',
    '  - {name: decode, replicas: 2, on_failure: restart-node, commands: [serve]}',
  ].join('\n');
  return serviceRunPlan(loadServicePlan(text, 'pd.yml', { environ: {} }), [HASH]);
}

type Push = Extract<Effect, { kind: 'push-routes' }>;
const pushes = (effects: Effect[]) => effects.filter((e): e is Push => e.kind === 'push-routes');
const pushed = (generation: number, extra: Partial<Extract<RunEvent, { kind: 'routes-pushed' }>> = {}): RunEvent => ({
  kind: 'routes-pushed',
  generation,
  endpoints: ['http://gw:8080/services/pd/'],
  error: null,
  ...extra,
});
const replicasOf = (push: Push | undefined) =>
  Object.fromEntries(push?.table.revisions[0]?.groups.map((g) => [g.name, g.replicas.map((r) => r.url)]) ?? []);

/** Provisioned, started and READY everywhere, every push answered. */
function serving(): RunCore {
  let core = coreOf(pd());
  const all = [0, 1, 2];
  core = answered(pass(core, [jobs(core, all.map((n) => provisioned(n))), { kind: 'unlocked' }, { kind: 'announced' }], T0 + 1000));
  core = answered(pass(core, [jobs(core, all.map((n) => running(n)))], T0 + 2000));
  return answered(pass(core, [jobs(core, all.map((n) => ready(n)))], T0 + 3000));
}

/** The pass's pushes (at most one) answered as done. */
/** The address book's publications among the effects. */
const publications = (effects: Effect[]) => effects.flatMap((e) => (e.kind === 'publish-peers' ? [{ version: e.version, ...e.books[0]! }] : []));
const delivered = (version: number): RunEvent => ({ kind: 'peers-published', version, failed_hooks: [], error: null });

/** The step's table push and book publication answered (delivered). */
function answered(step: { core: RunCore; effects: Effect[] }): RunCore {
  const [push] = pushes(step.effects);
  const answers = [...(push ? [pushed(push.generation)] : []), ...publications(step.effects).map((p) => delivered(p.version))];
  return answers.length > 0 ? pass(step.core, answers, T0 + 500).core : step.core;
}

describe("a service's routing table", () => {
  it('goes out at once with no replica (503, not 404), then with each READY replica, never a RUNNING one', () => {
    let core = coreOf(pd());
    const first = pass(core, [], T0);
    expect(pushes(first.effects)).toHaveLength(1);
    expect(pushes(first.effects)[0]?.table).toMatchObject({
      run: 'pd',
      generation: 1,
      auth: { token_sha256: [HASH] },
      current_revision: 0,
      revisions: [{ number: 0, entry: ['router'], groups: [{ name: 'router', replicas: [] }, { name: 'decode', replicas: [] }] }],
    });
    core = pass(first.core, [pushed(1)], T0 + 1).core;
    expect(core.run.service).toEqual({ endpoints: ['http://gw:8080/services/pd/'], auth: true, table_generation: 1, deployment: 0, rollout: null });

    core = pass(core, [jobs(core, [0, 1, 2].map((n) => provisioned(n))), { kind: 'unlocked' }, { kind: 'announced' }], T0 + 1000).core;
    const runningStep = pass(core, [jobs(core, [0, 1, 2].map((n) => running(n)))], T0 + 2000);
    expect(pushes(runningStep.effects)).toEqual([]);
    const readyStep = pass(runningStep.core, [jobs(runningStep.core, [ready(0), ready(2)])], T0 + 3000);
    expect(pushes(readyStep.effects).map((p) => p.generation)).toEqual([2]);
    expect(replicasOf(pushes(readyStep.effects)[0])).toEqual({ router: ['http://10.0.0.1:8000'], decode: ['http://10.0.0.3:8000'] });
  });

  it('one push at a time: a change while one is under way goes out once it is answered, with the next generation', () => {
    const core = serving();
    const failed = pass(core, [jobs(core, [exited(1, 1)])], T0 + 4000);
    const [push] = pushes(failed.effects);
    expect(replicasOf(push).decode).toEqual(['http://10.0.0.3:8000']);
    // The replacement comes up while the push is under way: nothing more goes out yet.
    let next = pass(failed.core, [jobs(failed.core, [provisioned(1, 1), running(1, 1), ready(1, 1)])], T0 + 5000);
    expect(pushes(next.effects)).toEqual([]);
    expect(routesSettled(next.core)).toBe(false);
    next = pass(next.core, [pushed(push!.generation)], T0 + 5100);
    const [again] = pushes(next.effects);
    expect(again?.generation).toBe(push!.generation + 1);
    expect(replicasOf(again).decode).toEqual(['http://10.0.1.2:8000', 'http://10.0.0.3:8000']);
    expect(routesSettled(pass(next.core, [pushed(again!.generation)], T0 + 5200).core)).toBe(true);
  });

  it('lists no replica once the end is decided (a stop), before teardown', () => {
    const core = serving();
    const stop = pass(core, [{ kind: 'stop', abort: false }], T0 + 4000);
    expect(stop.effects.some((e) => e.kind === 'end-submission')).toBe(true);
    const [push] = pushes(stop.effects);
    expect(replicasOf(push)).toEqual({ router: [], decode: [] });
    // The push comes after the end in the effects: the table changes once the decision is made.
    expect(stop.effects.findIndex((e) => e.kind === 'push-routes')).toBeGreaterThan(stop.effects.findIndex((e) => e.kind === 'end-submission'));
  });

  it('a failed push: its problem in the message, the same generation again after ROUTES_RETRY_MS, the message cleared once through', () => {
    const core = serving();
    const failed = pass(core, [jobs(core, [exited(2, 1)])], T0 + 4000);
    const [push] = pushes(failed.effects);
    const refused = pass(failed.core, [pushed(push!.generation, { error: 'gateway http://127.0.0.1:9 did not answer' })], T0 + 4100);
    expect(refused.core.run.message).toBe(`routing table v${push!.generation} not on every gateway: gateway http://127.0.0.1:9 did not answer`);
    expect(pushes(refused.effects)).toEqual([]);
    expect(nextDeadline(refused.core)).toBe(T0 + 4100 + ROUTES_RETRY_MS);
    expect(pushes(pass(refused.core, [], T0 + 4100 + ROUTES_RETRY_MS - 1).effects)).toEqual([]);
    const retry = pass(refused.core, [], T0 + 4100 + ROUTES_RETRY_MS);
    expect(pushes(retry.effects).map((p) => p.generation)).toEqual([push!.generation]);
    expect(pass(retry.core, [pushed(push!.generation)], T0 + 30_000).core.run.message).toBeNull();
  });

  it('goes out again unchanged every ROUTES_REFRESH_MS (a gateway that lost its tables gets them back), not once the end is decided', () => {
    const core = serving();
    const generation = core.service!.generation;
    const pushedAt = core.service!.pushed_at_ms!;
    expect(nextDeadline(core)).toBe(pushedAt + ROUTES_REFRESH_MS);
    expect(pushes(pass(core, [], pushedAt + ROUTES_REFRESH_MS - 1).effects)).toEqual([]);
    const refresh = pass(core, [], pushedAt + ROUTES_REFRESH_MS);
    expect(pushes(refresh.effects).map((p) => p.generation)).toEqual([generation]);
    const again = pass(refresh.core, [pushed(generation)], pushedAt + ROUTES_REFRESH_MS + 10);
    expect(nextDeadline(again.core)).toBe(pushedAt + 2 * ROUTES_REFRESH_MS + 10);
    const stopped = pass(again.core, [{ kind: 'stop', abort: false }], pushedAt + ROUTES_REFRESH_MS + 20);
    const emptied = pass(stopped.core, pushes(stopped.effects).map((p) => pushed(p.generation)), pushedAt + ROUTES_REFRESH_MS + 30);
    expect(pushes(pass(emptied.core, [], pushedAt + 5 * ROUTES_REFRESH_MS).effects)).toEqual([]);
  });

  it('a late answer of an older push changes nothing', () => {
    const core = serving();
    const generation = core.service!.generation;
    const late = pass(core, [pushed(generation - 1, { endpoints: ['http://old/'] })], T0 + 4000);
    expect(late.core.run.service?.endpoints).toEqual(['http://gw:8080/services/pd/']);
    expect(pushes(late.effects)).toEqual([]);
  });

  it('a scale-down drains: the ranks leave the table, the drain is asked once every gateway has it, they are released after', () => {
    let core = coreOf(openService(['{name: decode, replicas: 1..3, scaling: {metric: rps, target: 5}, commands: [serve]}']));
    core = answered(pass(core, [jobs(core, [provisioned(0)]), { kind: 'unlocked' }, { kind: 'announced' }], T0 + 1000));
    core = answered(pass(core, [jobs(core, [running(0), ready(0)])], T0 + 2000));
    core = answered(pass(core, [{ kind: 'resize', id: 1, group: 0, nodes: 3 }], T0 + 3000));
    core = answered(pass(core, [jobs(core, [1, 2].map((n) => provisioned(n))), jobs(core, [1, 2].flatMap((n) => [running(n), ready(n)]))], T0 + 4000));
    expect(core.live!.resizes[0]?.phase).toBe('over');

    const shrink = pass(core, [{ kind: 'resize', id: 2, group: 0, nodes: 1 }], T0 + 5000);
    // Off the table at once, still running, not released: the push goes out, no drain before it lands.
    const [push] = pushes(shrink.effects);
    expect(replicasOf(push).decode).toEqual(['http://10.0.0.1:8000']);
    expect(shrink.effects.some((e) => e.kind === 'drain' || e.kind === 'release')).toBe(false);
    expect(shrink.core.run.jobs.filter((j) => j.status === 'READY')).toHaveLength(3);
    // Not ready in the book a router reads either; the drain waits for that book to be delivered too.
    const [book] = publications(shrink.effects);
    const decode = (JSON.parse(book!.json) as { groups: Array<{ nodes: Array<{ rank: number; status: string; ready: boolean }> }> }).groups[0]!.nodes;
    expect(decode.map((n) => [n.rank, n.status, n.ready])).toEqual([[0, 'ready', true], [1, 'draining', false], [2, 'draining', false]]);
    const routed = pass(shrink.core, [pushed(push!.generation)], T0 + 5100);
    expect(routed.effects.some((e) => e.kind === 'drain')).toBe(false);
    const landed = pass(routed.core, [delivered(book!.version)], T0 + 5150);
    const drains = landed.effects.filter((e) => e.kind === 'drain');
    expect(drains).toEqual([{ kind: 'drain', resize: 2, urls: ['http://10.0.0.3:8000', 'http://10.0.0.2:8000'], timeout_s: DRAIN_TIMEOUT_S }]);
    // Asked once only.
    expect(pass(landed.core, [], T0 + 6000).effects.filter((e) => e.kind === 'drain')).toEqual([]);
    const out = pass(structuredClone(landed.core), [{ kind: 'drained', id: 2, left: 0, error: null }], T0 + 7000);
    expect(out.effects.filter((e) => e.kind === 'release').map((e) => (e.kind === 'release' ? e.jobs.map((j) => j.job_num) : []))).toEqual([[2, 1]]);
    expect(out.core.run.jobs.filter((j) => j.removed).map((j) => j.message)).toEqual(['removed: decode resized to 1', 'removed: decode resized to 1']);
    // A drain that could not be asked (no gateway answered) still ends, and the removal says so; one cut short says what was left.
    const failed = pass(structuredClone(landed.core), [{ kind: 'drained', id: 2, left: 0, error: 'gateway http://127.0.0.1:9 got no answer (ECONNREFUSED)' }], T0 + 7000);
    expect(failed.core.run.jobs.find((j) => j.removed)?.message).toBe('removed: decode resized to 1; not drained: gateway http://127.0.0.1:9 got no answer (ECONNREFUSED)');
    const cut = pass(structuredClone(landed.core), [{ kind: 'drained', id: 2, left: 3, error: null }], T0 + 7000);
    expect(cut.core.run.jobs.find((j) => j.removed)?.message).toBe(`removed: decode resized to 1; 3 requests still in flight after ${DRAIN_TIMEOUT_S} s`);
  });

  it('a task has no routing', () => {
    const plan = { ...pd(), service: undefined };
    expect(pushes(pass(coreOf(plan), [], T0).effects)).toEqual([]);
    expect(coreOf(plan).service).toBeNull();
  });

  it('whatever the order of job events and answers: generations rise, one push at a time, and settled means the table matches the state', () => {
    const step = fc.oneof(
      fc.record({ kind: fc.constant('job' as const), n: fc.integer({ min: 0, max: 2 }), what: fc.constantFrom('running', 'ready', 'exited') }),
      fc.record({ kind: fc.constant('answer' as const), ok: fc.boolean() }),
      fc.record({ kind: fc.constant('wait' as const), ms: fc.integer({ min: 0, max: 20_000 }) }),
    );
    fc.assert(
      fc.property(fc.array(step, { maxLength: 40 }), (steps) => {
        let core = serving();
        let now = T0 + 4000;
        let inFlight: number | null = null;
        let last = core.service!.generation;
        for (const s of steps) {
          let events: RunEvent[] = [];
          if (s.kind === 'wait') now += s.ms;
          if (s.kind === 'answer' && inFlight !== null) {
            events = [pushed(inFlight, s.ok ? {} : { error: 'down' })];
            inFlight = null;
          }
          if (s.kind === 'job') {
            const job = core.run.jobs[s.n]!;
            const ev = s.what === 'running' ? running(s.n, job.attempt) : s.what === 'ready' ? ready(s.n, job.attempt) : exited(s.n, 1, job.attempt);
            events = [jobs(core, [ev])];
          }
          const out = pass(core, events, now);
          core = out.core;
          for (const p of pushes(out.effects)) {
            expect(inFlight).toBeNull();
            expect(p.generation).toBeGreaterThanOrEqual(last);
            last = p.generation;
            inFlight = p.generation;
          }
        }
        if (inFlight === null && routesSettled(core)) expect(core.service!.delivered_key).toBe(core.service!.key);
      }),
      { numRuns: 200 },
    );
  });
});

describe("the table's probes and hold", () => {
  it("carries the entry group's probes that go on after READY, as the gateways validate them, and no hold unless an entry group scales to zero", () => {
    const plan = openService(
      ['{name: web, replicas: 1, commands: [serve]}'],
      ['probes:', '  - {type: http, url: /health, interval: 2s}', '  - {type: http, url: /ready, until_ready: true}'],
    );
    const table = tableOf(coreOf(plan));
    expect(table.probes).toEqual([{ type: 'http', url: '/health', method: 'get', headers: [], body: null, timeout_s: 10, interval_s: 2, ready_after: 1, until_ready: false }]);
    expect(ServiceTableSchema.safeParse({ ...table, generation: 1 }).success).toBe(true);
    expect(table.hold_s).toBeUndefined();
    expect(tableOf(coreOf(openService(['{name: web, replicas: 1, commands: [serve]}']))).probes).toBeUndefined();
  });
});


describe("a replica behind its fleet's proxy_jump", () => {
  const FINGERPRINT = `SHA256:${'A'.repeat(43)}`;
  /** An SSH fleet instance's details (src/fleet/ssh-backend.ts): its target, with a jump host or not. */
  const sshDetails = (n: number, jump: Record<string, unknown> | null) => ({
    fleet: 'f',
    host_index: String(n),
    target: JSON.stringify({ hostname: `10.9.0.${n + 1}`, port: 22, user: 'root', identity_file: '/keys/id', ...(jump ? { proxy_jump: jump } : {}) }),
    host_key: '',
    base_dir: '/root/.troupe/jobs',
  });
  const onHost = (n: number, details: Record<string, string>) => {
    const event = provisioned(n);
    return { ...event, instance: { ...(event as { instance: Instance }).instance, internal_ip: `10.9.0.${n + 1}`, details } };
  };
  const rowsOf = (details: (n: number) => Record<string, string>) => {
    const plan = openService(['{name: web, replicas: 3, commands: [serve]}']);
    let core = coreOf(plan);
    core = pass(core, [jobs(core, [0, 1, 2].map((n) => onHost(n, details(n)))), { kind: 'unlocked' }, { kind: 'announced' }], T0 + 1000).core;
    core = pass(core, [jobs(core, [0, 1, 2].map((n) => running(n)))], T0 + 2000).core;
    core = pass(core, [jobs(core, [0, 1, 2].map((n) => ready(n)))], T0 + 3000).core;
    const table = tableOf(core);
    expect(ServiceTableSchema.safeParse({ ...table, generation: 1 }).success).toBe(true);
    return table.revisions[0]?.groups[0]?.replicas;
  };

  it('gets the jump host in its row (`via`: where, who, the key its fleet verified; never the key file), a host reached directly none', () => {
    const jump = { hostname: '203.0.113.7', port: 2222, user: 'ops', identity_file: '/keys/jump', host_key_fingerprints: [FINGERPRINT] };
    expect(rowsOf((n) => sshDetails(n, n === 1 ? null : jump))).toEqual([
      { url: 'http://10.9.0.1:8000', state: 'ready', via: { host: '203.0.113.7', port: 2222, user: 'ops', host_key_fingerprints: [FINGERPRINT] } },
      { url: 'http://10.9.0.2:8000', state: 'ready' },
      { url: 'http://10.9.0.3:8000', state: 'ready', via: { host: '203.0.113.7', port: 2222, user: 'ops', host_key_fingerprints: [FINGERPRINT] } },
    ]);
  });

  it("a host reached by another name than the replica's (internal_ip) and no proxy_jump: the host itself, straight first", () => {
    const own = (n: number): Record<string, string> => ({
      ...sshDetails(n, null),
      target: JSON.stringify({ hostname: `gpu-${n}.example.com`, port: 22, user: 'root', identity_file: '/keys/id', host_key_fingerprints: [FINGERPRINT] }),
    });
    expect(rowsOf((n) => (n === 1 ? sshDetails(n, null) : own(n)))).toEqual([
      { url: 'http://10.9.0.1:8000', state: 'ready', via: { host: 'gpu-0.example.com', port: 22, user: 'root', host_key_fingerprints: [FINGERPRINT], direct_first: true } },
      { url: 'http://10.9.0.2:8000', state: 'ready' },
      { url: 'http://10.9.0.3:8000', state: 'ready', via: { host: 'gpu-2.example.com', port: 22, user: 'root', host_key_fingerprints: [FINGERPRINT], direct_first: true } },
    ]);
  });

  it('a jump host its fleet has not verified yet has no fingerprint; details of another backend or unreadable give no via', () => {
    const replicas = rowsOf((n): Record<string, string> => (n === 0 ? sshDetails(n, { hostname: 'bastion.example.com', port: 22, user: 'ops', identity_file: '/k' }) : n === 1 ? { namespace: 'x' } : { target: '{not json' }));
    expect(replicas?.map((r) => r.via ?? null)).toEqual([{ host: 'bastion.example.com', port: 22, user: 'ops' }, null, null]);
  });
});
