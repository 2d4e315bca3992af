import { describe, expect, it } from 'vitest';
import { judgeCanary, MIN_REQUESTS } from './rollout-gates';

const gates = { error_rate: 0.05, p95_factor: 2, progress_deadline_s: 600 };
const old = (errors = 0, p95: number | null = 50) => ({ revision: 0, requests: 100, errors, p95_ms: p95 });
const canary = (requests: number, errors: number, p95: number | null = 50) => ({ revision: 1, requests, errors, p95_ms: p95 });

describe("a canary's gate", () => {
  it('judges nothing on too few requests', () => {
    expect(judgeCanary(gates, [old(), canary(MIN_REQUESTS - 1, MIN_REQUESTS - 1)], 0, 1)).toEqual({ ok: true, note: 'revision 1 answered 9 requests: too few to judge' });
    expect(judgeCanary(gates, [old()], 0, 1).ok).toBe(true);
  });
  it('fails an error rate above the gate and above the old revision’s', () => {
    expect(judgeCanary(gates, [old(), canary(20, 4)], 0, 1)).toEqual({ ok: false, why: "error rate 20% (4 of 20) above 5% and the old revision's 0%" });
    // The old revision fails as often: not the canary's fault.
    expect(judgeCanary(gates, [old(25), canary(20, 4)], 0, 1).ok).toBe(true);
    expect(judgeCanary(gates, [old(), canary(100, 5)], 0, 1).ok).toBe(true);
  });
  it('fails a p95 above p95_factor × the old revision’s, only with enough of both', () => {
    expect(judgeCanary(gates, [old(0, 50), canary(20, 0, 101)], 0, 1)).toEqual({ ok: false, why: "p95 101 ms above 2 × the old revision's 50 ms" });
    expect(judgeCanary(gates, [old(0, 50), canary(20, 0, 99)], 0, 1)).toEqual({ ok: true, note: 'revision 1: 0 errors of 20, p95 99 ms' });
    expect(judgeCanary(gates, [{ ...old(0, 50), requests: 5 }, canary(20, 0, 500)], 0, 1).ok).toBe(true);
  });
});
