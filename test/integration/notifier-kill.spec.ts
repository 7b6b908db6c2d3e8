/**
 * The schedule is durable: a notifier process killed with SIGKILL in the middle of an attempt
 * loses no event (another process takes it when the claim's lease ends and it arrives, at least
 * once), and a notifier stopped with SIGTERM hands its attempts in flight back at once. Real
 * processes (`npm start`'s script, compiled as the image runs it, with SERVICES=notifier) on the real PostgreSQL.
 */
import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import { QueryTypes } from "sequelize";
import { startTestApp, uid, type TestApp } from "../helpers/app";
import { inboundIn, messageIn, smsReceiptIn } from "../helpers/builders";
import { createTestDatabase, itWithPostgres, TEST_DATABASE_URL, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { startReceiver, testCa, type Receiver } from "../helpers/receiver";
import { productScript } from "../helpers/product-build";

const ROOT = path.join(__dirname, "../..");
const LEASE_MS = 10_000;

let tdb: TestDatabase;
let t: TestApp;
let r: Receiver;
const children: ChildProcess[] = [];

beforeAll(async () => {
  if (!TEST_DATABASE_URL) return;
  tdb = await createTestDatabase();
  // Ingress and API here; delivery only in the notifier processes.
  t = await startTestApp({ services: ["gateway", "auth", "tracking", "inbox"], db: tdb.db });
  r = await startReceiver();
});
afterAll(async () => {
  for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
  await t?.stop();
  await r?.close();
  await tdb?.drop();
});

async function notifier(env: Record<string, string> = {}): Promise<ChildProcess> {
  const ca = await testCa();
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|DATA_DIR|TRANSPORTER|SERVICES|PORT|TEST_|LOG_|NOTIFIER_)/.test(k)),
  );
  const child = spawn(process.execPath, productScript("start"), {
    cwd: ROOT,
    env: {
      ...clean,
      DATABASE_URL: tdb.url!,
      SERVICES: "notifier",
      PORT: "0",
      LOG_LEVEL: "warn",
      WEBHOOK_ALLOW_PRIVATE_TARGETS: "true",
      NODE_EXTRA_CA_CERTS: ca.file,
      NOTIFIER_LEASE_MS: String(LEASE_MS),
      NOTIFIER_POLL_MS: "50",
      ...env,
    },
    stdio: "ignore",
  });
  children.push(child);
  return child;
}

const exited = (c: ChildProcess) =>
  new Promise<number | null>((resolve) => (c.exitCode !== null ? resolve(c.exitCode) : c.on("exit", (code) => resolve(code))));

async function outboxRow(companyId: string) {
  return t.db.sequelize.query<{ claim_token: string | null; due_in_ms: number; attempts: number }>(
    `SELECT claim_token, (EXTRACT(EPOCH FROM COALESCE(leased_until, due_at) - now()) * 1000)::int AS due_in_ms, attempts FROM outbox_events WHERE company_id = $1`,
    { bind: [companyId], type: QueryTypes.SELECT },
  );
}

