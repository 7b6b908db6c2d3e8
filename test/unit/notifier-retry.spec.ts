/** The retry schedule as data (contract "Event delivery"): base * 2^(n-1) + 0-20 %, 5 attempts, the 10-day window. */
import { afterFailure, MAX_ATTEMPTS, nextAttemptAt, RETRY_WINDOW_MS } from "../../services/notifier/notifier.delivery";

const BASE = 300_000;
const T = Date.UTC(2026, 10, 23);

describe("retry schedule", () => {
  it.each([1, 2, 3, 4])("puts attempt %i + 1 base * 2^(n-1) later, plus at most 20 %", (n) => {
    expect(nextAttemptAt(n, T, BASE, () => 0)).toBe(T + BASE * 2 ** (n - 1));
    expect(nextAttemptAt(n, T, BASE, () => 0.999999)).toBeCloseTo(T + BASE * 2 ** (n - 1) * 1.2, -1);
  });

  it("retries attempts 1 to 4 and fails the 5th for good", () => {
    for (let n = 1; n < MAX_ATTEMPTS; n++) expect(afterFailure(n, T, T, BASE).outcome).toBe("RETRYING");
    expect(afterFailure(5, T, T, BASE)).toEqual({ outcome: "FAILED", next: null });
    expect(MAX_ATTEMPTS).toBe(5);
  });

  it("makes no retry that would fall more than 10 days after the message was sent", () => {
    const sent = T - RETRY_WINDOW_MS + BASE; // the retry after attempt 1 lands just inside, with no jitter
    expect(afterFailure(1, T, sent, BASE, () => 0).outcome).toBe("RETRYING");
    expect(afterFailure(1, T, sent, BASE, () => 0.5)).toEqual({ outcome: "EXPIRED", next: null });
    expect(afterFailure(1, T, T - 11 * 86400_000, BASE)).toEqual({ outcome: "EXPIRED", next: null });
  });
});
