import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { openLoop } from '../../bench/harness/open-loop';

describe('bench open-loop load', () => {
  it('sends rate × seconds requests on schedule, whatever the answers, and counts failures', async () => {
    let calls = 0;
    const t0 = performance.now();
    const result = await openLoop({
      rate: 200,
      seconds: 0.25,
      // Far above a 2 ms answer even on a loaded machine: only the thrown errors fail.
      timeoutMs: 30_000,
      send: async () => {
        // Its own number, taken before it waits: requests overlap (a late timer sends a backlog at once).
        const n = (calls += 1);
        await sleep(2);
        if (n % 10 === 0) throw new Error('boom');
      },
    });
    const elapsed = performance.now() - t0;
    expect(result.sent).toBe(50);
    expect(calls).toBe(50);
    expect(result.failed).toBe(5);
    expect(result.errors[0]).toBe('boom');
    expect(result.latenciesMs).toHaveLength(45);
    // At least the 2 ms answer (a timer may fire up to ~1 ms early by performance.now()).
    expect(Math.min(...result.latenciesMs)).toBeGreaterThanOrEqual(1);
    // The last request leaves at 245 ms: the schedule is kept (no upper bound: a loaded machine may be late).
    expect(elapsed).toBeGreaterThanOrEqual(240);
  });

  it('charges a stall to every request scheduled during it (no coordinated omission)', async () => {
    // A server that answers one request at a time, and stalls 100 ms on the first.
    let queue = Promise.resolve();
    let first = true;
    const send = () => {
      const mine = queue.then(() => sleep(first ? ((first = false), 100) : 0));
      queue = mine;
      return mine;
    };
    const result = await openLoop({ rate: 200, seconds: 0.5, send });
    expect(result.sent).toBe(100);
    expect(result.failed).toBe(0);
    const sorted = [...result.latenciesMs].sort((a, b) => a - b);
    // ~20 requests were scheduled during the stall: each waited for it from its scheduled time on.
    // A closed loop at the same rate would have sent them late and reported one slow request.
    expect(sorted.filter((ms) => ms >= 50).length).toBeGreaterThanOrEqual(8);
    expect(sorted[sorted.length - 1]).toBeGreaterThanOrEqual(95);
  });

  it('aborts a request still unanswered after the timeout and counts it failed', async () => {
    const result = await openLoop({
      rate: 100,
      seconds: 0.05,
      timeoutMs: 30,
      send: (signal) =>
        new Promise((_, reject) => signal.addEventListener('abort', () => reject(new Error('timed out')))),
    });
    expect(result.sent).toBe(5);
    expect(result.failed).toBe(5);
    expect(result.latenciesMs).toHaveLength(0);
  });

  it('refuses a rate or duration that is not positive', () => {
    expect(() => openLoop({ rate: 0, seconds: 1, send: async () => {} })).toThrow(/positive/);
  });
});
