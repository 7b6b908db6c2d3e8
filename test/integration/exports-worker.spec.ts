/**
 * The export pool under failure and load, on PostgreSQL (a lock taken by the test holds an export's
 * COPY mid-run, which embedded PGlite, one session for every connection, cannot do):
 *  - a pool worker killed mid-export: the run is retried, and after the last attempt the job ends
 *    FAILED with an error; never stuck;
 *  - jobs beyond EXPORT_WORKERS wait QUEUED, and one account runs one export at a time;
 *  - a node that stops hands its running export back at once, and another node finishes it.
 */
import { randomUUID } from "node:crypto";
import { readdirSync } from "node:fs";
import pg from "pg";
import { QueryTypes } from "sequelize";
import type { ExportRunner } from "../../services/exports/exports.runner";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { createTestDatabase, itWithPostgres, TEST_DATABASE_URL, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";

let tdb: TestDatabase;
beforeAll(async () => {
  if (TEST_DATABASE_URL) tdb = await createTestDatabase();
});
afterAll(() => tdb?.drop());

const runnerOf = (t: TestApp) => (t.app.broker.getLocalService("exports") as unknown as { runner: ExportRunner }).runner;

async function jobRow(t: TestApp, id: string) {
  const [row] = await t.db.sequelize.query<{ status: string; attempts: number; error: string | null; node_id: string | null }>(
    "SELECT status, attempts, error, node_id FROM export_jobs WHERE id = $1",
    { bind: [id], type: QueryTypes.SELECT },
  );
  return row!;
}

/** Polls `fn` until it answers something truthy. */
const until = <T>(what: string, fn: () => Promise<T | null | undefined | false>, ms = 20_000): Promise<T> =>
  eventually(
    async () => {
      const v = await fn();
      if (!v) throw new Error(`timed out waiting for ${what}`);
      return v;
    },
    { timeoutMs: ms, intervalMs: 20 },
  );

/** Holds ACCESS EXCLUSIVE on messages until released: an export's COPY waits on it mid-run. */
async function lockMessages(url: string) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await c.query("BEGIN");
  await c.query("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE");
  return {
    /** Export connections blocked on the lock right now. */
    async waiting() {
      // Inside a transaction pg_stat_activity is a snapshot taken at first use: drop it first.
      await c.query("SELECT pg_stat_clear_snapshot()");
      const r = await c.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'partner-gateway-export' AND wait_event_type = 'Lock'");
      return r.rows[0].n as number;
    },
    async release() {
      await c.query("COMMIT");
      await c.end();
    },
  };
}

async function seed(t: TestApp, a: Account, n: number) {
  await t.db.sequelize.query(
    `INSERT INTO messages (company_id, channel, customer_message_id, destination, sent_at, status_code)
     SELECT $1, 'SMS', 'k-' || i, '+35191' || lpad(i::text, 7, '0'), now() - (i || ' seconds')::interval, 1 FROM generate_series(1, $2::int) i`,
    { bind: [a.companyId, n] },
  );
}

