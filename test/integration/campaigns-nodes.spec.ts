/**
 * Two campaigns nodes sending the same campaign over the real NATS: a core node (gateway, auth,
 * contacts) and two campaigns nodes on UPSTREAM_MODE=http, posting to a local upstream that counts
 * every request it receives per Idempotency-Key (before any deduplication). Each recipient is
 * handed over exactly once although both nodes claim batches of the same campaign at once, both
 * nodes take part (each node's own campaign_recipients_total), and sendRatePerSecond caps the pace
 * of the two together (the send slot is a row both claims move). A pause and an immediate resume
 * while batches are in flight hand none of their recipients to the other node.
 */
import type { Counter } from "prom-client";
import { QueryTypes } from "sequelize";
import { nodeRegistriesOf } from "../../lib/observability/http-metrics";
import { startTestApp, uid, type TestApp } from "../helpers/app";
import { campaignIn, untilStatus } from "../helpers/campaigns";
import { createTestDatabase, describeOverNats, TEST_NATS_URL, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { startUpstreamServer, type UpstreamServer } from "../helpers/upstream-server";

const AUDIENCE = 400;
const RATE = 200;

/** What a node's campaign_recipients_total says it sent. */
async function sentBy(node: TestApp): Promise<number> {
  for (const r of nodeRegistriesOf(node.app.broker)) {
    const m = r.getSingleMetric("campaign_recipients_total") as Counter | undefined;
    if (m) return (await m.get()).values.filter((v) => v.labels.outcome === "sent").reduce((n, v) => n + v.value, 0);
  }
  return 0;
}

describeOverNats("two campaigns nodes sending one campaign over NATS", () => {
  let tdb: TestDatabase;
  let core: TestApp;
  const senders: TestApp[] = [];
  let upstream: UpstreamServer;
  const namespace = uid("campaign-nodes");

  beforeAll(async () => {
    upstream = await startUpstreamServer();
    tdb = await createTestDatabase();
    const cluster = { transporter: TEST_NATS_URL, databaseUrl: tdb.db.url, internalTokenDisabled: true };
    core = await startTestApp({
      services: ["gateway", "auth", "contacts"],
      db: tdb.db,
      config: { ...cluster, rateLimitRps: 10000 },
      broker: { namespace, nodeID: `${namespace}-core` },
    });
    for (const n of ["a", "b"]) {
      senders.push(
        await startTestApp({
          services: ["campaigns"],
          db: tdb.db,
          config: {
            ...cluster,
            upstreamMode: "http",
            upstreamSmsUrl: `${upstream.base}/sms`,
            upstreamRcsUrl: `${upstream.base}/rcs`,
            upstreamWhatsappUrl: `${upstream.base}/whatsapp`,
            campaignPollMs: 50,
            campaignBatchSize: 20,
            campaignConcurrency: 2,
          },
          broker: { namespace, nodeID: `${namespace}-campaigns-${n}` },
        }),
      );
    }
    await core.app.broker.waitForServices(["campaigns"], 20_000);
    await eventually(async () => expect((await core.api.get("/campaigns")).status).toBe(401), { timeoutMs: 20_000 });
  }, 60_000);

  afterAll(async () => {
    for (const s of senders) await s.stop();
    await core?.stop();
    await tdb?.drop();
    await upstream?.close();
  });

  it("hands every recipient to the upstream exactly once, both nodes sending, at the campaign's rate in all", async () => {
    const a = await core.newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
    const [{ id: listId }] = (await tdb.db.sequelize.query(`INSERT INTO contact_lists (company_id, name) VALUES ($1, 'both') RETURNING id`, {
      bind: [a.companyId],
      type: QueryTypes.SELECT,
    })) as Array<{ id: string }>;
    const contacts = (await tdb.db.sequelize.query(
      `WITH c AS (INSERT INTO contacts (id, company_id, first_name, phone_number)
                  SELECT gen_random_uuid(), $1, 'P' || i, '+35198' || lpad(i::text, 7, '0') FROM generate_series(1, $2::int) i RETURNING id)
       INSERT INTO contact_list_members (company_id, list_id, contact_id) SELECT $1, $3, id FROM c RETURNING contact_id`,
      { bind: [a.companyId, AUDIENCE, listId], type: QueryTypes.SELECT },
    )) as Array<{ contact_id: string }>;
    const before = await Promise.all(senders.map(sentBy));

    const c = (await a.api.post("/campaigns", campaignIn([Number(listId)], { sendRatePerSecond: RATE }))).body;
    const t0 = Date.now();
    expect((await a.api.put(`/campaigns/${c.id}/confirm`)).status).toBe(202);
    const done = await untilStatus(a, c.id, "SENT", 30_000);
    const took = Date.now() - t0;
    expect(done.progress).toEqual({ audience: AUDIENCE, sent: AUDIENCE, failed: 0, skipped: 0 });

    const perKey = upstream.perKey(`cmp-${c.id}-`);
    expect(new Set(perKey.keys())).toEqual(new Set(contacts.map((x) => `cmp-${c.id}-${x.contact_id}`)));
    expect([...perKey.entries()].filter(([, n]) => n !== 1)).toEqual([]);

    const mine = (await Promise.all(senders.map(sentBy))).map((n, i) => n - before[i]!);
    expect(mine.reduce((x, y) => x + y, 0)).toBe(AUDIENCE);
    expect(mine.every((n) => n > 0)).toBe(true);
    // 400 at 200/s: the first batch at once, the last no sooner than 380 / 200 s later, whichever node claims it.
    expect(took).toBeGreaterThanOrEqual(((AUDIENCE - 20) / RATE) * 1000 - 100);
  }, 60_000);

  it("pauses with batches in flight and resumes at once: no node takes those recipients, each is handed over once", async () => {
    const a = await core.newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
    const [{ id: listId }] = (await tdb.db.sequelize.query(`INSERT INTO contact_lists (company_id, name) VALUES ($1, 'pause') RETURNING id`, {
      bind: [a.companyId],
      type: QueryTypes.SELECT,
    })) as Array<{ id: string }>;
    await tdb.db.sequelize.query(
      `WITH c AS (INSERT INTO contacts (id, company_id, first_name, phone_number)
                  SELECT gen_random_uuid(), $1, 'P' || i, '+35199' || lpad(i::text, 7, '0') FROM generate_series(1, 200) i RETURNING id)
       INSERT INTO contact_list_members (company_id, list_id, contact_id) SELECT $1, $2, id FROM c`,
      { bind: [a.companyId, listId] },
    );
    const c = (await a.api.post("/campaigns", campaignIn([Number(listId)]))).body;
    const prefix = `cmp-${c.id}-`;
    upstream.hold(); // batches handed over, never answered: in flight
    try {
      expect((await a.api.put(`/campaigns/${c.id}/confirm`)).status).toBe(202);
      await eventually(async () => expect(upstream.perKey(prefix).size).toBeGreaterThanOrEqual(40), { timeoutMs: 20_000, intervalMs: 20 });
      expect((await a.api.put(`/campaigns/${c.id}/pause`)).status).toBe(200);
      const held = async () =>
        (
          await tdb.db.sequelize.query<{ contact_id: string }>(
            `SELECT r.contact_id FROM campaign_recipients r
              WHERE r.campaign_id = $1 AND r.status = 'PENDING'
                AND EXISTS (SELECT 1 FROM campaign_batches b WHERE b.campaign_id = r.campaign_id AND b.leased_until > now()
                              AND (r.due_at, r.contact_id) BETWEEN (b.lo_due, b.lo_contact) AND (b.hi_due, b.hi_contact))
              ORDER BY r.contact_id`,
            { bind: [c.id], type: QueryTypes.SELECT },
          )
        ).map((r) => `${prefix}${r.contact_id}`);
      const atPause = await held();
      await new Promise((r) => setTimeout(r, 500)); // no batch is claimed once the pause has answered
      expect(await held()).toEqual(atPause);
      expect([...upstream.perKey(prefix).keys()].filter((k) => !atPause.includes(k))).toEqual([]);
      expect((await a.api.put(`/campaigns/${c.id}/resume`)).status).toBe(200);
      await new Promise((r) => setTimeout(r, 500)); // both nodes poll meanwhile: the recipients in flight are still held
      expect([...upstream.perKey(prefix).entries()].filter(([, n]) => n !== 1)).toEqual([]);
    } finally {
      upstream.release();
    }
    const done = await untilStatus(a, c.id, "SENT", 30_000);
    expect(done.progress).toEqual({ audience: 200, sent: 200, failed: 0, skipped: 0 });
    const perKey = upstream.perKey(prefix);
    expect(perKey.size).toBe(200);
    expect([...perKey.entries()].filter(([, n]) => n !== 1)).toEqual([]);
  }, 60_000);
});
