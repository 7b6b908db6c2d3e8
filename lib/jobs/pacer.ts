/**
 * A rate shared by the callers of one process (a campaigns node's CAMPAIGN_NODE_RATE): `take(n)`
 * reserves n units at once and answers when their turn has come, so callers go in the order they
 * asked and none is starved; units are spread evenly (no burst beyond the first call). `refund(n)`
 * gives back units reserved and not used (a claim that took fewer recipients), moving the next turn
 * earlier. A take whose signal aborts answers false at once; its units are refunded.
 */
export class Pacer {
  private next = 0;

  constructor(private readonly perSecond: number) {
    if (!(perSecond > 0)) throw new Error(`a pacer needs a rate above 0, not ${perSecond}`);
  }

  /** Waits for n units (true), or until `signal` aborts (false, nothing taken). */
  take(n: number, signal?: AbortSignal): Promise<boolean> {
    if (signal?.aborted) return Promise.resolve(false);
    const now = performance.now();
    const start = Math.max(now, this.next);
    this.next = start + (n * 1000) / this.perSecond;
    const wait = start - now;
    if (wait <= 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const onAbort = () => {
        clearTimeout(timer);
        this.refund(n);
        resolve(false);
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener("abort", onAbort);
        resolve(true);
      }, wait);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** Gives back n units taken and not used. */
  refund(n: number): void {
    if (n > 0) this.next = Math.max(performance.now(), this.next - (n * 1000) / this.perSecond);
  }
}
