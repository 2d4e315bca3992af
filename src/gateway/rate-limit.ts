import type { RateLimit } from './routing-table';

/** The bucket count past which idle (full) buckets are forgotten: a flood of new keys cannot grow memory without end. */
const MAX_BUCKETS = 10_000;

interface Bucket {
  tokens: number;
  at: number;
}

export type RateVerdict = { allowed: true } | { allowed: false; retryAfterSeconds: number };

/**
 * A service's rate limits: the longest matching prefix decides, each (limit, key) has a token bucket
 * that holds burst + 1 and refills at rps. `now` is in milliseconds and comes in, so tests need no clock.
 */
export class RateLimiter {
  private readonly limits: RateLimit[];
  private readonly buckets = new Map<string, Bucket>();

  constructor(limits: readonly RateLimit[]) {
    this.limits = [...limits].sort((a, b) => b.prefix.length - a.prefix.length);
  }

  /** Whether any limit is set: none, and a request needs no path or key worked out for it. */
  get active(): boolean {
    return this.limits.length > 0;
  }

  /** The limit that governs `path` (the path as the service sees it, before strip_prefix). */
  limitFor(path: string): RateLimit | undefined {
    return this.limits.find((limit) => path.startsWith(limit.prefix));
  }

  check(path: string, keyOf: (limit: RateLimit) => string, now: number): RateVerdict {
    const limit = this.limitFor(path);
    if (!limit) return { allowed: true };
    const capacity = limit.burst + 1;
    const id = `${limit.prefix}\0${keyOf(limit)}`;
    const bucket = this.buckets.get(id) ?? { tokens: capacity, at: now };
    bucket.tokens = Math.min(capacity, bucket.tokens + ((now - bucket.at) / 1000) * limit.rps);
    bucket.at = now;
    if (!this.buckets.has(id)) {
      if (this.buckets.size >= MAX_BUCKETS) this.forgetFull(now);
      this.buckets.set(id, bucket);
    }
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return { allowed: true };
    }
    return { allowed: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - bucket.tokens) / limit.rps)) };
  }

  private forgetFull(now: number): void {
    for (const [id, bucket] of this.buckets) {
      const limit = this.limits.find((l) => id.startsWith(`${l.prefix}\0`));
      if (!limit || bucket.tokens + ((now - bucket.at) / 1000) * limit.rps >= limit.burst + 1) this.buckets.delete(id);
    }
  }
}
