import { startTestApp, type TestApp } from "../helpers/app";
import { expectProblem } from "../helpers/expect";

/** A gateway with a small limit (5 requests per second, burst 10) so that limits are reached quickly. */
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ config: { rateLimitRps: 5 } });
});
afterAll(() => t?.stop());

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("rate limiting", () => {
  beforeEach(() => pause(2100)); // every bucket full again

  it("carries RateLimit headers on every answer and refuses past the burst with 429 and Retry-After", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    const other = await t.newAccount(["AUTHENTICATION"]);
    const first = await a.api.get("/authentication/me");
    expect(first.headers.get("ratelimit-limit")).toBe("10"); // 5/s, burst 2x
    expect(Number(first.headers.get("ratelimit-remaining"))).toBeLessThan(10);
    expect(first.headers.get("ratelimit-reset")).toMatch(/^\d+$/);
    const results = await Promise.all(Array.from({ length: 30 }, () => a.api.get("/authentication/me")));
    const limited = results.filter((r) => r.status === 429);
    expect(limited.length).toBeGreaterThanOrEqual(3);
    expectProblem(limited[0]!, 429);
    expect(Number(limited[0]!.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(limited[0]!.headers.get("ratelimit-remaining")).toBe("0");
    // Another key has its own bucket.
    expect((await other.api.get("/authentication/me")).status).toBe(200);
  });
});

describe("RateLimit headers", () => {
  beforeEach(() => pause(2100));
  it("carries RateLimit headers on answers refused before or without authentication", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "SMS"]);
    for (const res of [
      await t.api.get("/no-such-route"),
      await t.api.request("PATCH", "/authentication"),
      await a.api.request("POST", "/authentication", { raw: "{", headers: { "content-type": "application/json" } }),
      await a.api.request("POST", "/authentication", { raw: "x", headers: { "content-type": "text/plain" } }),
      await t.api.get("/openapi.json"),
    ]) {
      expect(res.headers.get("ratelimit-limit")).toBe("10");
      expect(res.headers.get("ratelimit-remaining")).toMatch(/^\d+$/);
    }
  });
});

it("limits requests without a valid key per client address", async () => {
  await pause(2100);
  const results = await Promise.all(Array.from({ length: 30 }, () => t.api.get("/authentication/me", { headers: { "x-api-key": "pgw_" + "B".repeat(43) } })));
  expect(results.every((r) => r.status === 401 || r.status === 429)).toBe(true);
  const limited = results.filter((r) => r.status === 429);
  expect(limited.length).toBeGreaterThanOrEqual(3);
  expectProblem(limited[0]!, 429);
});
