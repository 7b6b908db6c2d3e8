/**
 * lib/jobs/pacer.ts: a rate shared by the callers of one process (CAMPAIGN_NODE_RATE). Callers are
 * served in the order they asked, units spread evenly; unused units given back bring the next turn
 * earlier; an aborted wait takes nothing.
 */
import { Pacer } from "../../lib/jobs/pacer";

const elapsed = async (f: () => Promise<unknown>) => {
  const t0 = performance.now();
  await f();
  return performance.now() - t0;
};

it("lets the first take through at once and spaces the next ones by their units (a lower bound: never early)", async () => {
  const p = new Pacer(100); // 100 units a second: 10 units take 100 ms
  expect(await elapsed(() => p.take(10))).toBeLessThan(50);
  const order: number[] = [];
  const both = elapsed(() => Promise.all([p.take(10).then(() => order.push(1)), p.take(10).then(() => order.push(2))]));
  expect(await both).toBeGreaterThanOrEqual(195);
  expect(order).toEqual([1, 2]);
});

it("brings the next turn earlier by what is given back", async () => {
  const p = new Pacer(100);
  await p.take(50); // the next turn is 500 ms away
  p.refund(50); // none of it used
  expect(await elapsed(() => p.take(1))).toBeLessThan(100);
});

it("answers false at once when its signal aborts, and gives the units back", async () => {
  const p = new Pacer(10);
  await p.take(10); // the next turn is a second away
  const abort = new AbortController();
  const waiting = p.take(10, abort.signal);
  setTimeout(() => abort.abort(), 20);
  const t0 = performance.now();
  expect(await waiting).toBe(false);
  expect(performance.now() - t0).toBeLessThan(500);
  expect(await p.take(1, AbortSignal.abort())).toBe(false);
  expect(() => new Pacer(0)).toThrow(/above 0/);
});
