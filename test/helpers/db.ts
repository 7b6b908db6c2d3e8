/**
 * A database of this test file's own: a fresh database on the PostgreSQL at TEST_DATABASE_URL when
 * set, else an in-memory PGlite. With REQUIRE_REAL_SERVICES=1 the PostgreSQL is mandatory (the
 * e2e-embedded jest project clears both variables before this module loads: PGlite there by design).
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import type { Sequelize } from "sequelize";
import { inTransaction, openDatabase, type Database, type Exec } from "../../lib/db/db";
import { DAILY_TABLES, ensureDays } from "../../lib/db/partitions";
import { pgliteSnapshot, pgTemplate } from "./template-db";

export const TEST_DATABASE_URL = process.env.TEST_DATABASE_URL || null;
export const TEST_NATS_URL = process.env.TEST_NATS_URL || null;
export const REQUIRE_REAL = process.env.REQUIRE_REAL_SERVICES === "1";

/** Set by the `e2e-embedded` jest project (test/helpers/embedded-project.ts): this run is on PGlite by design. */
export const EMBEDDED_PROJECT = process.env.TEST_EMBEDDED_PROJECT === "1";

/**
 * A test that needs the real PostgreSQL. Without TEST_DATABASE_URL it is listed as a todo, visibly
 * not run; under REQUIRE_REAL_SERVICES=1 its absence is a failure, never a silent todo.
 */
export function itWithPostgres(name: string, fn: () => unknown, timeout?: number): void {
  if (TEST_DATABASE_URL) it(name, fn as jest.ProvidesCallback, timeout);
  else if (REQUIRE_REAL) {
    it(`${name} (needs PostgreSQL)`, () => {
      throw new Error("REQUIRE_REAL_SERVICES=1 but TEST_DATABASE_URL is not set: a PostgreSQL test cannot be skipped here");
    });
  } else it.todo(`${name} (needs TEST_DATABASE_URL${EMBEDDED_PROJECT ? "; this project runs on embedded PGlite" : ""})`);
}

/**
 * A group whose subject is the same SQL and the same code on either engine (a schedule, a log's
 * query, a limit kept in memory), in a file the e2e-embedded project runs again on PGlite for its
 * other groups: that second pass leaves it out, visibly (a todo), and the main project runs it (on
 * PGlite too wherever TEST_DATABASE_URL is unset, as `npm test` on a fresh clone).
 */
export function describeOncePerRun(name: string, fn: () => void): void {
  if (EMBEDDED_PROJECT) it.todo(`${name} (run by the main project: the same on PGlite)`);
  else describe(name, fn);
}

/**
 * Cross-node tests over the real NATS at TEST_NATS_URL: without it they list themselves as a todo,
 * and under REQUIRE_REAL_SERVICES=1 its absence is a failure, never a silent skip.
 */
export function describeOverNats(name: string, fn: () => void): void {
  if (TEST_NATS_URL) describe(name, fn);
  else if (REQUIRE_REAL) {
    it(`${name}: runs over the real NATS`, () => {
      throw new Error("REQUIRE_REAL_SERVICES=1 but TEST_NATS_URL is not set: the cross-node tests cannot be skipped here");
    });
  } else {
    describe(name, () => it.todo("set TEST_NATS_URL=nats://127.0.0.1:4222 (and TEST_DATABASE_URL) to run the cross-node tests"));
  }
}

export interface TestDatabase {
  /** postgres:// URL of the fresh database, or null for the in-memory PGlite. */
  url: string | null;
  db: Database;
  drop(): Promise<void>;
}

/**
 * Creates a database on the real PostgreSQL and returns its URL: empty (no migrations), or a copy
 * of `template` (test/helpers/template-db.ts).
 */