describe("a notifier process that dies", () => {
  itWithPostgres(
    "killed mid-attempt loses no event: another process delivers it after the lease",
    async () => {
      const companyId = uid();
      await t.db.sequelize.query(`INSERT INTO webhooks (company_id, callback_url) VALUES ($1, $2)`, { bind: [companyId, r.url()] });
      let hung!: () => void;
      const firstSeen = new Promise<void>((resolve) => (hung = resolve));
      r.behave((_req, n) => {
        if (n === 1) {
          hung();
          return "hang";
        }
        return { status: 200 };
      });
      const id = uid("kill");
      const first = await notifier();
      const m = messageIn(companyId, { customerMessageId: id });
      await t.ingress.post("/messages", m);
      await t.ingress.post("/receipts/sms", smsReceiptIn(m));
      await firstSeen;
      first.kill("SIGKILL");
      await exited(first);
      // The claim outlives its dead holder until the lease ends; nothing was recorded as attempted.
      const [row] = await outboxRow(companyId);
      expect(row).toMatchObject({ claim_token: expect.any(String), attempts: 0 });
      expect(row!.due_in_ms).toBeGreaterThan(0);
      expect(row!.due_in_ms).toBeLessThanOrEqual(LEASE_MS);

      // Its stop waits at most 1 s for an attempt in flight (below the attempt's own 5 s limit).
      const second = await notifier({ SHUTDOWN_TIMEOUT_MS: "1000" });
      const [got] = await r.waitFor(1, LEASE_MS + 30_000);
      expect(got!.json).toMatchObject({ eventType: "DELIVERY", messageId: id, statusCode: 3 });
      expect(r.seen).toBe(2);
      await eventually(async () => expect(await outboxRow(companyId)).toEqual([]));
      const log = await t.db.sequelize.query(`SELECT attempt, outcome FROM webhook_attempts WHERE company_id = $1`, {
        bind: [companyId],
        type: QueryTypes.SELECT,
      });
      expect(log).toEqual([{ attempt: 1, outcome: "DELIVERED" }]);

      // Stopped cleanly (SIGTERM) mid-attempt past SHUTDOWN_TIMEOUT_MS, a notifier cuts the attempt
      // and hands the event back at once.
      const other = uid();
      await t.db.sequelize.query(`INSERT INTO webhooks (company_id, callback_url) VALUES ($1, $2)`, { bind: [other, r.url("/other")] });
      let hungAgain!: () => void;
      const secondHang = new Promise<void>((resolve) => (hungAgain = resolve));
      r.behave(() => {
        hungAgain();
        return "hang";
      });
      await t.ingress.post("/inbound/rcs", inboundIn(other, { messageId: "in-1", destination: "agent", text: "hello" }));
      await secondHang;
      const stoppedAt = Date.now();
      second.kill("SIGTERM");
      expect(await exited(second)).toBe(0);
      // "At once": it waited SHUTDOWN_TIMEOUT_MS, not the attempt's 5 s limit (that would have
      // recorded attempt 1), nor left the claim to its lease.
      expect(Date.now() - stoppedAt).toBeLessThan(LEASE_MS);
      const [released] = await outboxRow(other);
      expect(released).toMatchObject({ claim_token: null, attempts: 0 });
      expect(released!.due_in_ms).toBeLessThanOrEqual(0);
    },
    90_000,
  );
  itWithPostgres(
    "stopped (SIGTERM) mid-attempt finishes the attempt within SHUTDOWN_TIMEOUT_MS: delivered once, recorded, exit 0",
    async () => {
      const companyId = uid();
      await t.db.sequelize.query(`INSERT INTO webhooks (company_id, callback_url) VALUES ($1, $2)`, { bind: [companyId, r.url("/slow")] });
      let began!: () => void;
      const attemptBegan = new Promise<void>((resolve) => (began = resolve));
      // Counted by path: the event the test before handed back is delivered by this process too.
      let slowSeen = 0;
      r.behave((req) => {
        if (!req.url?.startsWith("/slow")) return { status: 200 };
        slowSeen++;
        began();
        return { status: 200, delayMs: 1500 };
      });
      const child = await notifier({ SHUTDOWN_TIMEOUT_MS: "15000" });
      const id = uid("slow");
      const m = messageIn(companyId, { customerMessageId: id });
      await t.ingress.post("/messages", m);
      await t.ingress.post("/receipts/sms", smsReceiptIn(m));
      await attemptBegan;
      child.kill("SIGTERM");
      expect(await exited(child)).toBe(0);
      // The attempt in flight was answered and recorded before the process left: nothing to send again.
      expect(slowSeen).toBe(1);
      expect(await outboxRow(companyId)).toEqual([]);
      const log = await t.db.sequelize.query(`SELECT attempt, outcome FROM webhook_attempts WHERE company_id = $1`, {
        bind: [companyId],
        type: QueryTypes.SELECT,
      });
      expect(log).toEqual([{ attempt: 1, outcome: "DELIVERED" }]);
    },
    60_000,
  );
});
