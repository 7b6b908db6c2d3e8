/**
 * lib/db/group-commit.ts on its own: grouping while a write is in flight (and none when idle), the
 * group bounds, and failure isolation (halving down to the failing submission; none on an error of
 * the way to the database). The writer here is a plain in-memory store with a commit that takes a
 * few milliseconds, all or nothing per group.
 */
import { GroupCommitter, isInfrastructureError } from "../../lib/db/group-commit";

interface Call {
  id: string;
  n: number;
  bytes?: number;
  bad?: boolean;
}

/** An in-memory "database": each write commits all its calls or none, after `ms`. */
function store(ms = 5) {
  const committed: string[] = [];
  const groups: string[][] = [];
  let attempts = 0;
  const write = async (calls: Call[]) => {
    attempts++;
    await new Promise((r) => setTimeout(r, ms));
    const bad = calls.find((c) => c.bad);
    if (bad) throw Object.assign(new Error(`refused ${bad.id}`), { code: "22P05" });
    committed.push(...calls.map((c) => c.id));
    groups.push(calls.map((c) => c.id));
    return calls.map((c) => `ok ${c.id}`);
  };
  return { committed, groups, write, attempts: () => attempts };
}

const calls = (n: number, over: (i: number) => Partial<Call> = () => ({})): Call[] => Array.from({ length: n }, (_, i) => ({ id: `c${i}`, n: 1, ...over(i) }));

describe("GroupCommitter", () => {
  it("writes a lone call at once, alone, without waiting for company", async () => {
    const s = store(1);
    const c = new GroupCommitter<Call, string>(s.write, { items: (x) => x.n });
    // No timer, no tick: the write has begun before submit() returns (a wall-clock bound here
    // failed on a loaded CI machine while proving less).
    const answer = c.submit({ id: "a", n: 1 });
    expect(s.attempts()).toBe(1);
    expect(c.inFlight).toBe(1);
    expect(c.pending).toBe(0);
    expect(await answer).toBe("ok a");
    expect(s.groups).toEqual([["a"]]);
  });

  it("gathers what queued while the slots were busy into one group, each call answered with its own result", async () => {
    const s = store();
    const c = new GroupCommitter<Call, string>(s.write, { maxConcurrent: 2, items: (x) => x.n });
    const all = calls(20);
    const answers = await Promise.all(all.map((x) => c.submit(x)));
    expect(answers).toEqual(all.map((x) => `ok ${x.id}`));
    // The first two start at once (two slots); the other 18 queue and go together.
    expect(s.groups).toEqual([["c0"], ["c1"], all.slice(2).map((x) => x.id)]);
    expect(c.stats).toMatchObject({ groups: 3, committed: 20, failed: 0, largest: 18, splits: 0 });
  });

  it("bounds a group by items and by bytes; a call above either bound still goes, alone", async () => {
    const s = store();
    const c = new GroupCommitter<Call, string>(s.write, { maxConcurrent: 1, maxItems: 10, maxBytes: 1000, items: (x) => x.n, bytes: (x) => x.bytes ?? 0 });
    const all: Call[] = [
      { id: "first", n: 1 },
      { id: "a", n: 6 },
      { id: "b", n: 4 },
      { id: "c", n: 1 },
      { id: "huge", n: 25 },
      { id: "d", n: 1, bytes: 600 },
      { id: "e", n: 1, bytes: 600 },
    ];
    await Promise.all(all.map((x) => c.submit(x)));
    expect(s.groups).toEqual([["first"], ["a", "b"], ["c"], ["huge"], ["d"], ["e"]]);
  });

  it("isolates a failing call by halving the group: the others commit, only that one fails", async () => {
    const s = store();
    const c = new GroupCommitter<Call, string>(s.write, { maxConcurrent: 1, items: (x) => x.n });
    const all = [{ id: "first", n: 1 }, ...calls(16, (i) => ({ bad: i === 11 }))];
    const settled = await Promise.allSettled(all.map((x) => c.submit(x)));
    expect(settled.filter((r) => r.status === "rejected").map((r) => (r as PromiseRejectedResult).reason.message)).toEqual(["refused c11"]);
    expect(settled[12]).toMatchObject({ status: "rejected" });
    expect(new Set(s.committed)).toEqual(new Set(all.filter((x) => !x.bad).map((x) => x.id)));
    // 16 calls in one group: 1 failed write, then halves 8+8, 4+4, 2+2, 1+1: 2 log2(16) writes besides, not 16.
    expect(s.attempts()).toBe(1 + 1 + 2 * 4);
    expect(c.stats).toMatchObject({ committed: 16, failed: 1, splits: 4 });
  });

  it("fails the whole group at once, without halving, when the database is not reachable", async () => {
    let attempts = 0;
    const c = new GroupCommitter<Call, void>(
      async () => {
        attempts++;
        await new Promise((r) => setTimeout(r, 2));
        throw Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
      },
      { maxConcurrent: 1 },
    );
    const settled = await Promise.allSettled(calls(9).map((x) => c.submit(x)));
    expect(settled.every((r) => r.status === "rejected")).toBe(true);
    expect(attempts).toBe(2); // the first call alone, then the other 8 as one group
    expect(c.stats.splits).toBe(0);
  });
});

describe("isInfrastructureError", () => {
  it.each([
    [{ code: "ECONNREFUSED" }, true],
    [{ name: "SequelizeConnectionAcquireTimeoutError" }, true],
    [{ original: { code: "57P01" } }, true],
    [{ parent: { code: "08006" } }, true],
    [{ message: "Connection terminated unexpectedly" }, true],
    // A statement's socket error as Sequelize wraps it (SequelizeDatabaseError, the driver's error kept as `original`).
    [{ name: "SequelizeDatabaseError", message: "read ECONNRESET", original: { code: "ECONNRESET" } }, true],
    [{ name: "SequelizeDatabaseError", message: "x", original: { message: "Connection terminated unexpectedly" } }, true],
    [{ original: { code: "22P05" } }, false],
    [{ code: "23505" }, false],
    [{ code: "P0001" }, false],
    [new TypeError("x is undefined"), false],
  ])("%j -> %s", (err, expected) => {
    expect(isInfrastructureError(err)).toBe(expected);
  });
});