export async function createPgDatabase(template?: string): Promise<{ url: string; drop(): Promise<void> }> {
  if (!TEST_DATABASE_URL) throw new Error("TEST_DATABASE_URL is not set");
  const name = `pgw_test_${Date.now().toString(36)}_${randomBytes(4).toString("hex")}`;
  const admin = new pg.Client({ connectionString: TEST_DATABASE_URL });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}${template ? ` TEMPLATE ${template}` : ""}`);
  } finally {
    await admin.end();
  }
  const url = new URL(TEST_DATABASE_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const c = new pg.Client({ connectionString: TEST_DATABASE_URL! });
      await c.connect();
      try {
        await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await c.end();
      }
    },
  };
}

/**
 * A migrated database of the caller's own: a copy of the migrated template (PostgreSQL) or of the
 * migrated snapshot (PGlite), on which openDatabase's own `migrate` then finds nothing pending.
 */
/**
 * The template or snapshot may be days old: the daily partitions from yesterday to a week ahead, as
 * their owners make them at start, for tests that write rows without those services.
 */
async function todaysPartitions(db: Database): Promise<void> {
  for (const table of DAILY_TABLES) await ensureDays(db.sequelize, table);
}

/** An empty database of the caller's own, not migrated (migration tests step through the migrations themselves). */
export async function unmigratedTestDatabase(): Promise<{ db: Database; drop(): Promise<void> }> {
  if (!TEST_DATABASE_URL) {
    const db = await openDatabase({ databaseUrl: null, dataDir: null, migrate: false });
    return { db, drop: () => db.close() };
  }
  const pgdb = await createPgDatabase();
  const db = await openDatabase({ databaseUrl: pgdb.url, dataDir: null, migrate: false });
  return {
    db,
    async drop() {
      await db.close();
      await pgdb.drop();
    },
  };
}

/**
 * For a migration test file (or describe block): an unmigrated database of its own, made before its
 * tests (handed to `use`) and dropped after them.
 */
export function withUnmigratedDatabase(use: (db: Database) => void): void {
  let drop: () => Promise<void> = async () => undefined;
  beforeAll(async () => {
    const made = await unmigratedTestDatabase();
    drop = made.drop;
    use(made.db);
  }, 60_000);
  afterAll(() => drop());
}

export async function createTestDatabase(): Promise<TestDatabase> {
  if (!TEST_DATABASE_URL) {
    if (REQUIRE_REAL) throw new Error("REQUIRE_REAL_SERVICES=1 but TEST_DATABASE_URL is not set");
    const db = await openDatabase({ databaseUrl: null, dataDir: null, embeddedSnapshot: await pgliteSnapshot() });
    await todaysPartitions(db);
    return { url: null, db, drop: async () => undefined };
  }
  const pgdb = await createPgDatabase(await pgTemplate(TEST_DATABASE_URL));
  const db = await openDatabase({ databaseUrl: pgdb.url, dataDir: null });
  await todaysPartitions(db);
  return {
    url: pgdb.url,
    db,
    async drop() {
      await db.close();
      await pgdb.drop();
    },
  };
}

/**
 * The webhook events the producers have written (migration 0031): tracking's and the inbox's feeds,
 * the RETRACT rows left out, in the order they were written (`tx`, `id`). What a producer's test
 * reads, with no notifier running; the notifier's own schedule is `outbox_events`.
 */
export const WEBHOOK_EVENTS = `(SELECT company_id, tx, id, channel, event_type, message_id, num_part, payload FROM message_webhook_events WHERE event_type <> 'RETRACT'
  UNION ALL SELECT company_id, tx, id, channel, event_type, message_id, num_part, payload FROM inbound_webhook_events) AS e`;

/**
 * A transaction that runs `work` and then stays open, its locks held and its writes uncommitted,
 * until `release()`, which answers once it has committed: a peer mid-round, a reader holding a
 * lock, a writer slow to commit.
 */
export async function heldOpen(sequelize: Sequelize, work: (exec: Exec) => Promise<unknown>): Promise<{ release(): Promise<void> }> {
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let ready!: () => void;
  const done = new Promise<void>((r) => (ready = r));
  const tx = inTransaction(sequelize, async (exec) => {
    await work(exec);
    ready();
    await held;
  });
  await Promise.race([done, tx]);
  return {
    async release() {
      release();
      await tx;
    },
  };
}
