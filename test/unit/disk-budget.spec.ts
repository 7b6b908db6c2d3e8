import { loadConfig } from "../../lib/config";
import { DiskBudget, diskFull, DISK_FULL_RETRY_AFTER_S, noRoom } from "../../lib/jobs/disk-budget";

describe("DiskBudget", () => {
  it("never promises more than the node total, however many reservations are taken at once", async () => {
    const budget = new DiskBudget(1000);
    // Many concurrent requests, each reserving as its first step (as acceptUpload and the spool do).
    const taken = await Promise.all(Array.from({ length: 100 }, (_, i) => Promise.resolve().then(() => budget.reserve(`acct-${i}`, 30))));
    const granted = taken.filter((r) => r !== null);
    expect(granted).toHaveLength(33);
    expect(budget.used()).toBe(990);
    expect(budget.reserve("another", 11)).toBeNull();
    expect(budget.reserve("another", 10)).not.toBeNull();
    expect(budget.used()).toBe(1000);
  });

  it("keeps one account within its share, leaving room for the others", () => {
    const budget = new DiskBudget(1000, 500);
    expect(budget.reserve("a", 300)).not.toBeNull();
    expect(budget.reserve("a", 201)).toBeNull();
    expect(budget.reserve("a", 200)).not.toBeNull();
    expect(budget.reserve("a", 1)).toBeNull();
    expect(budget.used("a")).toBe(500);
    expect(budget.reserve("b", 500)).not.toBeNull();
    expect(budget.reserve("c", 1)).toBeNull();
    expect(budget.used()).toBe(1000);
  });

  it("gives the bytes back once, however many times a reservation is released", () => {
    const budget = new DiskBudget(100, 100);
    const a = budget.reserve("a", 60)!;
    const b = budget.reserve("b", 40)!;
    a.release();
    a.release();
    a.release();
    expect(budget.used()).toBe(40);
    expect(budget.used("a")).toBe(0);
    expect(a.bytes).toBe(0);
    expect(a.growTo(10)).toBe(false);
    b.release();
    expect(budget.used()).toBe(0);
    expect(budget.reserve("c", 100)).not.toBeNull();
  });

  it("grows a reservation as bytes arrive and refuses the growth that does not fit, keeping what it held", () => {
    const budget = new DiskBudget(100, 80);
    const r = budget.reserve("a", 0)!;
    expect(r.growTo(50)).toBe(true);
    expect(r.growTo(30)).toBe(true); // never shrinks
    expect(r.bytes).toBe(50);
    expect(r.growTo(81)).toBe(false); // past the account's share
    expect(r.bytes).toBe(50);
    expect(budget.reserve("b", 40)).not.toBeNull();
    expect(r.growTo(61)).toBe(false); // past the node total
    expect(r.growTo(60)).toBe(true);
    expect(budget.used()).toBe(100);
    r.release();
    expect(budget.used()).toBe(40);
  });

  it("holds at most a quarter of the spool (and of the import queue) for one account by default, the rest for the others", () => {
    const config = loadConfig({});
    const spool = DiskBudget.withShare(config.spoolMaxBytes, config.uploadAccountShare);
    const quarter = config.spoolMaxBytes / 4;
    expect(spool.accountMaxBytes).toBe(quarter);
    // Many uploads of one account, each reserving its declared length: they stop at a quarter.
    const held = Array.from({ length: 22 }, () => spool.reserve("a", 95 * 1024 * 1024));
    expect(held.filter((r) => r !== null)).toHaveLength(Math.floor(quarter / (95 * 1024 * 1024)));
    expect(spool.used("a")).toBeLessThanOrEqual(quarter);
    expect(spool.reserve("b", quarter)).not.toBeNull();
    expect(DiskBudget.withShare(config.importQueueMaxBytes, config.uploadAccountShare).accountMaxBytes).toBe(config.importQueueMaxBytes / 4);
    // A share never passes the node total, and rounds down to whole bytes.
    expect(DiskBudget.withShare(1001, 0.25).accountMaxBytes).toBe(250);
    expect(DiskBudget.withShare(1000, 1).accountMaxBytes).toBe(1000);
  });

  it("answers a refusal past the account's share with a 429 (another account still fits), past the node total with a 503", () => {
    const budget = DiskBudget.withShare(1000, 0.25);
    const detail = { account: "yours are full", node: "all are full" };
    expect(budget.reserve("a", 200)).not.toBeNull();
    expect(budget.reserve("a", 51)).toBeNull();
    const share = noRoom(budget, "a", 51, detail);
    expect({ code: share.code, type: share.type, message: share.message, data: share.data }).toEqual({
      code: 429,
      type: "UPLOAD_SHARE_EXCEEDED",
      message: "yours are full",
      data: { retryAfter: DISK_FULL_RETRY_AFTER_S },
    });
    // A reservation that grows past the share is told the same.
    const growing = budget.reserve("a", 0)!;
    expect(growing.growTo(51)).toBe(false);
    expect(noRoom(budget, "a", 51 - growing.bytes, detail).code).toBe(429);
    // The node fills with other accounts: whoever still has a share left meets the node's 503.
    for (const acct of ["b", "c", "d"]) expect(budget.reserve(acct, 250)).not.toBeNull();
    expect(budget.reserve("e", 51)).toBeNull();
    const node = noRoom(budget, "e", 51, detail);
    expect({ code: node.code, type: node.type, message: node.message, data: node.data }).toEqual({
      code: 503,
      type: "SERVICE_UNAVAILABLE",
      message: "all are full",
      data: { retryAfter: DISK_FULL_RETRY_AFTER_S },
    });
  });

  it("refuses a negative or non-finite size", () => {
    const budget = new DiskBudget(100);
    expect(budget.reserve("a", -1)).toBeNull();
    expect(budget.reserve("a", Number.NaN)).toBeNull();
    expect(budget.used()).toBe(0);
  });

  it("answers a full budget with a 503 that says when to retry", () => {
    const err = diskFull("full");
    expect(err.code).toBe(503);
    expect(err.type).toBe("SERVICE_UNAVAILABLE");
    expect(err.data).toEqual({ retryAfter: DISK_FULL_RETRY_AFTER_S });
  });
});
