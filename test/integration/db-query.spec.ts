/**
 * The one query API (lib/db/db.ts: queryRows, execOf, inTransaction on Sequelize's public query and
 * transaction): rows whatever the statement, parameters as `pg` takes them, a transaction committed
 * or rolled back as a whole, a broken connection never handed out again, and the statement limits
 * (the pool's per connection, a heavy read's per transaction) still applied. On PGlite and on the
 * real PostgreSQL (TEST_DATABASE_URL).
 */
import type { Context } from "moleculer";
import { execOf, inTransaction, jsonParam, openDatabase, queryRows, type Database } from "../../lib/db/db";
import { heavyGateOf, withHeavyRead } from "../../lib/db/heavy";
import { createTestDatabase, itWithPostgres, type TestDatabase } from "../helpers/db";
import { startTestApp } from "../helpers/app";
import { isStatementTimedOut } from "../../lib/errors";

let t: TestDatabase;
let db: Database;

beforeAll(async () => {
  t = await createTestDatabase();
  db = t.db;
  await queryRows(db.sequelize, `CREATE TABLE dbq_items (id int PRIMARY KEY, name text, doc jsonb)`);
});
afterAll(() => t?.drop());

it("answers the rows of a SELECT, of an INSERT ... RETURNING, and none of an UPDATE without RETURNING", async () => {
  const inserted = await queryRows<{ id: number; name: string }>(
    db.sequelize,
    `INSERT INTO dbq_items (id, name) VALUES ($1, $2), ($3, $4) RETURNING id, name`,
    [1, "one", 2, "two"],
  );
  expect(inserted).toEqual([
    { id: 1, name: "one" },
    { id: 2, name: "two" },
  ]);
  expect(await queryRows(db.sequelize, `UPDATE dbq_items SET name = upper(name) WHERE id = $1`, [1])).toEqual([]);
  expect(await execOf(db.sequelize)<{ name: string }>(`SELECT name FROM dbq_items ORDER BY id`)).toEqual([{ name: "ONE" }, { name: "two" }]);
});

it("sends an undefined parameter as NULL and a jsonParam through its toPostgres, text with $ and : as it is", async () => {
  const [row] = await queryRows<{ a: null; d: { k: string }; s: string }>(db.sequelize, `SELECT $1::text AS a, $2::jsonb AS d, $3::text AS s`, [
    undefined,
    jsonParam(() => ({ k: "v'\\" })),
    "$1 :name $$ '",
  ]);
  expect(row).toEqual({ a: null, d: { k: "v'\\" }, s: "$1 :name $$ '" });
});

it("commits a transaction's statements together, or none of them when it throws", async () => {
  const out = await inTransaction(db.sequelize, async (exec) => {
    await exec(`INSERT INTO dbq_items (id, name) VALUES ($1, $2)`, [10, "ten"]);
    return (await exec<{ n: string }>(`SELECT count(*) AS n FROM dbq_items WHERE id = $1`, [10]))[0]!.n;
  });
  expect(Number(out)).toBe(1);
  await expect(
    inTransaction(db.sequelize, async (exec) => {
      await exec(`INSERT INTO dbq_items (id, name) VALUES ($1, $2)`, [11, "eleven"]);
      await exec(`INSERT INTO dbq_items (id, name) VALUES ($1, $2)`, [10, "duplicate"]);
    }),
  ).rejects.toMatchObject({ original: { code: "23505" } });
  expect(await queryRows(db.sequelize, `SELECT id FROM dbq_items WHERE id IN (10, 11) ORDER BY id`)).toEqual([{ id: 10 }]);
});

