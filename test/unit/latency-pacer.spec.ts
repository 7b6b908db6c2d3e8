/**
 * lib/jobs/latency-pacer.ts: bulk work halves its units at once while its statements run well above
 * the least recent duration (a queue in the database), at most once per half second, and adds one
 * back at a time once they run near it again; acquire() holds a unit back while the limit is reached.
 */
import { LatencyPacer } from "../../lib/jobs/latency-pacer";

function clock() {
  let t = 0;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

describe("LatencyPacer", () => {
  it("keeps its maximum while the durations stay near the floor", () => {
    const c = clock();
    const p = new LatencyPacer(8, c.now);
    for (let i = 0; i < 50; i++) {
      p.observe(10 + (i % 3));
      c.advance(100);
    }
    expect(p.limit).toBe(8);
    expect(p.floor).toBe(10);
  });

  it("halves under a queue, at most once per 500 ms, down to one; and comes back one at a time", () => {
    const c = clock();
    const p = new LatencyPacer(8, c.now);
    for (let i = 0; i < 20; i++) p.observe(10);
    const limits: number[] = [];
    for (let i = 0; i < 40; i++) {
      c.advance(100);
      p.observe(200); // 20x the floor
      limits.push(p.limit);
    }
    expect(limits.slice(0, 5)).toEqual([8, 8, 8, 8, 4]); // the smoothed duration climbs first; then one cut
    expect(limits[9]).toBe(2);
    expect(limits[39]).toBe(1);
    const back: number[] = [];
    for (let i = 0; i < 60; i++) {
      c.advance(100);
      p.observe(10);
      back.push(p.limit);
    }
    expect(back[back.length - 1]).toBe(8);
    // One at a time, at most every 250 ms.
    for (let i = 1; i < back.length; i++) expect(back[i]! - back[i - 1]!).toBeLessThanOrEqual(1);
  });

  it("holds an acquire back while the limit is reached, and lets it go on release or abort", async () => {
    const c = clock();
    const p = new LatencyPacer(1, c.now);
    await p.acquire();
    let started = false;
    const second = p.acquire().then(() => (started = true));
    await Promise.resolve();
    expect(started).toBe(false);
    p.release();
    await second;
    expect(started).toBe(true);
    const ac = new AbortController();
    let third = false;
    const t = p.acquire(ac.signal).then(() => (third = true));
    await Promise.resolve();
    expect(third).toBe(false);
    ac.abort();
    await t;
    expect(third).toBe(true);
  });
});
