/**
 * A campaign's schedule and its confirm are rows, not memory: a campaign confirmed for later on a
 * process that then stops is started when due by the process that comes back on the same database;
 * two confirms of the same campaign racing answer one 202 and one 409, with one audience snapshot;
 * the contacts a campaign reached are marked contacted even when the contacts service was away
 * while it was sent (the marks are rows, tried again until contacts answers).
 */
import { QueryTypes } from "sequelize";
import { startTestApp, type TestApp } from "../helpers/app";
import { campaignIn, messagesPerDestination, seedList } from "../helpers/campaigns";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";
import { Http } from "../helpers/http";
import { SERVICE_FACTORIES } from "../../services";

const SERVICES = ["gateway", "auth", "contacts", "tracking", "campaigns", "simulator"] as const;
const CONFIG = { simulatorProfile: "all-delivered" as const, simulatorMaxDelayMs: 100, campaignPollMs: 50, rateLimitRps: 10000 };

let tdb: TestDatabase;
const apps: TestApp[] = [];
const start = async () => {
  const t = await startTestApp({ services: SERVICES, db: tdb.db, config: CONFIG });
  apps.push(t);
  return t;
};

beforeAll(async () => {
  tdb = await createTestDatabase();
}, 60_000);
afterAll(async () => {
  for (const t of apps) await t.stop();
  await tdb?.drop();
});

const campaign = async (id: string) =>
  (
    await tdb.db.sequelize.query<{ status: string; sent: number; audience: number; completed_at: Date | null }>(
      `SELECT status, sent, audience, completed_at FROM campaigns WHERE id = $1`,
      { bind: [id], type: QueryTypes.SELECT },
    )
  )[0]!;

it("starts a campaign confirmed for later when it is due, on the process that came back after a restart", async () => {
  const first = await start();
  const a = await first.newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
  const { listId } = await seedList(a.api, 3);
  const at = new Date(Date.now() + 2500).toISOString();
  const c = (await a.api.post("/campaigns", campaignIn([listId], { scheduledAt: at }))).body;
  expect((await a.api.put(`/campaigns/${c.id}/confirm`)).body).toMatchObject({ status: "SCHEDULED" });
  await first.stop();
  apps.splice(apps.indexOf(first), 1);
  // Nobody runs while it comes due.
  await new Promise((r) => setTimeout(r, Math.max(0, Date.parse(at) - Date.now() + 300)));
  expect(await campaign(c.id)).toMatchObject({ status: "SCHEDULED", sent: 0 });

  const second = await start();
  const api = new Http(second.api.baseUrl, { "x-api-key": a.key.apiKey });
  const done = await eventually(
    async () => {
      const r = await api.get(`/campaigns/${c.id}`);
      expect(r.body.status).toBe("SENT");
      return r.body;
    },
    { timeoutMs: 20_000, intervalMs: 100 },
  );
  expect(done.progress).toEqual({ audience: 3, sent: 3, failed: 0, skipped: 0 });
  expect(Date.parse(done.completedAt)).toBeGreaterThanOrEqual(Date.parse(at));
  expect([...(await messagesPerDestination(second, c.id)).values()]).toEqual([1, 1, 1]);
}, 60_000);

it("confirms once when two confirms of the same campaign race: one 202, the other 409, one audience snapshot", async () => {
  const t = apps[0] ?? (await start());
  const a = await t.newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
  const { listId } = await seedList(a.api, 1);
  // A larger audience, written set-based, so the snapshot takes a while and the two overlap.
  await tdb.db.sequelize.query(
    `WITH c AS (INSERT INTO contacts (id, company_id, first_name, phone_number)
                SELECT gen_random_uuid(), $1, 'P' || i, '+35197' || lpad(i::text, 7, '0') FROM generate_series(1, 3000) i RETURNING id)
     INSERT INTO contact_list_members (company_id, list_id, contact_id) SELECT $1, $2, id FROM c`,
    { bind: [a.companyId, listId] },
  );
  for (let round = 0; round < 3; round++) {
    const c = (await a.api.post("/campaigns", campaignIn([listId], { scheduledAt: new Date(Date.now() + 3600_000).toISOString() }))).body;
    const answers = await Promise.all([a.api.put(`/campaigns/${c.id}/confirm`), a.api.put(`/campaigns/${c.id}/confirm`)]);
    expect(answers.map((r) => r.status).sort()).toEqual([202, 409]);
    const lost = answers.find((r) => r.status === 409)!;
    expectProblem(lost, 409);
    expect(lost.body.campaignStatus).toBe("SCHEDULED");
    const [snap] = await tdb.db.sequelize.query<{ n: number }>(`SELECT count(*)::int AS n FROM campaign_recipients WHERE campaign_id = $1`, {
      bind: [c.id],
      type: QueryTypes.SELECT,
    });
    expect(snap!.n).toBe(3001);
    expect(await campaign(c.id)).toMatchObject({ status: "SCHEDULED", audience: 3001 });
  }
}, 60_000);

it("marks the reached contacts contacted once the contacts service is back, though it was away while the campaign was sent", async () => {
  for (const other of apps.splice(0)) await other.stop(); // no other campaigns node to mark them
  // No contacts service on this node: lists and contacts are rows written here, as another node would have.
  const t = await startTestApp({ services: ["gateway", "auth", "tracking", "campaigns", "simulator"], db: tdb.db, config: CONFIG });
  apps.push(t);
  const a = await t.newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
  const sql = <T extends object>(q: string, bind: unknown[]) => tdb.db.sequelize.query<T>(q, { bind, type: QueryTypes.SELECT });
  const [{ id: listId }] = await sql<{ id: string }>(`INSERT INTO contact_lists (company_id, name) VALUES ($1, 'away') RETURNING id`, [a.companyId]);
  await sql(
    `WITH c AS (INSERT INTO contacts (id, company_id, first_name, phone_number)
                SELECT gen_random_uuid(), $1, 'P' || i, '+35195' || lpad(i::text, 7, '0') FROM generate_series(1, 4) i RETURNING id)
     INSERT INTO contact_list_members (company_id, list_id, contact_id) SELECT $1, $2, id FROM c RETURNING 1`,
    [a.companyId, listId],
  );
  const c = (await a.api.post("/campaigns", campaignIn([Number(listId)]))).body;
  expect((await a.api.put(`/campaigns/${c.id}/confirm`)).status).toBe(202);
  await eventually(async () => expect((await a.api.get(`/campaigns/${c.id}`)).body.status).toBe("SENT"), { timeoutMs: 20_000, intervalMs: 100 });
  const contacted = () => sql<{ n: number }>(`SELECT count(*)::int AS n FROM contacts WHERE company_id = $1 AND last_campaign_type = 'SMS'`, [a.companyId]);
  // contacts.markContacted could not be reached: the marks wait, tried again.
  await eventually(
    async () =>
      expect((await sql<{ attempts: number }>(`SELECT attempts FROM campaign_contact_marks WHERE campaign_id = $1`, [c.id]))[0]?.attempts).toBeGreaterThan(0),
    { timeoutMs: 10_000, intervalMs: 100 },
  );
  expect((await contacted())[0]!.n).toBe(0);

  await t.app.broker.createService(SERVICE_FACTORIES.contacts({ config: t.config, db: tdb.db }));
  await eventually(async () => expect((await contacted())[0]!.n).toBe(4), { timeoutMs: 20_000, intervalMs: 200 });
  expect(await sql(`SELECT 1 FROM campaign_contact_marks WHERE campaign_id = $1`, [c.id])).toEqual([]);
}, 60_000);
