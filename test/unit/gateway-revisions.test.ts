import { describe, expect, it } from 'vitest';
import { LATENCY_BOUNDS_MS, latencyBucket, latencyQuantile, mergeFigures, ServiceWindow, windowParam, type FiguresPart } from '../../src/gateway/figures';
import { GatewayServices } from '../../src/gateway/gateway-services';
import { chooseRevision } from '../../src/gateway/replica-choice';
import { describeTableIssues, ServiceTableSchema, type ServiceTableInput } from '../../src/gateway/routing-table';

/** The pure parts of version-coherent routing: traffic shares, the fallback, the figures' window and percentiles, the table's checks. */

function table(revisions: Array<{ number: number; traffic?: number; ready?: boolean }>, current: number, extra: Partial<ServiceTableInput> = {}): ServiceTableInput {
  return {
    run: 'web',
    generation: 0,
    auth: null,
    current_revision: current,
    revisions: revisions.map((r) => ({
      number: r.number,
      entry: ['router'],
      groups: [{ name: 'router', replicas: [{ url: `http://10.0.0.${r.number + 1}:8000`, state: r.ready === false ? ('draining' as const) : ('ready' as const) }] }],
      ...(r.traffic !== undefined ? { traffic: r.traffic } : {}),
    })),
    ...extra,
  };
}

function entries(input: ServiceTableInput) {
  const services = new GatewayServices({ connectTimeoutMs: 1000 });
  services.put(ServiceTableSchema.parse(input));
  return services.get('web')?.entries ?? [];
}

describe('ServiceTableSchema: traffic shares and hold_s', () => {
  it('takes a table without them as before: no traffic, no hold', () => {
    const parsed = ServiceTableSchema.parse(table([{ number: 0 }], 0));
    expect(parsed.hold_s).toBe(0);
    expect(parsed.revisions[0]?.traffic).toBeUndefined();
  });

  it('refuses shares over 100 and a share given to the current revision, saying so', () => {
    const over = ServiceTableSchema.safeParse(table([{ number: 3 }, { number: 1, traffic: 60 }, { number: 2, traffic: 50 }], 3));
    expect(over.success).toBe(false);
    expect(describeTableIssues(over.error!)).toBe('revisions: the revisions other than the current one take 110% of the traffic (1: 60, 2: 50); together at most 100');
    const current = ServiceTableSchema.safeParse(table([{ number: 1, traffic: 90 }, { number: 2, traffic: 10 }], 1));
    expect(current.success).toBe(false);
    expect(describeTableIssues(current.error!)).toBe(
      'revisions.0.traffic: revision 1 is the current one, which takes the traffic the others leave (100 − theirs): give it no traffic field',
    );
    expect(ServiceTableSchema.safeParse(table([{ number: 1 }], 1, { hold_s: 901 })).success).toBe(false);
    expect(ServiceTableSchema.safeParse(table([{ number: 1 }, { number: 2, traffic: 101 }], 1)).success).toBe(false);
    expect(ServiceTableSchema.safeParse(table([{ number: 1 }, { number: 2, traffic: 100 }], 1, { hold_s: 900 })).success).toBe(true);
  });

  it('gives the current revision what the others leave, and lists it first', () => {
    const shares = entries(table([{ number: 1, traffic: 10 }, { number: 2 }, { number: 3, traffic: 5 }], 2)).map((e) => [e.revision, e.share]);
    expect(shares).toEqual([[2, 85], [1, 10], [3, 5]]);
  });
});