describe("the export pool (PostgreSQL)", () => {
  let t: TestApp;
  beforeAll(async () => {
    if (!TEST_DATABASE_URL) return; // every test below lists itself as a todo (a failure under REQUIRE_REAL_SERVICES=1)
    // A short lease (renewed every second) so that a run outliving it shows the heartbeat at work.
    t = await startTestApp({ services: ["gateway", "auth", "tracking", "exports"], db: tdb.db, config: { exportWorkers: 2, exportLeaseMs: 3000 } });
  });
  afterAll(() => t?.stop());

  itWithPostgres(
    "a pool worker killed mid-export: the run is retried and completes; killed on every attempt, the job ends FAILED with an error",
    async () => {
      const a = await t.newAccount(["EXPORTS"]);
      await seed(t, a, 1000);
      const runner = runnerOf(t);

      // Killed once: retried, then completed.
      let lock = await lockMessages(tdb.db.url);
      const first = (await a.api.post("/messages/history/export", {})).body.exportId as string;
      await until("the export blocked mid-run", async () => (await lock.waiting()) === 1);
      expect((await jobRow(t, first)).status).toBe("PROCESSING");
      await Promise.all(runner.threads.map((w) => w.terminate()));
      // The killed worker's backend still waits on the lock (PostgreSQL notices a gone client only when it writes): two waiters.
      await until("the retry to start", async () => (await jobRow(t, first)).attempts === 2 && (await lock.waiting()) === 2);
      await lock.release();
      await until("completion", async () => (await jobRow(t, first)).status === "COMPLETED");
      expect(await jobRow(t, first)).toMatchObject({ status: "COMPLETED", attempts: 2, error: null });
      const done = (await a.api.get("/exports")).body.data.find((j: { exportId: string }) => j.exportId === first);
      expect(done).toMatchObject({ isAvailableForDownload: true, rowCount: 1000 });

      // Killed on each of its three attempts: FAILED, with the reason.
      lock = await lockMessages(tdb.db.url);
      const second = (await a.api.post("/messages/history/export", {})).body.exportId as string;
      for (let attempt = 1; attempt <= 3; attempt++) {
        await until(`attempt ${attempt} blocked mid-run`, async () => (await jobRow(t, second)).attempts === attempt && (await lock.waiting()) === attempt);
        await Promise.all(runner.threads.map((w) => w.terminate()));
      }
      await until("the job to end", async () => (await jobRow(t, second)).status !== "PROCESSING" && (await jobRow(t, second)).status !== "QUEUED");
      await lock.release();
      const failed = (await a.api.get("/exports")).body.data.find((j: { exportId: string }) => j.exportId === second);
      expect(failed).toMatchObject({ status: "FAILED", isAvailableForDownload: false });
      expect(failed.error).toMatch(/failed 3 times.*worker stopped/);
      // No temporary file is left behind.
      expect(readdirSync(t.config.exportDir).filter((n) => n.endsWith(".tmp"))).toEqual([]);
    },
    60_000,
  );

  itWithPostgres(
    "keeps a long run's lease alive: a run outliving the lease several times over is never taken again",
    async () => {
      const a = await t.newAccount(["EXPORTS"]);
      await seed(t, a, 100);
      const lock = await lockMessages(tdb.db.url);
      const id = (await a.api.post("/messages/history/export", {})).body.exportId as string;
      await until("the export blocked mid-run", async () => (await lock.waiting()) === 1);
      await new Promise((r) => setTimeout(r, 7000)); // over twice the 3 s lease
      expect(await jobRow(t, id)).toMatchObject({ status: "PROCESSING", attempts: 1, node_id: t.app.broker.nodeID });
      expect(await lock.waiting()).toBe(1);
      await lock.release();
      await until("completion", async () => (await jobRow(t, id)).status === "COMPLETED");
      expect(await jobRow(t, id)).toMatchObject({ attempts: 1 });
    },
    30_000,
  );

  itWithPostgres(
    "runs at most EXPORT_WORKERS exports and one per account at a time; the rest wait QUEUED and then run",
    async () => {
      const a = await t.newAccount(["EXPORTS"]);
      const b = await t.newAccount(["EXPORTS"]);
      const c = await t.newAccount(["EXPORTS"]);
      const lock = await lockMessages(tdb.db.url);
      const a1 = (await a.api.post("/messages/history/export", {})).body.exportId as string;
      const a2 = (await a.api.post("/messages/history/export", {})).body.exportId as string;
      const b1 = (await b.api.post("/messages/history/export", {})).body.exportId as string;
      const c1 = (await c.api.post("/messages/history/export", {})).body.exportId as string;
      await until("two exports blocked mid-run", async () => (await lock.waiting()) === 2);
      await new Promise((r) => setTimeout(r, 1200)); // a claim round later, still the same
      expect(await Promise.all([a1, a2, b1, c1].map(async (id) => (await jobRow(t, id)).status))).toEqual(["PROCESSING", "QUEUED", "PROCESSING", "QUEUED"]);
      await lock.release();
      for (const id of [a1, a2, b1, c1]) await until(`${id} completed`, async () => (await jobRow(t, id)).status === "COMPLETED");
    },
    60_000,
  );

  itWithPostgres(
    "a node that stops lets its running export finish within SHUTDOWN_TIMEOUT_MS: written and COMPLETED by that node",
    async () => {
      const other = await startTestApp({ services: ["tracking", "exports"], db: tdb.db, config: { exportWorkers: 1, shutdownTimeoutMs: 20_000 } });
      const a = await t.newAccount(["EXPORTS"]);
      await seed(t, a, 10);
      // Only `other` may take it: this file's own node claims nothing meanwhile (its runner is told it
      // is stopping, and told otherwise afterwards). Held mid-run by a lock on the table.
      const own = (t.app.broker.getLocalService("exports") as unknown as { runner: { stopping: boolean; kick(): void } }).runner;
      own.stopping = true;
      const lock = await lockMessages(tdb.db.url);
      const id = randomUUID();
      try {
        await t.db.sequelize.query("INSERT INTO export_jobs (id, company_id, type, filters, status) VALUES ($1, $2, 'MESSAGE_HISTORY', '{}', 'QUEUED')", {
          bind: [id, a.companyId],
        });
        expect(await until("a node to take it", async () => (await jobRow(t, id)).node_id)).toBe(other.app.broker.nodeID);
        await until("the export blocked mid-run", async () => (await lock.waiting()) >= 1);
      } finally {
        own.stopping = false;
      }
      const stopping = other.stop();
      await new Promise((r) => setTimeout(r, 500));
      expect((await jobRow(t, id)).status).toBe("PROCESSING"); // still its run, not handed back
      await lock.release();
      await stopping;
      expect(await jobRow(t, id)).toMatchObject({ status: "COMPLETED", node_id: other.app.broker.nodeID, attempts: 1 });
    },
    60_000,
  );

  itWithPostgres(
    "a node that stops hands its running export back at once (the attempt not counted); another node finishes it",
    async () => {
      const other = await startTestApp({ services: ["tracking", "exports"], db: tdb.db, config: { exportWorkers: 1 } });
      const a = await t.newAccount(["EXPORTS"]);
      await seed(t, a, 10);
      // Whichever node polls first takes the job; that one is stopped.
      const lock = await lockMessages(tdb.db.url);
      const id = randomUUID();
      await t.db.sequelize.query("INSERT INTO export_jobs (id, company_id, type, filters, status) VALUES ($1, $2, 'MESSAGE_HISTORY', '{}', 'QUEUED')", {
        bind: [id, a.companyId],
      });
      const holder = await until("a node to take it", async () => (await jobRow(t, id)).node_id);
      await until("the export blocked mid-run", async () => (await lock.waiting()) >= 1);
      const stopping = holder === other.app.broker.nodeID ? other : t;
      const staying = stopping === other ? t : other;
      const stopped = Date.now();
      await stopping.stop();
      const back = await jobRow(t, id);
      expect(Date.now() - stopped).toBeLessThan(10_000);
      expect(back.node_id === null || back.node_id === staying.app.broker.nodeID).toBe(true);
      expect(back.attempts).toBeLessThanOrEqual(1);
      await lock.release();
      await until("the other node to finish it", async () => (await jobRow(t, id)).status === "COMPLETED");
      expect(await jobRow(t, id)).toMatchObject({ status: "COMPLETED", node_id: staying.app.broker.nodeID, attempts: 1 });
      await other.stop();
    },
    60_000,
  );
});
