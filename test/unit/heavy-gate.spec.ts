/** The node's heavy-read slots (lib/db/heavy.ts HeavyGate): per-account share, bounded queue, round-robin hand-over, waits that end. */
import { HeavyGate, type HeavyLimits } from "../../lib/db/heavy";

const limits = (o: Partial<HeavyLimits> = {}): HeavyLimits => ({
  perAccount: 2,
  perNode: 3,
  queuePerAccount: 2,
  queueWaitMs: 10_000,
  oneSession: false,
  statementTimeoutMs: 20_000,
  ...o,
});
const status = (e: unknown) => (e as { code?: number }).code;

describe("HeavyGate", () => {
  it("runs at most perAccount of one account, queues queuePerAccount more and refuses the next with 429", async () => {
    const gate = new HeavyGate(limits());
    const r1 = await gate.enter("a");
    const r2 = await gate.enter("a");
    const waiting = [gate.enter("a"), gate.enter("a")];
    await expect(gate.enter("a")).rejects.toMatchObject({ code: 429, data: { retryAfter: expect.any(Number) } });
    expect(gate.usage("a")).toEqual({ running: 2, account: 2, waiting: 2 });
    r1();
    r1(); // a second call gives nothing back twice
    const r3 = await waiting[0]!;
    expect(gate.usage("a")).toEqual({ running: 2, account: 2, waiting: 1 });
    r2();
    r3();
    (await waiting[1]!)();
    expect(gate.usage("a")).toEqual({ running: 0, account: 0, waiting: 0 });
  });

  it("lets another account in at once while one account's queue waits, and hands freed node slots out in turn", async () => {
    const gate = new HeavyGate(limits({ perAccount: 3, perNode: 3, queuePerAccount: 10 }));
    const a = await Promise.all([gate.enter("a"), gate.enter("a"), gate.enter("a")]);
    const order: string[] = [];
    const queued = ["a", "a", "a", "b", "c"].map((who) => gate.enter(who).then((release) => (order.push(who), release)));
    a[0]!();
    a[1]!();
    a[2]!();
    // a, then b and c before a's second and third waiter.
    const served = await Promise.all([queued[0]!, queued[3]!, queued[4]!]);
    expect(order).toEqual(["a", "b", "c"]);
    served.forEach((r) => r());
    (await queued[1]!)();
    (await queued[2]!)();
    expect(order).toEqual(["a", "b", "c", "a", "a"]);
  });

  it("ends a wait after queueWaitMs with 429, and refuses at once with no queue", async () => {
    const gate = new HeavyGate(limits({ perAccount: 1, queueWaitMs: 30 }));
    const r = await gate.enter("a");
    const start = Date.now();
    const err = await gate.enter("a").catch((e: unknown) => e);
    expect(status(err)).toBe(429);
    expect(Date.now() - start).toBeGreaterThanOrEqual(25);
    expect(gate.usage("a").waiting).toBe(0);
    const none = new HeavyGate(limits({ perAccount: 1, queuePerAccount: 0 }));
    await none.enter("a");
    await expect(none.enter("a")).rejects.toMatchObject({ code: 429 });
    r();
  });

  it("gives the slot back when the work throws", async () => {
    const gate = new HeavyGate(limits({ perAccount: 1 }));
    await expect(gate.run("a", () => Promise.reject(new Error("boom")))).rejects.toThrow("boom");
    expect(gate.usage("a")).toEqual({ running: 0, account: 0, waiting: 0 });
    await expect(gate.run("a", async () => 7)).resolves.toBe(7);
  });
});
