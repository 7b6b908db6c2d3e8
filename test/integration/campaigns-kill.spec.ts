/**
 * Exactly once across a crash: a real campaigns process (`npm start`, with the gateway, tracking,
 * contacts and the simulator) is SIGKILLed in the middle of a send, a fresh process takes the
 * campaign over when the dead one's lease ends, and in the end every recipient has exactly one
 * registered message (counted per number in the messages table), none missing, the progress
 * counters equal to the audience. The kill lands when a batch is registered at the ingress but its
 * outcome not yet recorded (the test holds the recipients' rows to make that moment last), so the
 * new process sends that batch again: only the derived customerMessageId keeps it from counting
 * twice (with a per-process id this test fails). Real processes on the real PostgreSQL.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { createServer } from "node:net";
import os from "node:os";
import path from "node:path";
import { QueryTypes } from "sequelize";
import { API_PREFIX } from "../../lib/api";
import { startTestApp, uid, type TestApp } from "../helpers/app";
import { campaignIn } from "../helpers/campaigns";
import { createTestDatabase, itWithPostgres, TEST_DATABASE_URL, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { Http } from "../helpers/http";

const ROOT = path.join(__dirname, "../..");
const LEASE_MS = 2000;
const AUDIENCE = 400;

let tdb: TestDatabase;
let t: TestApp;
const children: ChildProcess[] = [];

beforeAll(async () => {
  if (!TEST_DATABASE_URL) return;
  tdb = await createTestDatabase();
  t = await startTestApp({ services: ["auth"], db: tdb.db });
});
afterAll(async () => {
  for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
  await t?.stop();
  await tdb?.drop();
});

const freePort = () =>
  new Promise<number>((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });

async function node(port: number): Promise<ChildProcess> {
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|DATA_DIR|TRANSPORTER|SERVICES|PORT|TEST_|LOG_|CAMPAIGN_|SIMULATOR_|UPSTREAM_)/.test(k)),
  );
  const child = spawn(process.execPath, ["--import", "tsx", path.join(ROOT, "scripts/start.ts")], {
    cwd: ROOT,
    env: {
      ...clean,
      DATABASE_URL: tdb.url!,
      DATA_DIR: mkdtempSync(path.join(os.tmpdir(), "pgw-kill-")),
      SERVICES: "gateway,auth,contacts,tracking,campaigns,simulator",
      PORT: String(port),
      HOST: "127.0.0.1",
      INTERNAL_PORT: "0",
      LOG_LEVEL: "warn",
      CAMPAIGN_LEASE_MS: String(LEASE_MS),
      CAMPAIGN_POLL_MS: "100",
      CAMPAIGN_BATCH_SIZE: "25",
      SIMULATOR_PROFILE: "all-delivered",
      SIMULATOR_MAX_DELAY_MS: "50",
    },
    stdio: "ignore",
  });
  children.push(child);
  await eventually(async () => expect((await fetch(`http://127.0.0.1:${port}/healthz/ready`)).status).toBe(200), { timeoutMs: 30_000, intervalMs: 200 });
  return child;
}

const exited = (c: ChildProcess) => new Promise<void>((resolve) => (c.exitCode !== null || c.signalCode !== null ? resolve() : c.on("exit", () => resolve())));

const one = async <T extends object>(sql: string, bind: unknown[]) => (await t.db.sequelize.query<T>(sql, { bind, type: QueryTypes.SELECT }))[0]!;

describe("a campaigns process killed mid-send", () => {
  itWithPostgres(
    "loses nobody and sends nobody twice: a fresh process finishes the campaign, one message per recipient",
    async () => {
      const companyId = uid();
      const key = (await t.newAccount(["CAMPAIGNS", "CONTACTS", "SMS"], { companyId })).key.apiKey;
      // The audience: AUDIENCE contacts of one list, written set-based.
      const [{ id: listId }] = (await t.db.sequelize.query(`INSERT INTO contact_lists (company_id, name) VALUES ($1, 'crash') RETURNING id`, {
        bind: [companyId],
        type: QueryTypes.SELECT,
      })) as Array<{ id: string }>;
      await t.db.sequelize.query(
        `WITH c AS (INSERT INTO contacts (id, company_id, first_name, phone_number)
                    SELECT gen_random_uuid(), $1, 'P' || i, '+35196' || lpad(i::text, 7, '0') FROM generate_series(1, $2::int) i RETURNING id)
         INSERT INTO contact_list_members (company_id, list_id, contact_id) SELECT $1, $3, id FROM c`,
        { bind: [companyId, AUDIENCE, listId] },
      );
      const port = await freePort();
      const sender = await node(port);
      const api = new Http(`http://127.0.0.1:${port}${API_PREFIX}`, { "x-api-key": key });
      const created = await api.post("/campaigns", campaignIn([Number(listId)], { sendRatePerSecond: 100 }));
      expect(created.status).toBe(201);
      const id = created.body.id as string;
      expect((await api.put(`/campaigns/${id}/confirm`)).status).toBe(202);

      // Once a few batches are out, hold the PENDING recipients' rows: the sender's next batch is
      // registered at the ingress, then its outcome waits on the lock. Killed right then, the
      // process leaves a batch sent but not recorded: the one the next process sends again.
      await eventually(async () => expect((await one<{ sent: number }>(`SELECT sent FROM campaigns WHERE id = $1`, [id])).sent).toBeGreaterThanOrEqual(50), {
        timeoutMs: 20_000,
        intervalMs: 20,
      });
      const hold = await t.db.sequelize.transaction();
      await t.db.sequelize.query(`SELECT 1 FROM campaign_recipients WHERE campaign_id = $1 AND status = 'PENDING' FOR UPDATE`, {
        bind: [id],
        transaction: hold,
      });
      await eventually(
        async () => {
          const s = await one<{ sent: number; registered: number }>(
            `SELECT c.sent, (SELECT count(*)::int FROM messages m WHERE m.campaign_id = $1::text) AS registered FROM campaigns c WHERE c.id = $1::uuid`,
            [id],
          );
          expect(s.registered).toBeGreaterThan(s.sent);
        },
        { timeoutMs: 10_000, intervalMs: 20 },
      );
      sender.kill("SIGKILL");
      await exited(sender);
      // The dead process's outcome statement still waits in its server backend (PostgreSQL learns of
      // the lost client only when it answers): end it, as if the process had died before sending it.
      await t.db.sequelize.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'`,
        { transaction: hold },
      );
      await hold.rollback();
      const atKill = await one<{ status: string; sent: number; node_id: string | null; registered: number }>(
        `SELECT c.status, c.sent, c.node_id, (SELECT count(*)::int FROM messages m WHERE m.campaign_id = $1::text) AS registered FROM campaigns c WHERE c.id = $1::uuid`,
        [id],
      );
      expect(atKill).toMatchObject({ status: "SENDING", node_id: expect.any(String) });
      expect(atKill.sent).toBeGreaterThan(0);
      expect(atKill.sent).toBeLessThan(AUDIENCE);
      expect(atKill.registered).toBeGreaterThan(atKill.sent); // a batch registered, its outcome never written

      await node(await freePort());
      await eventually(async () => expect((await one<{ status: string }>(`SELECT status FROM campaigns WHERE id = $1`, [id])).status).toBe("SENT"), {
        timeoutMs: 60_000,
        intervalMs: 200,
      });
      const end = await one<{ sent: number; failed: number; pending: number; recipients: number }>(
        `SELECT c.sent, c.failed, (SELECT count(*)::int FROM campaign_recipients r WHERE r.campaign_id = c.id AND r.status <> 'SENT') AS pending,
                (SELECT count(*)::int FROM campaign_recipients r WHERE r.campaign_id = c.id) AS recipients FROM campaigns c WHERE c.id = $1`,
        [id],
      );
      expect(end).toEqual({ sent: AUDIENCE, failed: 0, pending: 0, recipients: AUDIENCE });
      const perNumber = await t.db.sequelize.query<{ destination: string; n: number }>(
        `SELECT destination, count(*)::int AS n FROM messages WHERE company_id = $1 AND campaign_id = $2 GROUP BY destination`,
        { bind: [companyId, id], type: QueryTypes.SELECT },
      );
      expect(perNumber).toHaveLength(AUDIENCE);
      expect(perNumber.filter((r) => r.n !== 1)).toEqual([]);
      const numbers = await one<{ n: number }>(
        `SELECT count(*)::int AS n FROM contacts c JOIN messages m ON m.company_id = c.company_id AND m.destination = c.phone_number AND m.campaign_id = $2
          WHERE c.company_id = $1`,
        [companyId, id],
      );
      expect(numbers.n).toBe(AUDIENCE);
    },
    120_000,
  );
});
