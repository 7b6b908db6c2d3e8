import { startTestApp, type TestApp } from "../helpers/app";
import { expectProblem } from "../helpers/expect";

/** A gateway with a small limit (5 requests per second, burst 10) so that limits are reached quickly. */
const RPS = 5;
const BURST = 2 * RPS;
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ config: { rateLimitRps: RPS } });
});
afterAll(() => t?.stop());

/**
 * Sends `n` requests at once and answers them with the time they took. A token bucket lets at most
 * the burst plus what refills meanwhile through, however fast or slow the machine is; the counts
 * are checked against that, not against a window measured in milliseconds.
 */
async function burst<T extends { status: number }>(n: number, send: () => Promise<T>) {
  const started = Date.now();
  const results = await Promise.all(Array.from({ length: n }, send));
  const seconds = (Date.now() - started) / 1000;
  return { results, allowedAtMost: BURST + Math.ceil(RPS * seconds) };
}

// Every test uses keys of its own (a bucket each); only the per-address bucket of the last test is shared.
describe("rate limiting", () => {
  it("carries RateLimit headers on every answer and refuses past the burst with 429 and Retry-After", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    const other = await t.newAccount(["AUTHENTICATION"]);
    const first = await a.api.get("/authentication/me");
    expect(first.headers.get("ratelimit-limit")).toBe(String(BURST)); // 5/s, burst 2x
    expect(Number(first.headers.get("ratelimit-remaining"))).toBeLessThan(BURST);
    expect(first.headers.get("ratelimit-reset")).toMatch(/^\d+$/);
    const { results, allowedAtMost } = await burst(40, () => a.api.get("/authentication/me"));
    const limited = results.filter((r) => r.status === 429);
    expect(results.length - limited.length).toBeLessThanOrEqual(allowedAtMost);
    expect(limited.length).toBeGreaterThanOrEqual(1);
    expectProblem(limited[0]!, 429);
    expect(Number(limited[0]!.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(limited[0]!.headers.get("ratelimit-remaining")).toBe("0");
    // Another key has its own bucket.
    expect((await other.api.get("/authentication/me")).status).toBe(200);
  });
});

describe("RateLimit headers", () => {
  it("carries RateLimit headers on answers refused before or without authentication", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "SMS"]);
    for (const res of [
      await t.api.get("/no-such-route"),
      await t.api.request("PATCH", "/authentication"),
      await a.api.request("POST", "/authentication", { raw: "{", headers: { "content-type": "application/json" } }),
      await a.api.request("POST", "/authentication", { raw: "x", headers: { "content-type": "text/plain" } }),
      await t.api.get("/openapi.json"),
    ]) {
      expect(res.headers.get("ratelimit-limit")).toBe(String(BURST));
      expect(res.headers.get("ratelimit-remaining")).toMatch(/^\d+$/);
    }
  });
});

it("limits requests without a valid key per client address", async () => {
  const { results, allowedAtMost } = await burst(40, () => t.api.get("/authentication/me", { headers: { "x-api-key": "pgw_" + "B".repeat(43) } }));
  expect(results.every((r) => r.status === 401 || r.status === 429)).toBe(true);
  const limited = results.filter((r) => r.status === 429);
  // The address's bucket may have been drawn on by the requests above: at most the burst gets through.
  expect(results.length - limited.length).toBeLessThanOrEqual(allowedAtMost);
  expect(limited.length).toBeGreaterThanOrEqual(1);
  expectProblem(limited[0]!, 429);
});
