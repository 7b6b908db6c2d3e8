/**
 * One task at a time, asked for often: a request while the task runs makes it run once more after
 * (however many requests came), never twice at once. What notifiers and exports nodes use to claim
 * work: a poll, a local job and a freed slot may all ask at the same moment.
 */
export class Coalesced {
  private running: Promise<void> | null = null;
  private again = false;
  private closed = false;

  constructor(
    private readonly task: () => Promise<void>,
    private readonly onError: (err: unknown) => void,
  ) {}

  /** Runs the task now, or once more after the run in progress. */
  request(): void {
    if (this.closed) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.task()
      .catch(this.onError)
      .finally(() => {
        this.running = null;
        if (this.again) {
          this.again = false;
          this.request();
        }
      });
  }

  /** From inside the task: run once more when this run ends. */
  repeat(): void {
    this.again = true;
  }

  /** No run after this; resolves when the one in progress (if any) has ended. */
  async close(): Promise<void> {
    this.closed = true;
    this.again = false;
    await this.running;
  }
}

/**
 * One timer for the earliest of the moments asked for: `at(t)` wakes `fire` at `t` (ms since the
 * epoch, plus 5 ms) unless a wake is already set no later; the timer does not hold the process.
 * What the notifier uses for its earliest retry and campaigns for the earliest scheduled campaign.
 */
export class EarliestWake {
  private timer: NodeJS.Timeout | null = null;
  private when = Number.POSITIVE_INFINITY;

  constructor(private readonly fire: () => void) {}

  at(t: number): void {
    if (t >= this.when) return;
    if (this.timer) clearTimeout(this.timer);
    this.when = t;
    this.timer = setTimeout(
      () => {
        this.timer = null;
        this.when = Number.POSITIVE_INFINITY;
        this.fire();
      },
      Math.max(0, t - Date.now()) + 5,
    );
    this.timer.unref();
  }

  clear(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.when = Number.POSITIVE_INFINITY;
  }
}
