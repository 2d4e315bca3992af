/**
 * An open-loop load: requests leave on a fixed schedule (the i-th at start + i / rate), whether or not
 * earlier ones have answered, and each latency is measured from its *scheduled* send time. A slow
 * answer therefore cannot hold back the requests behind it and hide its cost (coordinated omission,
 * which a closed loop or a rate-limited closed loop such as autocannon's `--overallRate` suffers);
 * time the generator itself falls behind its schedule counts against the target too, and `maxLagMs`
 * says how far behind it fell. Written here because no npm load generator does this (wrk2 does, but
 * is not in Debian).
 */

export interface OpenLoopOptions {
  /** Requests per second. */
  rate: number;
  seconds: number;
  /** Sends one request; resolves when its answer is complete, rejects (or throws) when it failed. */
  send: (signal: AbortSignal) => Promise<void>;
  /** A request still unanswered this long after its scheduled time is aborted and counted failed. */
  timeoutMs?: number;
  now?: () => number;
}

export interface OpenLoopResult {
  /** Requests scheduled and sent: rate × seconds, whatever the answers. */
  sent: number;
  /** Milliseconds from each successful request's scheduled send time to its complete answer. */
  latenciesMs: number[];
  failed: number;
  /** The first few failures' messages, for the report. */
  errors: string[];
  /** How late, at worst, the generator sent a request after its scheduled time. */
  maxLagMs: number;
}

export function openLoop(options: OpenLoopOptions): Promise<OpenLoopResult> {
  const { rate, seconds, send, timeoutMs = 10_000, now = () => performance.now() } = options;
  if (!(rate > 0) || !(seconds > 0)) throw new Error(`openLoop: rate and seconds must be positive (rate ${rate}, seconds ${seconds})`);
  const total = Math.round(rate * seconds);
  const interval = 1000 / rate;
  const result: OpenLoopResult = { sent: 0, latenciesMs: [], failed: 0, errors: [], maxLagMs: 0 };
  let pending = 0;
  return new Promise((resolve) => {
    const finishIfDone = () => {
      if (result.sent === total && pending === 0) resolve(result);
    };
    const fire = (scheduled: number) => {
      pending += 1;
      result.sent += 1;
      const signal = AbortSignal.timeout(Math.max(1, Math.round(timeoutMs - (now() - scheduled))));
      Promise.resolve()
        .then(() => send(signal))
        .then(
          () => {
            result.latenciesMs.push(now() - scheduled);
          },
          (err: unknown) => {
            result.failed += 1;
            if (result.errors.length < 5) result.errors.push(err instanceof Error ? err.message : String(err));
          },
        )
        .finally(() => {
          pending -= 1;
          finishIfDone();
        });
    };
    const start = now();
    const tick = () => {
      const t = now();
      // Everything due by now leaves at once: a late timer sends its backlog, it does not skip it.
      while (result.sent < total && start + result.sent * interval <= t) {
        const scheduled = start + result.sent * interval;
        result.maxLagMs = Math.max(result.maxLagMs, t - scheduled);
        fire(scheduled);
      }
      if (result.sent < total) setTimeout(tick, Math.max(0, start + result.sent * interval - now()));
      else finishIfDone();
    };
    tick();
  });
}