describe('chooseRevision', () => {
  const e = (revision: number, share: number, ready = true) => ({ revision, share, ready });

  it('draws by share', () => {
    const all = [e(2, 90), e(1, 10)];
    expect(chooseRevision(all, 0)?.revision).toBe(2);
    expect(chooseRevision(all, 89.99)?.revision).toBe(2);
    expect(chooseRevision(all, 90)?.revision).toBe(1);
    expect(chooseRevision(all, 99.99)?.revision).toBe(1);
    // A share of 0 never draws, even at its edge.
    expect(chooseRevision([e(2, 100), e(1, 0)], 99.99)?.revision).toBe(2);
    // Over many rolls, the shares hold.
    const counts = new Map<number, number>();
    for (let i = 0; i < 1000; i++) {
      const r = chooseRevision([e(2, 70), e(1, 20), e(0, 10)], (i * 100) / 1000)?.revision ?? -1;
      counts.set(r, (counts.get(r) ?? 0) + 1);
    }
    expect(Object.fromEntries(counts)).toEqual({ 2: 700, 1: 200, 0: 100 });
  });

  it('falls back from a revision with nothing ready to the current one, then to any with a ready replica', () => {
    expect(chooseRevision([e(2, 90), e(1, 10, false)], 95)?.revision).toBe(2);
    expect(chooseRevision([e(2, 0, false), e(1, 60, false), e(0, 40)], 10)?.revision).toBe(0);
    expect(chooseRevision([e(2, 0), e(1, 100, false)], 50)?.revision).toBe(2);
    expect(chooseRevision([e(2, 100, false), e(1, 0, false)], 50)).toBeUndefined();
    expect(chooseRevision([], 50)).toBeUndefined();
  });

  it('works on the entries a table makes: a draining-only canary gives way', () => {
    const made = entries(table([{ number: 1 }, { number: 2, traffic: 100, ready: false }], 1));
    expect(made.map((x) => [x.revision, x.share, x.ready])).toEqual([[1, 0, true], [2, 100, false]]);
    expect(chooseRevision(made, 50)?.revision).toBe(1);
  });
});

describe('latency percentiles', () => {
  it('buckets by upper bound, each 20 % above the last', () => {
    expect(latencyBucket(0)).toBe(0);
    expect(latencyBucket(1)).toBe(0);
    expect(latencyBucket(1.1)).toBe(1);
    expect(latencyBucket(10 ** 9)).toBe(LATENCY_BOUNDS_MS.length);
    for (let i = 1; i < LATENCY_BOUNDS_MS.length; i++) expect((LATENCY_BOUNDS_MS[i] as number) / (LATENCY_BOUNDS_MS[i - 1] as number)).toBeCloseTo(1.2, 2);
  });

  it('takes the quantile of the counts, within a bucket of the true one', () => {
    const counts = new Array<number>(LATENCY_BOUNDS_MS.length + 1).fill(0);
    // 1..1000 ms, one each: p50 ≈ 500, p95 ≈ 950.
    for (let ms = 1; ms <= 1000; ms++) (counts[latencyBucket(ms)] as number) += 1;
    const p50 = latencyQuantile(counts, 0.5) as number;
    const p95 = latencyQuantile(counts, 0.95) as number;
    expect(p50).toBeGreaterThan(500 / 1.2);
    expect(p50).toBeLessThan(500 * 1.2);
    expect(p95).toBeGreaterThan(950 / 1.2);
    expect(p95).toBeLessThan(950 * 1.2);
    expect(latencyQuantile(new Array<number>(5).fill(0), 0.5)).toBeNull();
    expect(latencyQuantile([], 0.95)).toBeNull();
  });
});

