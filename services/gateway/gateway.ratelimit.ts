/**
 * Per-key token buckets: `rate` tokens a second, holding at most `burst`. One bucket per API key
 * (or per client address for requests without a valid key), kept in this gateway replica's memory.
 */
export interface RateDecision {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Seconds until the bucket is full again (RateLimit-Reset). */
  resetS: number;
  /** Seconds until one token is available (Retry-After), when refused. */
  retryAfterS: number;
}

interface Bucket {
  tokens: number;
  at: number;
  /** When it last moved to the back of the least-recently-used order. */
  moved: number;
}

/** A bucket moves to the back of the eviction order at most this often (seconds): not on every request. */
const REORDER_S = 1;

export class TokenBuckets {
  private readonly buckets = new Map<string, Bucket>();
  readonly burst: number;

  constructor(
    readonly rate: number,
    burstFactor = 2,
    private readonly maxBuckets = 100_000,
    private readonly now: () => number = () => performance.now() / 1000,
  ) {
    this.burst = Math.max(1, Math.round(rate * burstFactor));
  }

  take(id: string): RateDecision {
    const t = this.now();
    let b = this.buckets.get(id);
    if (!b) {
      if (this.buckets.size >= this.maxBuckets) this.evictFull(t);
      b = { tokens: this.burst, at: t, moved: t };
      this.buckets.set(id, b);
    } else {
      b.tokens = Math.min(this.burst, b.tokens + (t - b.at) * this.rate);
      b.at = t;
      if (t - b.moved >= REORDER_S) {
        // Re-inserted: Map order is least recently used first (to within REORDER_S).
        this.buckets.delete(id);
        this.buckets.set(id, b);
        b.moved = t;
      }
    }
    const allowed = b.tokens >= 1;
    if (allowed) b.tokens -= 1;
    const remaining = Math.floor(b.tokens);
    return {
      allowed,
      limit: this.burst,
      remaining,
      resetS: Math.ceil((this.burst - b.tokens) / this.rate),
      retryAfterS: allowed ? 0 : Math.max(1, Math.ceil((1 - b.tokens) / this.rate)),
    };
  }

  /** Returns a token taken by `take` (the request it was charged for turned out not to count). */
  giveBack(id: string): void {
    const b = this.buckets.get(id);
    if (b) b.tokens = Math.min(this.burst, b.tokens + 1);
  }

  /** Drops buckets that have refilled completely (they hold no state worth keeping). */
  private evictFull(t: number): void {
    for (const [id, b] of this.buckets) {
      if (b.tokens + (t - b.at) * this.rate >= this.burst) this.buckets.delete(id);
      if (this.buckets.size < this.maxBuckets * 0.9) return;
    }
    const first = this.buckets.keys().next();
    if (!first.done) this.buckets.delete(first.value);
  }
}