describe("on the real PostgreSQL", () => {
  let own: Database | undefined;
  afterEach(async () => {
    await own?.close();
    own = undefined;
  });
  const openOwn = async () => (own = await openDatabase({ databaseUrl: t.url!, dataDir: null, migrate: false, poolMax: 1, statementTimeoutMs: 4321 }));

  itWithPostgres("never hands out again a connection whose backend died inside a transaction (its ROLLBACK failed too)", async () => {
    const one = await openOwn();
    let pid = 0;
    await expect(
      inTransaction(one.sequelize, async (exec) => {
        pid = (await exec<{ pid: number }>(`SELECT pg_backend_pid() AS pid`))[0]!.pid;
        await queryRows(db.sequelize, `SELECT pg_terminate_backend($1)`, [pid]);
        await exec(`SELECT 1`);
      }),
    ).rejects.toThrow();
    // The pool holds one connection at most: the next statement gets a new, working one.
    const [after] = await queryRows<{ pid: number }>(one.sequelize, `SELECT pg_backend_pid() AS pid`);
    expect(after!.pid).not.toBe(pid);
  });

  itWithPostgres("keeps the pool's statement_timeout on every connection, and a heavy read's lower one for its transaction only", async () => {
    const one = await openOwn();
    const setting = async () => (await queryRows<{ v: string }>(one.sequelize, `SELECT current_setting('statement_timeout') AS v`))[0]!.v;
    expect(await setting()).toBe("4321ms");
    const gate = heavyGateOf(one, { heavyOpsPerAccount: 1, heavyOpsPerNode: 1, heavyQueuePerAccount: 1, heavyQueueWaitMs: 1000, heavyStatementTimeoutMs: 777 });
    const ctx = { meta: { companyId: "acme" }, options: {} } as unknown as Context<unknown, { companyId: string }>;
    const inside = await withHeavyRead(
      one.sequelize,
      gate,
      ctx,
      async (exec) => (await exec<{ v: string }>(`SELECT current_setting('statement_timeout') AS v`))[0]!.v,
    );
    expect(inside).toBe("777ms");
    expect(await setting()).toBe("4321ms");
    // A statement that outlives it is stopped (57014; an action answers it as a 503: below).
    const stopped = withHeavyRead(one.sequelize, gate, ctx, (exec) => exec(`SELECT pg_sleep(2)`));
    expect(
      isStatementTimedOut(
        await stopped.then(
          () => null,
          (err: unknown) => err,
        ),
      ),
    ).toBe(true);
    expect(await setting()).toBe("4321ms");
  });

  itWithPostgres("answers a statement its time limit stopped, in an action, with the 503 of a server limit (not a 500)", async () => {
    const app = await startTestApp({
      services: [],
      db,
      extraServices: [
        {
          name: "slow",
          actions: {
            read: (c: Context) =>
              withHeavyRead(
                db.sequelize,
                heavyGateOf(db, { heavyOpsPerAccount: 1, heavyOpsPerNode: 1, heavyQueuePerAccount: 1, heavyQueueWaitMs: 1000, heavyStatementTimeoutMs: 100 }),
                c as Context<unknown, { companyId: string }>,
                (exec) => exec(`SELECT pg_sleep(2)`),
              ),
          },
        },
      ],
    });
    try {
      await expect(app.app.broker.call("slow.read", {}, { meta: { companyId: "acme" } })).rejects.toMatchObject({
        code: 503,
        type: "SERVICE_UNAVAILABLE",
        data: { retryAfter: expect.any(Number) },
      });
    } finally {
      await app.stop();
    }
  });
});

it("runs a heavy read statement by statement on embedded PGlite (one session), in one transaction on PostgreSQL", async () => {
  const gate = heavyGateOf(db, { heavyOpsPerAccount: 1, heavyOpsPerNode: 1, heavyQueuePerAccount: 1, heavyQueueWaitMs: 1000, heavyStatementTimeoutMs: 0 });
  const ctx = { meta: { companyId: "acme" }, options: {} } as unknown as Context<unknown, { companyId: string }>;
  // now() is the transaction's start: the same for both statements in one transaction, not otherwise.
  const same = await withHeavyRead(db.sequelize, gate, ctx, async (exec) => {
    const [a] = await exec<{ t: Date }>(`SELECT now() AS t, pg_sleep(0.02)`);
    const [b] = await exec<{ t: Date }>(`SELECT now() AS t`);
    return a!.t.getTime() === b!.t.getTime();
  });
  expect(same).toBe(!db.embedded);
});
