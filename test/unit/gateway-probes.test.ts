import fc from 'fast-check';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { GatewayMetrics } from '../../src/gateway/gateway-metrics';
import { GatewayServices } from '../../src/gateway/gateway-services';
import { chooseReplica, chooseRevision } from '../../src/gateway/replica-choice';
import { afterProbe, isServing, startStreaks } from '../../src/gateway/probe-streaks';
import { ReplicaProbes, type ProbeCheck } from '../../src/gateway/replica-probes';
import { ServiceTableSchema, type ServiceTableInput, type TableProbe } from '../../src/gateway/routing-table';

/**
 * Probes after READY (issue 27): the pure streaks and the prober's start and stop, with fake timers. The
 * gateway over real HTTP taking a replica out and back: gateway-data-plane.test.ts.
 */

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  vi.useRealTimers();
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function probe(extra: Partial<TableProbe> = {}): TableProbe {
  return { type: 'http', url: '/health', method: 'get', headers: [], body: null, timeout_s: 1, interval_s: 1, ready_after: 2, until_ready: false, ...extra };
}

/** Service `web`, revision 0, one group `main` of these replicas (`url` or `url draining`). */
function table(replicas: string[], probes?: TableProbe[]): ServiceTableInput {
  const listed = replicas.map((r) => ({ url: r.split(' ')[0] ?? r, state: r.endsWith(' draining') ? ('draining' as const) : ('ready' as const) }));
  return { run: 'web', generation: 0, auth: null, current_revision: 0, revisions: [{ number: 0, entry: ['main'], groups: [{ name: 'main', replicas: listed }] }], ...(probes ? { probes } : {}) };
}

describe('probe streaks (a replica in or out)', () => {
  const probes = [{ ready_after: 2 }, { ready_after: 1 }];

  it('starts serving, goes out on one failure, comes back after ready_after passes in a row', () => {
    let s = startStreaks(probes);
    expect(isServing(s, probes)).toBe(true);
    s = afterProbe(s, probes, 0, false);
    expect(isServing(s, probes)).toBe(false);
    s = afterProbe(s, probes, 0, true);
    expect(isServing(s, probes)).toBe(false);
    s = afterProbe(s, probes, 1, false);
    s = afterProbe(s, probes, 0, true);
    expect(isServing(s, probes)).toBe(false); // probe 1 still failing
    s = afterProbe(s, probes, 1, true);
    expect(isServing(s, probes)).toBe(true);
    expect(() => afterProbe(s, probes, 2, true)).toThrow(/not one of the replica's probes/);
  });

  it('serves exactly when each probe has no failure, or ready_after passes since its last one (any sequence)', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 1, maxLength: 3 }), fc.array(fc.tuple(fc.nat(), fc.boolean()), { maxLength: 40 }), (readyAfters, events) => {
        const ps = readyAfters.map((ready_after) => ({ ready_after }));
        let s = startStreaks(ps);
        const seen: boolean[][] = ps.map(() => []);
        for (const [n, passed] of events) {
          const i = n % ps.length;
          s = afterProbe(s, ps, i, passed);
          seen[i]?.push(passed);
          const expected = ps.every((p, j) => {
            const results = seen[j] ?? [];
            const lastFail = results.lastIndexOf(false);
            return lastFail === -1 || results.length - 1 - lastFail >= p.ready_after;
          });
          expect(isServing(s, ps)).toBe(expected);
        }
      }),
    );
  });
});

describe('the routing table\'s probes', () => {
  it('a table without probes parses as before, with none; a bad probe is refused with its field', () => {
    const parsed = ServiceTableSchema.parse(table(['http://10.0.0.5:8000']));
    expect(parsed.probes).toEqual([]);
    expect(ServiceTableSchema.parse(table([], [probe()])).probes).toEqual([probe()]);
    // What the config accepts passes: a space in the path, a dotted header name.
    const written = probe({ url: '/health check', headers: [{ name: 'X.Probe', value: 'yes' }] });
    expect(ServiceTableSchema.parse(table([], [written])).probes).toEqual([written]);
    const bad = ServiceTableSchema.safeParse(table([], [probe({ url: 'http://elsewhere/x', interval_s: 0 })]));
    expect(bad.success).toBe(false);
    expect(bad.error?.issues.map((i) => i.path.join('.')).sort()).toEqual(['probes.0.interval_s', 'probes.0.url']);
  });
});

/** A check the test answers: each call waits until `answer` says pass or fail. */
function heldCheck(): { check: ProbeCheck; calls: Array<{ origin: string; probe: TableProbe; answer: (passed: boolean) => void; signal: AbortSignal }> } {
  const calls: Array<{ origin: string; probe: TableProbe; answer: (passed: boolean) => void; signal: AbortSignal }> = [];
  const check: ProbeCheck = (origin, p, signal) => new Promise((resolve) => calls.push({ origin, probe: p, answer: resolve, signal }));
  return { check, calls };
}

