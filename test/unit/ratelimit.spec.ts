import { TokenBuckets } from "../../services/gateway/gateway.ratelimit";

describe("TokenBuckets", () => {
  it("allows a burst of twice the rate, then refills at the rate", () => {
    let now = 0;
    const b = new TokenBuckets(5, 2, 1000, () => now);
    const first = Array.from({ length: 10 }, () => b.take("k"));
    expect(first.every((d) => d.allowed)).toBe(true);
    expect(first[0]).toMatchObject({ limit: 10, remaining: 9 });
    const refused = b.take("k");
    expect(refused).toMatchObject({ allowed: false, remaining: 0, retryAfterS: 1 });
    now = 0.2; // one token back
    expect(b.take("k").allowed).toBe(true);
    expect(b.take("k").allowed).toBe(false);
    now = 10;
    expect(b.take("k")).toMatchObject({ allowed: true, remaining: 9 });
  });

  it("keeps one bucket per id", () => {
    const b = new TokenBuckets(1, 2, 1000, () => 0);
    b.take("a");
    b.take("a");
    expect(b.take("a").allowed).toBe(false);
    expect(b.take("b").allowed).toBe(true);
  });

  it("stays bounded in memory", () => {
    let now = 0;
    const b = new TokenBuckets(100, 2, 100, () => now);
    for (let i = 0; i < 1000; i++) {
      now += 1;
      b.take(`k${i}`);
    }
    expect((b as unknown as { buckets: Map<string, unknown> }).buckets.size).toBeLessThanOrEqual(100);
  });
});
