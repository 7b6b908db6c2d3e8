/**
 * Exactly once across a crash: a real campaigns process (`npm start`'s script, compiled as the
 * image runs it: gateway, auth, contacts and campaigns, UPSTREAM_MODE=http) is SIGKILLed in the middle of a send, a fresh process takes the
 * recipients over when the dead one's leases end, and the test counts what the upstream received:
 * a local HTTP upstream records every request with its Idempotency-Key before any deduplication
 * (the messages table cannot tell: its unique index folds repeats into one row). The kill lands
 * while batches are handed over but not recorded: the upstream has answered some of their messages
 * (taken) and holds the rest, so the new process sends them again. In the end every recipient was
 * handed over under one key only, its own derived customerMessageId (with a per-process id the
 * re-sent batch would arrive under new keys), no recipient recorded before the kill was handed over
 * again, only messages in flight at the kill were, and the counters equal the audience. Real
 * processes on the real PostgreSQL.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { createServer } from "node:net";
import os from "node:os";
import path from "node:path";
import { QueryTypes } from "sequelize";
import { API_PREFIX } from "../../lib/http/api";
import { startTestApp, uid, type TestApp } from "../helpers/app";
import { campaignIn } from "../helpers/campaigns";
import { createTestDatabase, itWithPostgres, TEST_DATABASE_URL, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { Http } from "../helpers/http";
import { startUpstreamServer, type UpstreamServer } from "../helpers/upstream-server";
import { productScript } from "../helpers/product-build";

const ROOT = path.join(__dirname, "../..");
const LEASE_MS = 2000;
const AUDIENCE = 400;

let tdb: TestDatabase;
let t: TestApp;
let upstream: UpstreamServer;
const children: ChildProcess[] = [];

beforeAll(async () => {
  if (!TEST_DATABASE_URL) return;
  upstream = await startUpstreamServer();
  tdb = await createTestDatabase();
  t = await startTestApp({ services: ["auth"], db: tdb.db });
});
afterAll(async () => {
  for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
  await t?.stop();
  await tdb?.drop();
  await upstream?.close();
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
  const child = spawn(process.execPath, productScript("start"), {
    cwd: ROOT,
    env: {
      ...clean,
      DATABASE_URL: tdb.url!,
      DATA_DIR: mkdtempSync(path.join(os.tmpdir(), "pgw-kill-")),
      SERVICES: "gateway,auth,contacts,campaigns",
      PORT: String(port),
      HOST: "127.0.0.1",
      INTERNAL_PORT: "0",
      LOG_LEVEL: "warn",
      CAMPAIGN_LEASE_MS: String(LEASE_MS),
      CAMPAIGN_POLL_MS: "100",
      CAMPAIGN_BATCH_SIZE: "25",
      UPSTREAM_MODE: "http",
      UPSTREAM_SMS_URL: `${upstream.base}/sms`,
      UPSTREAM_RCS_URL: `${upstream.base}/rcs`,
      UPSTREAM_WHATSAPP_URL: `${upstream.base}/whatsapp`,
      UPSTREAM_TIMEOUT_MS: "60000",
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

      // Once a few batches are recorded, the upstream stops answering: the batches in flight are
      // handed over (some of their messages taken before the hold) but never recorded.
      await eventually(async () => expect((await one<{ sent: number }>(`SELECT sent FROM campaigns WHERE id = $1`, [id])).sent).toBeGreaterThanOrEqual(50), {
        timeoutMs: 20_000,
        intervalMs: 10,
      });
      upstream.hold();
      await eventually(async () => expect(upstream.waiting()).toBeGreaterThan(0), { timeoutMs: 10_000, intervalMs: 10 });
      await new Promise((r) => setTimeout(r, 200)); // the other batches in flight reach the upstream too
      sender.kill("SIGKILL");
      await exited(sender);
      upstream.release();

      const prefix = `cmp-${id}-`;
      const recordedAtKill = new Set(
        (
          await t.db.sequelize.query<{ contact_id: string }>(`SELECT contact_id FROM campaign_recipients WHERE campaign_id = $1 AND status = 'SENT'`, {
            bind: [id],
            type: QueryTypes.SELECT,
          })
        ).map((r) => `${prefix}${r.contact_id}`),
      );
      const handedAtKill = upstream.perKey(prefix);
      const inFlightAtKill = [...handedAtKill.keys()].filter((k) => !recordedAtKill.has(k));
      const atKill = await one<{ status: string; sent: number }>(`SELECT status, sent FROM campaigns WHERE id = $1`, [id]);
      expect(atKill.status).toBe("SENDING");
      expect(atKill.sent).toBe(recordedAtKill.size);
      expect(atKill.sent).toBeGreaterThan(0);
      expect(atKill.sent).toBeLessThan(AUDIENCE);
      expect(inFlightAtKill.length).toBeGreaterThan(0); // handed over, outcome never written

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

      // What the upstream received, per recipient: one key per number, the derived one, for every contact.
      const contacts = await t.db.sequelize.query<{ id: string; phone_number: string }>(`SELECT id, phone_number FROM contacts WHERE company_id = $1`, {
        bind: [companyId],
        type: QueryTypes.SELECT,
      });
      const keysPerNumber = new Map<string, Set<string>>();
      for (const r of upstream.received.filter((x) => x.key.startsWith(prefix)))
        keysPerNumber.set(r.destination, (keysPerNumber.get(r.destination) ?? new Set()).add(r.key));
      expect(keysPerNumber.size).toBe(AUDIENCE);
      expect(contacts.filter((c) => [...(keysPerNumber.get(c.phone_number) ?? [])].join() !== `${prefix}${c.id}`)).toEqual([]);
      // Hand-overs per key: once, but for messages in flight at the kill (sent again, the same key:
      // a repeat the upstream folds); none recorded before the kill went out again.
      const perKey = upstream.perKey(prefix);
      const inFlight = new Set(inFlightAtKill);
      expect([...perKey.entries()].filter(([k, n]) => n !== 1 && !inFlight.has(k))).toEqual([]);
      expect([...perKey.entries()].filter(([, n]) => n > 2)).toEqual([]);
      expect([...perKey.entries()].filter(([, n]) => n === 2).length).toBeGreaterThan(0); // the crash's batch was handed over again
    },
    120_000,
  );
});