describe('ReplicaProbes (fake timers)', () => {
  it('probes each ready entry replica once at a time, every interval after the last ended, and stops with the replica, the service or close()', async () => {
    vi.useFakeTimers();
    const { check, calls } = heldCheck();
    const failing: Array<[string, string[]]> = [];
    const probes = new ReplicaProbes({ metrics: new GatewayMetrics(() => 0), onFailing: (run, urls) => failing.push([run, [...urls]]), check });
    const t = (replicas: string[]) => ServiceTableSchema.parse(table(replicas, [probe({ interval_s: 5 }), probe({ url: '/ready', until_ready: true })]));
    probes.sync('web', t(['http://a:1', 'http://b:1 draining']));
    // Only the probe that goes on after READY, only the ready replica, at once.
    expect(calls.map((c) => [c.origin, c.probe.url])).toEqual([['http://a:1', '/health']]);
    await vi.advanceTimersByTimeAsync(20_000);
    expect(calls).toHaveLength(1); // still waiting on its answer: never a second one meanwhile
    calls[0]?.answer(false);
    await vi.advanceTimersByTimeAsync(0);
    expect(failing).toEqual([['web', ['http://a:1']]]);
    await vi.advanceTimersByTimeAsync(4_999);
    expect(calls).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(calls).toHaveLength(2);
    calls[1]?.answer(true);
    await vi.advanceTimersByTimeAsync(5_000);
    calls[2]?.answer(true);
    await vi.advanceTimersByTimeAsync(0);
    expect(failing).toEqual([['web', ['http://a:1']], ['web', []]]);

    // b becomes ready: probed too; a removed: its probe in flight aborted, no further one.
    await vi.advanceTimersByTimeAsync(5_000);
    probes.sync('web', t(['http://b:1']));
    expect(calls[3]?.signal.aborted).toBe(true);
    expect(probes.probing('web')).toEqual(['http://b:1']);
    expect(calls.at(-1)?.origin).toBe('http://b:1');
    calls.at(-1)?.answer(true);
    await vi.advanceTimersByTimeAsync(0);
    expect(vi.getTimerCount()).toBe(1);
    // The service gone: nothing left to run.
    probes.sync('web', undefined);
    expect(probes.probing('web')).toEqual([]);
    expect(vi.getTimerCount()).toBe(0);

    probes.sync('web', t(['http://c:1']));
    probes.close();
    expect(calls.at(-1)?.signal.aborted).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
    probes.sync('web', t(['http://c:1']));
    expect(probes.probing('web')).toEqual([]);
  });

  it('no probe after READY (none, or all until_ready): nothing is probed and a failing replica comes back', async () => {
    vi.useFakeTimers();
    const { check, calls } = heldCheck();
    const failing: Array<[string, string[]]> = [];
    const probes = new ReplicaProbes({ metrics: new GatewayMetrics(() => 0), onFailing: (run, urls) => failing.push([run, [...urls]]), check });
    probes.sync('web', ServiceTableSchema.parse(table(['http://a:1'])));
    probes.sync('web', ServiceTableSchema.parse(table(['http://a:1'], [probe({ until_ready: true })])));
    expect(calls).toHaveLength(0);
    probes.sync('web', ServiceTableSchema.parse(table(['http://a:1'], [probe()])));
    calls[0]?.answer(false);
    await vi.advanceTimersByTimeAsync(0);
    probes.sync('web', ServiceTableSchema.parse(table(['http://a:1'])));
    expect(failing).toEqual([['web', ['http://a:1']], ['web', []]]);
    expect(vi.getTimerCount()).toBe(0);
  });
});

describe('GatewayServices with replicas whose probes fail', () => {
  it('chooses only the others; with none left, holds a request until a replica passes again', async () => {
    const services = new GatewayServices({ connectTimeoutMs: 1000 });
    cleanups.push(() => services.close());
    services.put(ServiceTableSchema.parse(table(['http://a:1', 'http://b:1'], [probe()])));
    const entries = () => services.get('web')?.entries ?? [];
    // As the data plane chooses: a revision with a passing replica, else one with a ready replica all the same.
    const choose = () => {
      const entry = chooseRevision(entries(), 0) ?? chooseRevision(entries().map((e) => ({ ...e, ready: e.listed })), 0);
      return entry && chooseReplica(entry.candidates, () => 0, services.nextTurn())?.replica.url;
    };
    services.setProbesFailing('web', ['http://b:1']);
    expect(Array.from({ length: 4 }, choose)).toEqual(['http://a:1', 'http://a:1', 'http://a:1', 'http://a:1']);
    services.setProbesFailing('web', ['http://a:1', 'http://b:1']);
    // None passes: no revision is ready by its probes, and every ready replica is chosen all the same (a panic).
    expect(chooseRevision(entries(), 0)).toBeUndefined();
    expect(new Set(Array.from({ length: 4 }, choose))).toEqual(new Set(['http://a:1', 'http://b:1']));
    const released = new Promise<string | undefined>((resolve) => services.hold('web', (served) => resolve(served?.table.run)));
    // A new table keeps the verdicts: a request held meanwhile stays held until one passes.
    services.put(ServiceTableSchema.parse({ ...table(['http://a:1', 'http://b:1'], [probe()]), generation: 1 }));
    expect(chooseRevision(entries(), 0)).toBeUndefined();
    services.setProbesFailing('web', ['http://a:1']);
    await expect(released).resolves.toBe('web');
    expect(choose()).toBe('http://b:1');
    expect(services.probesFailing()).toEqual([{ run: 'web', urls: ['http://a:1'] }]);
    services.delete('web');
    expect(services.probesFailing()).toEqual([]);
  });
});
