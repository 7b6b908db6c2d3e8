/**
 * Nodes killed under load lose nothing: the product runs as OS processes (`npm start`'s script per node, compiled as the image runs it) over
 * a NATS server of this file's own and the real PostgreSQL: two gateways (auth), the rest (tracking's
 * ingress, contacts, inbox), two notifiers, a campaigns node and an exports node. The machine's shared NATS serves other test
 * files (and CI) at the same time and is never touched (test/helpers/faults.ts). Each node is
 * SIGKILLed in the middle of its work: a notifier mid-delivery (every registered receipt's event
 * still arrives, at least once), a gateway behind a round-robin balancer (no request answered 5xx;
 * the balancer sends a request whose connection failed to the other gateway), the campaigns node
 * mid-send (a fresh node finishes, every recipient handed one message under one key), the exports
 * node mid-export (a fresh node runs it again: COMPLETED, whole); then NATS restarted and
 * PostgreSQL cut (through a proxy: the shared server is never stopped) under load. Short leases
 * keep the file's run under a minute.
 */
import type { ChildProcess } from "node:child_process";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { gunzipSync } from "node:zlib";
import { QueryTypes } from "sequelize";
import { API_PREFIX } from "../../lib/http/api";
import { createKey } from "../../services/auth/auth.keys";
import { defineAuthModels } from "../../services/auth/auth.models";
import { TEST_SECRETS_KEY, uid } from "../helpers/app";
import { inboundIn, messageIn, smsReceiptIn } from "../helpers/builders";
import { campaignIn } from "../helpers/campaigns";
import { createTestDatabase, REQUIRE_REAL, TEST_DATABASE_URL, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { canRunNatsServer, exited, freePort, NATS_SERVER, PgProxy, PrivateNats, startNode } from "../helpers/faults";
import { Http, type Res } from "../helpers/http";
import { startReceiver, testCa, type Receiver } from "../helpers/receiver";
import { startUpstreamServer, type UpstreamServer } from "../helpers/upstream-server";

const INTERNAL_TOKEN = "faults-internal-token-0123456789";
const NOTIFIER_LEASE_MS = 10_000; // the shortest NOTIFIER_LEASE_MS takes
const CAMPAIGN_LEASE_MS = 2000;
const EXPORT_LEASE_MS = 3000; // the shortest EXPORT_LEASE_MS takes

let tdb: TestDatabase;
let nats: PrivateNats;
let proxy: PgProxy;
let ingressPort: number;
let receiver: Receiver;
let upstream: UpstreamServer;
const children: ChildProcess[] = [];
const gwPorts: number[] = [];
const gateways: ChildProcess[] = [];
const notifiers: ChildProcess[] = [];
let campaigns: ChildProcess;
let ingress: Http;
let companyId: string;
let apiKey: string;

const canRun = canRunNatsServer() && !!TEST_DATABASE_URL;
const describeFaults = canRun
  ? describe
  : REQUIRE_REAL
    ? (name: string) =>
        it(`${name}: runs with ${NATS_SERVER} and PostgreSQL`, () => {
          throw new Error(`REQUIRE_REAL_SERVICES=1 but ${canRunNatsServer() ? "TEST_DATABASE_URL is not set" : `${NATS_SERVER} is missing`}`);
        })
    : (name: string) => describe(name, () => it.todo(`needs ${NATS_SERVER} and TEST_DATABASE_URL`));

// The nodes reach PostgreSQL through a proxy the last test cuts; the test itself reads it directly.
const common = () => ({ TRANSPORTER: nats.url, DATABASE_URL: proxy.urlFor(tdb.url!), LOG_FORMAT: "json" });
/** Every node's log records (LOG_LEVEL warn): an outage is a warning, never an error. */
const logs: Array<Record<string, unknown>> = [];

function gatewayNode(i: number): ChildProcess {
  const c = startNode(
    { ...common(), SERVICES: "gateway,auth", NODE_ID: `faults-gw${i}-${uid("p")}`, PORT: String(gwPorts[i]), RATE_LIMIT_RPS: "100000" },
    children,
    logs,
  );
  gateways[i] = c;
  return c;
}

async function notifierNode(): Promise<ChildProcess> {
  const ca = await testCa();
  const c = startNode(
    {
      ...common(),
      SERVICES: "notifier",
      NODE_ID: `faults-notifier-${uid("p")}`,
      SECRETS_KEY: TEST_SECRETS_KEY,
      WEBHOOK_ALLOW_PRIVATE_TARGETS: "true",
      NODE_EXTRA_CA_CERTS: ca.file,
      NOTIFIER_LEASE_MS: String(NOTIFIER_LEASE_MS),
      NOTIFIER_POLL_MS: "50",
    },
    children,
    logs,
  );
  notifiers.push(c);
  return c;
}

function campaignsNode(): ChildProcess {
  campaigns = startNode(
    {
      ...common(),
      SERVICES: "campaigns",
      NODE_ID: `faults-campaigns-${uid("p")}`,
      CAMPAIGN_LEASE_MS: String(CAMPAIGN_LEASE_MS),
      CAMPAIGN_POLL_MS: "100",
      CAMPAIGN_BATCH_SIZE: "20",
      UPSTREAM_MODE: "http",
      UPSTREAM_SMS_URL: `${upstream.base}/sms`,
      UPSTREAM_RCS_URL: `${upstream.base}/rcs`,
      UPSTREAM_WHATSAPP_URL: `${upstream.base}/whatsapp`,
      UPSTREAM_TIMEOUT_MS: "60000",
    },
    children,
    logs,
  );
  return campaigns;
}

function exportsNode(): ChildProcess {
  return startNode(
    {
      ...common(),
      SERVICES: "exports",
      NODE_ID: `faults-exports-${uid("p")}`,
      EXPORT_SIGNING_KEY: "faults-export-signing-key-0123456789abcdef",
      EXPORT_DIR: mkdtempSync(path.join(os.tmpdir(), "pgw-faults-exports-")),
      EXPORT_LEASE_MS: String(EXPORT_LEASE_MS),
    },
    children,
    logs,
  );
}

const apiOf = (i: number) => new Http(`http://127.0.0.1:${gwPorts[i]}${API_PREFIX}`, { "x-api-key": apiKey });

/**
 * A round-robin balancer in front of the gateways: requests alternate; one whose connection fails
 * (refused, reset) goes to the next gateway, as a balancer does with a GET (it was not answered).
 */
let turn = 0;
async function balanced(path: string): Promise<Res> {
  let last: unknown;
  for (let tries = 0; tries < gwPorts.length * 2; tries++) {
    const i = turn++ % gwPorts.length;
    try {
      return await apiOf(i).get(path);
    } catch (err) {
      last = err;
    }
  }
  throw last;
}

const one = async <T extends object>(sql: string, bind: unknown[]) => (await tdb.db.sequelize.query<T>(sql, { bind, type: QueryTypes.SELECT }))[0]!;

describeFaults("nodes killed under load lose nothing", () => {
  beforeAll(async () => {
    tdb = await createTestDatabase();
    nats = await PrivateNats.start();
    proxy = await PgProxy.start(tdb.url!);
    receiver = await startReceiver();
    upstream = await startUpstreamServer();
    gwPorts.push(await freePort(), await freePort());
    ingressPort = await freePort();
    gatewayNode(0);
    gatewayNode(1);
    startNode(
      { ...common(), SERVICES: "tracking,contacts,inbox", NODE_ID: `faults-rest-${uid("p")}`, INTERNAL_PORT: String(ingressPort), INTERNAL_TOKEN },
      children,
      logs,
    );
    await notifierNode();
    await notifierNode();
    campaignsNode();
    companyId = uid();
    apiKey = (
      await createKey(defineAuthModels(tdb.db.sequelize), {
        companyId,
        userId: uid("user"),
        operations: ["CONTACTS", "CAMPAIGNS", "SMS", "WEBHOOKS", "EXPORTS", "INBOX"],
        trafficType: "TRANSACTIONAL",
      })
    ).apiKey;
    ingress = new Http(`http://127.0.0.1:${ingressPort}/internal/v1`, { "x-internal-token": INTERNAL_TOKEN });
    try {
      for (const i of [0, 1]) {
        await eventually(async () => expect((await apiOf(i).get("/campaigns")).status).toBe(200), { timeoutMs: 90_000, intervalMs: 250 });
        await eventually(async () => expect((await apiOf(i).get("/contacts")).status).toBe(200), { timeoutMs: 30_000, intervalMs: 250 });
      }
      await eventually(async () => expect((await fetch(`http://127.0.0.1:${ingressPort}/healthz/ready`)).status).toBe(200), { timeoutMs: 30_000 });
    } catch (err) {
      // Not ready in time: say which nodes are gone and what they last warned of, so a loaded run's failure can be read.
      const nodes = children.map((c) => ({ pid: c.pid, exitCode: c.exitCode, signal: c.signalCode }));
      const last = logs.filter((r) => typeof r.level !== "number" || r.level >= 40).slice(-15);
      throw new Error(`${(err as Error).message}\nnodes: ${JSON.stringify(nodes)}\nlast warnings: ${JSON.stringify(last, null, 1).slice(0, 6000)}`);
    }
  }, 150_000);

  afterAll(async () => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
    await nats?.kill();
    await proxy?.close();
    await receiver?.close();
    await upstream?.close();
    await tdb?.drop();
  });

  it("a notifier killed mid-delivery: every registered receipt's event arrives at least once", async () => {
    await tdb.db.sequelize.query(`INSERT INTO webhooks (company_id, callback_url) VALUES ($1, $2)`, { bind: [companyId, receiver.url("/events")] });
    receiver.behave(() => ({ status: 200, delayMs: 150 }));
    const ids = Array.from({ length: 80 }, (_, i) => `kill-n-${i}-${uid("m")}`);
    const sent = ids.map((id) => messageIn(companyId, { customerMessageId: id }));
    for (const m of sent) expect((await ingress.post("/messages", m)).status).toBe(202);
    await Promise.all(sent.map(async (m) => expect((await ingress.post("/receipts/sms", smsReceiptIn(m))).status).toBe(202)));
    await eventually(() => expect(receiver.seen).toBeGreaterThanOrEqual(10), { timeoutMs: 20_000, intervalMs: 10 });
    // Deliveries are in flight on both notifiers (each answer takes 150 ms): one dies.
    notifiers[0]!.kill("SIGKILL");
    await exited(notifiers[0]!);

    const arrived = () => new Set(receiver.received.map((r) => String(r.json.messageId)));
    await eventually(() => expect(ids.filter((id) => !arrived().has(id))).toEqual([]), { timeoutMs: NOTIFIER_LEASE_MS + 30_000, intervalMs: 200 });
    await eventually(async () =>
      expect(await one<{ n: number }>(`SELECT count(*)::int AS n FROM outbox_events WHERE company_id = $1`, [companyId])).toEqual({ n: 0 }),
    );
    // Every event was DELIVERED and logged as such.
    const undelivered = await tdb.db.sequelize.query(`SELECT outcome FROM webhook_attempts WHERE company_id = $1 AND outcome <> 'DELIVERED'`, {
      bind: [companyId],
      type: QueryTypes.SELECT,
    });
    expect(undelivered).toEqual([]);
  }, 90_000);

  it("a gateway killed behind round-robin: no request answered 5xx, and it serves again once restarted", async () => {
    const statuses: number[] = [];
    let stop = false;
    const load = (async () => {
      while (!stop) {
        const rs = await Promise.all(["/contacts", "/campaigns", "/contacts", "/campaigns"].map((p) => balanced(p)));
        for (const r of rs) statuses.push(r.status);
      }
    })();
    await eventually(() => expect(statuses.length).toBeGreaterThan(40), { timeoutMs: 20_000, intervalMs: 10 });
    gateways[0]!.kill("SIGKILL");
    await exited(gateways[0]!);
    const atKill = statuses.length;
    await eventually(() => expect(statuses.length).toBeGreaterThan(atKill + 80), { timeoutMs: 20_000, intervalMs: 10 });
    gatewayNode(0);
    await eventually(async () => expect((await apiOf(0).get("/contacts")).status).toBe(200), { timeoutMs: 60_000, intervalMs: 250 });
    const afterRestart = statuses.length;
    await eventually(() => expect(statuses.length).toBeGreaterThan(afterRestart + 40), { timeoutMs: 20_000, intervalMs: 10 });
    stop = true;
    await load;
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
  }, 120_000);

  it("the campaigns node killed mid-send: a fresh node finishes, every recipient handed one message under one key", async () => {
    const audience = 200;
    const [{ id: listId }] = (await tdb.db.sequelize.query(`INSERT INTO contact_lists (company_id, name) VALUES ($1, 'faults') RETURNING id`, {
      bind: [companyId],
      type: QueryTypes.SELECT,
    })) as Array<{ id: string }>;
    await tdb.db.sequelize.query(
      `WITH c AS (INSERT INTO contacts (id, company_id, first_name, phone_number)
                  SELECT gen_random_uuid(), $1, 'F' || i, '+35197' || lpad(i::text, 7, '0') FROM generate_series(1, $2::int) i RETURNING id)
       INSERT INTO contact_list_members (company_id, list_id, contact_id) SELECT $1, $3, id FROM c`,
      { bind: [companyId, audience, listId] },
    );
    const api = apiOf(1);
    const created = await api.post("/campaigns", campaignIn([Number(listId)], { sendRatePerSecond: 60 }));
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    expect((await api.put(`/campaigns/${id}/confirm`)).status).toBe(202);
    await eventually(async () => expect((await one<{ sent: number }>(`SELECT sent FROM campaigns WHERE id = $1`, [id])).sent).toBeGreaterThanOrEqual(40), {
      timeoutMs: 30_000,
      intervalMs: 20,
    });
    campaigns.kill("SIGKILL");
    await exited(campaigns);
    const atKill = await one<{ status: string; sent: number }>(`SELECT status, sent FROM campaigns WHERE id = $1`, [id]);
    expect(atKill.status).toBe("SENDING");
    expect(atKill.sent).toBeLessThan(audience);
    // While no campaigns node runs, its routes answer 503, not 404 nor 500.
    const away = await api.get(`/campaigns/${id}`);
    expect({ status: away.status, retryAfter: away.headers.get("retry-after") }).toEqual({ status: 503, retryAfter: expect.stringMatching(/^\d+$/) });

    campaignsNode();
    await eventually(async () => expect((await one<{ status: string }>(`SELECT status FROM campaigns WHERE id = $1`, [id])).status).toBe("SENT"), {
      timeoutMs: 60_000,
      intervalMs: 200,
    });
    const end = await one<{ sent: number; failed: number; notSent: number }>(
      `SELECT c.sent, c.failed, (SELECT count(*)::int FROM campaign_recipients r WHERE r.campaign_id = c.id AND r.status <> 'SENT') AS "notSent" FROM campaigns c WHERE c.id = $1`,
      [id],
    );
    expect(end).toEqual({ sent: audience, failed: 0, notSent: 0 });
    // One message per recipient: each number got exactly one key, its own (repeats of a batch in
    // flight at the kill carry the same key, which the upstream folds).
    const prefix = `cmp-${id}-`;
    const keysPerNumber = new Map<string, Set<string>>();
    for (const r of upstream.received.filter((x) => x.key.startsWith(prefix)))
      keysPerNumber.set(r.destination, (keysPerNumber.get(r.destination) ?? new Set()).add(r.key));
    expect(keysPerNumber.size).toBe(audience);
    expect([...keysPerNumber.values()].filter((keys) => keys.size !== 1)).toEqual([]);

    // Afterwards, through both gateways: no 5xx. Gateway 0 still lists the dead node (its heartbeat
    // time-out has not passed) beside the new one: round robin sends it one of two calls, which NATS
    // cannot deliver, and the call goes to the live node instead.
    for (const i of [0, 1]) {
      for (const p of ["/contacts", "/campaigns", "/campaigns", `/campaigns/${id}`, `/campaigns/${id}`]) {
        expect({ i, p, status: (await apiOf(i).get(p)).status }).toEqual({ i, p, status: 200 });
      }
    }
  }, 120_000);
  it("the exports node killed mid-export: a fresh node runs it again and it completes, every contact in the file", async () => {
    const exporter = exportsNode();
    const api = apiOf(0);
    await eventually(async () => expect((await api.get("/exports")).status).toBe(200), { timeoutMs: 60_000, intervalMs: 250 });
    const [{ n: contacts }] = await tdb.db.sequelize.query<{ n: number }>(`SELECT count(*)::int AS n FROM contacts WHERE company_id = $1`, {
      bind: [companyId],
      type: QueryTypes.SELECT,
    });
    // Enough rows that the export is still being written when the node dies.
    const more = 150_000;
    await tdb.db.sequelize.query(
      `INSERT INTO contacts (id, company_id, first_name, phone_number)
       SELECT gen_random_uuid(), $1, 'E' || i, '+35198' || lpad(i::text, 7, '0') FROM generate_series(1, $2::int) i`,
      { bind: [companyId, more] },
    );
    const created = await api.post("/exports/contacts", {});
    expect(created.status).toBe(202);
    const exportId = created.body.exportId as string;
    await eventually(
      async () => expect(await one<{ status: string }>(`SELECT status FROM export_jobs WHERE id = $1`, [exportId])).toEqual({ status: "PROCESSING" }),
      {
        timeoutMs: 30_000,
        intervalMs: 5,
      },
    );
    exporter.kill("SIGKILL");
    await exited(exporter);
    expect(await one<{ status: string }>(`SELECT status FROM export_jobs WHERE id = $1`, [exportId])).toEqual({ status: "PROCESSING" });

    exportsNode();
    // Ended: 200 with its URL once COMPLETED, 409 with status FAILED once given up (never lost, never stuck).
    const done = await eventually(
      async () => {
        const res = await api.get(`/exports/${exportId}`);
        expect(res.status === 200 || (res.status === 409 && res.body.status === "FAILED")).toBe(true);
        return res;
      },
      { timeoutMs: 90_000, intervalMs: 250 },
    );
    expect({ status: done.status, failed: done.body.detail }).toEqual({ status: 200, failed: undefined });
    // The file is whole: the header and one line per contact.
    const file = await fetch(`http://127.0.0.1:${gwPorts[1]}${new URL(done.body.downloadUrl as string).pathname}`);
    expect(file.status).toBe(200);
    const body = Buffer.from(await file.arrayBuffer());
    const text = body[0] === 0x1f && body[1] === 0x8b ? gunzipSync(body).toString("utf8") : body.toString("utf8");
    expect(text.trimEnd().split("\n").length).toBe(1 + contacts + more);
  }, 150_000);
  it("NATS restarted, then PostgreSQL cut and back, while receipts and partner calls flow: no event lost, no 5xx after, no process exited", async () => {
    const running = children.filter((c) => c.exitCode === null && c.signalCode === null);
    const since = Date.now();
    await tdb.db.sequelize.query(
      `INSERT INTO webhooks (company_id, callback_url) SELECT $1, $2 WHERE NOT EXISTS (SELECT 1 FROM webhooks WHERE company_id = $1)`,
      {
        bind: [companyId, receiver.url("/events")],
      },
    );
    receiver.behave(() => ({ status: 200 }));
    const before = receiver.received.length;
    const accepted: string[] = [];
    const ingressStatuses = new Set<number>();
    const apiStatuses = new Set<number>();
    let stop = false;
    const receipts = (async () => {
      for (let i = 0; !stop; i++) {
        const m = messageIn(companyId, { customerMessageId: `outage-${i}-${uid("m")}` });
        const reg = await ingress.post("/messages", m).catch(() => null);
        ingressStatuses.add(reg?.status ?? 0);
        if (reg?.status !== 202) continue;
        const rec = await ingress.post("/receipts/sms", smsReceiptIn(m)).catch(() => null);
        ingressStatuses.add(rec?.status ?? 0);
        if (rec?.status === 202) accepted.push(m.customerMessageId);
        // An end user writes: tracking's ingress hands it to the inbox node over NATS.
        const inbound = inboundIn(companyId, { messageId: `outage-in-${i}-${uid("m")}` });
        const res = await ingress.post("/inbound/whatsapp", inbound).catch(() => null);
        ingressStatuses.add(res?.status ?? 0);
        if (res?.status === 202) accepted.push(inbound.messageId);
      }
    })();
    const calls = (async () => {
      while (!stop) apiStatuses.add((await balanced("/contacts")).status);
    })();
    const readyOf = async (i: number) => (await fetch(`http://127.0.0.1:${gwPorts[i]}/healthz/ready`)).status;

    await eventually(() => expect(accepted.length).toBeGreaterThan(10), { timeoutMs: 20_000 });
    await nats.kill();
    for (const i of [0, 1]) await eventually(async () => expect(await readyOf(i)).toBe(503), { timeoutMs: 5000 });
    await new Promise((r) => setTimeout(r, 1000));
    await nats.start();
    for (const i of [0, 1]) await eventually(async () => expect(await readyOf(i)).toBe(200), { timeoutMs: 30_000, intervalMs: 200 });

    const beforeCut = accepted.length;
    proxy.cut();
    for (const i of [0, 1]) await eventually(async () => expect(await readyOf(i)).toBe(503), { timeoutMs: 5000 });
    const ingressReady = await fetch(`http://127.0.0.1:${ingressPort}/healthz/ready`);
    expect(ingressReady.status).toBe(503);
    await new Promise((r) => setTimeout(r, 1500));
    proxy.restore();
    for (const i of [0, 1]) await eventually(async () => expect(await readyOf(i)).toBe(200), { timeoutMs: 30_000, intervalMs: 200 });
    await eventually(() => expect(accepted.length).toBeGreaterThan(beforeCut + 10), { timeoutMs: 30_000 });
    stop = true;
    await Promise.all([receipts, calls]);

    // During the outages: refused honestly (503), never a 500; the upstream retries what was refused.
    expect([...ingressStatuses].filter((st) => st !== 202 && st !== 503)).toEqual([]);
    expect([...apiStatuses].filter((st) => st !== 200 && st !== 503)).toEqual([]);
    // The outages were felt: both the partner API and the ingress refused some requests.
    expect({ api: apiStatuses.has(503), ingress: ingressStatuses.has(503) }).toEqual({ api: true, ingress: true });
    // Every receipt and inbound message the ingress accepted had its event delivered, at least once.
    const arrived = () => new Set(receiver.received.slice(before).map((r) => String(r.json.messageId)));
    await eventually(() => expect(accepted.filter((id) => !arrived().has(id))).toEqual([]), { timeoutMs: 60_000, intervalMs: 200 });
    // After recovery: no 5xx, through both gateways; no process exited.
    for (const i of [0, 1])
      for (const p of ["/contacts", "/campaigns", "/webhooks/delivery-status", "/inbox/conversations"])
        expect({ i, p, status: (await apiOf(i).get(p)).status }).toEqual({ i, p, status: 200 });
    expect(running.filter((c) => c.exitCode !== null || c.signalCode !== null).map((c) => c.pid)).toEqual([]);
    // Logged as warnings (refused, retried), never as errors.
    const errors = logs.filter((r) => (typeof r.time !== "number" || r.time >= since) && (typeof r.level !== "number" || r.level >= 50));
    expect(errors.map((r) => `${String(r.nodeID)}: ${String(r.msg ?? r.line)}`)).toEqual([]);
  }, 150_000);
});
