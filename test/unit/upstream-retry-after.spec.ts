/** lib/http/upstream.ts: a 429's Retry-After read as delay-seconds or an HTTP date, bounded. */
import { RETRY_AFTER_MAX_MS, retryAfterMs } from "../../lib/http/upstream";

describe("retryAfterMs", () => {
  it("reads seconds and HTTP dates, bounds them, and ignores what it cannot read", () => {
    const now = Date.UTC(2030, 0, 1);
    expect(retryAfterMs("4", now)).toBe(4000);
    expect(retryAfterMs(new Date(now + 10_000).toUTCString(), now)).toBe(10_000);
    expect(retryAfterMs(new Date(now - 10_000).toUTCString(), now)).toBe(0);
    expect(retryAfterMs("999999", now)).toBe(RETRY_AFTER_MAX_MS);
    expect(retryAfterMs(undefined, now)).toBeUndefined();
    expect(retryAfterMs("soon", now)).toBeUndefined();
    expect(retryAfterMs(["2", "9"], now)).toBe(2000);
  });
});
