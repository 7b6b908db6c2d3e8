/**
 * Bulk work that backs off when the database slows down (issue 33 item 4: bulk sending must not
 * starve interactive work). The work's own statements are the probe: each one's duration is
 * observed, the least of the recent ones is what the database takes unloaded (the floor), and a
 * smoothed recent duration well above it means a queue (CPU, locks, I/O) that interactive requests
 * stand in too. Then the work halves how many units it runs at once (at most once per CUT_EVERY_MS);
 * back near the floor it adds one again (at most once per RAISE_EVERY_MS), up to its maximum.
 * TCP Vegas' idea: react to the delay that builds up, before anything is dropped.
 */

/** Recent durations kept for the floor. */
const WINDOW = 256;
/** Smoothing of the recent duration (weight of the newest). */
const ALPHA = 0.2;
/** Loaded: the recent duration above SLOW_FACTOR x the floor plus SLOW_MARGIN_MS. */
const SLOW_FACTOR = 3;
const SLOW_MARGIN_MS = 5;
/** Unloaded again: below FAST_FACTOR x the floor plus FAST_MARGIN_MS. */
const FAST_FACTOR = 1.5;
const FAST_MARGIN_MS = 2;
const CUT_EVERY_MS = 500;
const RAISE_EVERY_MS = 250;

export class LatencyPacer {
  private readonly recent: number[] = [];
  private smoothed: number | null = null;
  private allowed: number;
  private running = 0;
  private lastCut = 0;
  private lastRaise = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(
    private readonly max: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.allowed = max;
  }

  /** How many units may run at once now. */
  get limit(): number {
    return this.allowed;
  }

  /** The least recent duration (ms), or null before any. */
  get floor(): number | null {
    return this.recent.length ? Math.min(...this.recent) : null;
  }

  /** A statement of the work took `ms`. */
  observe(ms: number): void {
    this.recent.push(ms);
    if (this.recent.length > WINDOW) this.recent.shift();
    this.smoothed = this.smoothed === null ? ms : ALPHA * ms + (1 - ALPHA) * this.smoothed;
    const floor = this.floor!;
    const t = this.now();
    if (this.smoothed > SLOW_FACTOR * floor + SLOW_MARGIN_MS) {
      if (this.allowed > 1 && t - this.lastCut >= CUT_EVERY_MS) {
        this.allowed = Math.max(1, Math.ceil(this.allowed / 2));
        this.lastCut = t;
      }
    } else if (this.smoothed < FAST_FACTOR * floor + FAST_MARGIN_MS && this.allowed < this.max && t - this.lastRaise >= RAISE_EVERY_MS) {
      this.allowed++;
      this.lastRaise = t;
      this.wakeOne();
    }
  }

  /** Resolves when a unit may start (or at once once `signal` aborts); pair with release(). */
  acquire(signal?: AbortSignal): Promise<void> {
    if (this.running < this.allowed || signal?.aborted) {
      this.running++;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      const go = () => {
        signal?.removeEventListener("abort", go);
        const i = this.waiting.indexOf(go);
        if (i >= 0) this.waiting.splice(i, 1);
        this.running++;
        resolve();
      };
      this.waiting.push(go);
      signal?.addEventListener("abort", go, { once: true });
    });
  }

  /** A unit ended. */
  release(): void {
    this.running--;
    this.wakeOne();
  }

  private wakeOne(): void {
    while (this.running < this.allowed && this.waiting.length > 0) this.waiting[0]!();
  }
}