describe('ServiceWindow and mergeFigures', () => {
  const t0 = 1_000_000_000;

  it('counts the last window seconds only, slots reused as time goes round', () => {
    const w = new ServiceWindow();
    w.ended(1, false, 10, t0);
    w.ended(1, true, null, t0 + 500);
    w.arrived(1, 'router', t0);
    w.held(t0);
    w.ended(1, false, 10, t0 + 10_000);
    const at10 = w.part(30, t0 + 10_000);
    expect(at10.revisions).toEqual([expect.objectContaining({ revision: 1, requests: 3, errors: 1 })]);
    expect(at10.groups).toEqual([{ revision: 1, group: 'router', requests: 1, inflight: 0 }]);
    expect(at10.held_total).toBe(1);
    // 5 s back takes in only the last request.
    expect(w.part(5, t0 + 10_000).revisions[0]?.requests).toBe(1);
    // 300 s on, the first second's slot is another second's: nothing of it counts.
    w.ended(2, false, 10, t0 + 300_000);
    const later = w.part(300, t0 + 300_000);
    expect(later.revisions.map((r) => [r.revision, r.requests]).sort((a, b) => (a[0] as number) - (b[0] as number))).toEqual([[1, 1], [2, 1]]);
    expect(later.held_total).toBe(0);
  });

  it('adds up the parts of several processes and takes percentiles of the merged counts, not their average', () => {
    const fast = new ServiceWindow();
    const slow = new ServiceWindow();
    for (let i = 0; i < 90; i++) fast.ended(1, false, 10, t0);
    for (let i = 0; i < 10; i++) slow.ended(1, i < 4, 1000, t0);
    fast.arrived(1, 'router', t0);
    slow.arrived(1, 'router', t0);
    const parts: FiguresPart[] = [
      { ...fast.part(10, t0), held: 1 },
      { ...slow.part(10, t0), held: 2 },
    ];
    const merged = mergeFigures('web', 10, parts);
    expect(merged.revisions).toHaveLength(1);
    const r = merged.revisions[0]!;
    expect([r.requests, r.errors, r.error_rate]).toEqual([100, 4, 0.04]);
    // 90 % at 10 ms, 10 % at 1 s: the p50 is ~10 ms and the p95 ~1 s; an average of the two processes' p95 would be ~500.
    expect(r.latency_p50_ms).toBeLessThan(12);
    expect(r.latency_p95_ms).toBeGreaterThan(1000 / 1.2);
    expect(merged.groups).toEqual([{ revision: 1, group: 'router', requests: 2, rps: 0.2, inflight: 0 }]);
    expect([merged.held, merged.held_total]).toEqual([3, 0]);
  });

  it('lists every revision and entry group of the table, with what is in flight', () => {
    const services = new GatewayServices({ connectTimeoutMs: 1000 });
    services.put(ServiceTableSchema.parse(table([{ number: 1 }, { number: 2, traffic: 10 }], 1)));
    const key = services.get('web')?.entries[1]?.candidates[0]?.key as string;
    services.enter(key);
    const figures = mergeFigures('web', 30, [services.figuresPart('web', 30, Date.now())]);
    expect(figures.revisions).toEqual([
      { revision: 2, requests: 0, errors: 0, error_rate: 0, latency_p50_ms: null, latency_p95_ms: null, inflight: 1 },
      { revision: 1, requests: 0, errors: 0, error_rate: 0, latency_p50_ms: null, latency_p95_ms: null, inflight: 0 },
    ]);
    expect(figures.groups).toEqual([
      { revision: 2, group: 'router', requests: 0, rps: 0, inflight: 1 },
      { revision: 1, group: 'router', requests: 0, rps: 0, inflight: 0 },
    ]);
  });

  it('holds a request until a table brings a ready replica, counting it held meanwhile', () => {
    const services = new GatewayServices({ connectTimeoutMs: 1000 });
    services.put(ServiceTableSchema.parse(table([{ number: 1, ready: false }], 1, { hold_s: 30 })));
    const got: Array<number | undefined> = [];
    services.hold('web', (s) => got.push(s?.table.generation));
    const stop = services.hold('web', (s) => got.push(s?.table.generation));
    expect(services.figuresPart('web', 30, Date.now()).held).toBe(2);
    // A client gone: no longer held.
    stop();
    expect(services.figuresPart('web', 30, Date.now()).held).toBe(1);
    // A table with still nothing ready wakes no one.
    services.put(ServiceTableSchema.parse({ ...table([{ number: 1, ready: false }], 1), generation: 1 }));
    expect(got).toEqual([]);
    services.put(ServiceTableSchema.parse({ ...table([{ number: 1 }], 1), generation: 2 }));
    expect(got).toEqual([2]);
    const part = services.figuresPart('web', 30, Date.now());
    expect([part.held, part.held_total]).toEqual([0, 2]);
    // A service taken off the gateway lets its held requests go, with no service.
    services.hold('web', (s) => got.push(s?.table.generation));
    services.delete('web');
    expect(got).toEqual([2, undefined]);
  });
});

describe('windowParam', () => {
  it('takes whole seconds 1..300, 30 when absent', () => {
    expect(windowParam(null)).toBe(30);
    expect(windowParam('300')).toBe(300);
    expect(windowParam('0')).toBe('window wants whole seconds from 1 to 300, not "0"');
    expect(typeof windowParam('1.5')).toBe('string');
    expect(typeof windowParam('301')).toBe('string');
  });
});
