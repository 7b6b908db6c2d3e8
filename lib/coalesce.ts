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
