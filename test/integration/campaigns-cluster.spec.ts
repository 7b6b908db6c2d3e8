/**
 * Campaigns on their own node over the real NATS, as operators run them: a core node (gateway, auth,
 * contacts, tracking, the media test double) and a campaigns node (campaigns, simulator). Problems
 * (400, 404, 409, 401) keep their status and detail across the wire, the media calls cross it, and
 * a campaign goes out end to end: registered through tracking on the other node, receipts back,
 * statistics from the campaigns node.
 */
import { startTestApp, uid, type TestApp } from "../helpers/app";
import { campaignIn, messagesPerDestination, seedList, untilStatus } from "../helpers/campaigns";
import { createTestDatabase, describeOverNats, TEST_NATS_URL, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";
import { mediaDouble } from "../helpers/media-double";

describeOverNats("campaigns over NATS", () => {
  let tdb: TestDatabase;
  let core: TestApp;
  let sender: TestApp;
  const namespace = uid("campaigns");
  const media = mediaDouble();

  beforeAll(async () => {
    tdb = await createTestDatabase();
    const cluster = { transporter: TEST_NATS_URL, databaseUrl: tdb.db.url, internalTokenDisabled: true };
    core = await startTestApp({
      services: ["gateway", "auth", "contacts", "tracking"],
      extraServices: [media.schema],
      db: tdb.db,
      config: cluster,
      broker: { namespace, nodeID: `${namespace}-core` },
    });
    sender = await startTestApp({
      services: ["campaigns", "simulator", "inbox"],
      db: tdb.db,
      config: { ...cluster, simulatorProfile: "all-delivered", simulatorMaxDelayMs: 100, campaignPollMs: 50 },
      broker: { namespace, nodeID: `${namespace}-campaigns` },
    });
    await core.app.broker.waitForServices(["campaigns", "simulator"], 20_000);
    await eventually(async () => expect((await core.api.get("/campaigns")).status).toBe(401), { timeoutMs: 20_000 });
  }, 60_000);

  afterAll(async () => {
    await sender?.stop();
    await core?.stop();
    await tdb?.drop();
  });

  it("answers problems across the wire and sends a campaign from its own node", async () => {
    const a = await core.newAccount(["CAMPAIGNS", "CONTACTS", "SMS", "RCS"]);
    const b = await core.newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
    const { listId } = await seedList(a.api, 3);
    const bad = await a.api.post("/campaigns", campaignIn([listId], { message: { text: "Hi {{nickname}}" } }));
    expectProblem(bad, 400);
    expect(bad.body.errors[0]).toMatchObject({ path: "message.text" });
    const mediaId = media.add(a.companyId);
    const rcs = await a.api.post("/campaigns", campaignIn([listId], { channel: "RCS", message: { text: "x", mediaIds: [mediaId] } }));
    expect(rcs.status).toBe(201);
    expect(media.refs(a.companyId, `campaign:${rcs.body.id}`)).toEqual([mediaId]);
    expectProblem(await b.api.put(`/campaigns/${rcs.body.id}/confirm`), 404);

    const c = (await a.api.post("/campaigns", campaignIn([listId]))).body;
    expect((await a.api.put(`/campaigns/${c.id}/confirm`)).status).toBe(202);
    const again = await a.api.put(`/campaigns/${c.id}/confirm`);
    expectProblem(again, 409);
    expect(again.body.campaignStatus).toMatch(/SCHEDULED|SENDING|SENT/);
    expect(again.body.detail).toContain(again.body.campaignStatus);
    const done = await untilStatus(a, c.id, "SENT");
    expect(done.progress).toEqual({ audience: 3, sent: 3, failed: 0, skipped: 0 });
    expect([...(await messagesPerDestination(core, c.id)).values()]).toEqual([1, 1, 1]);
    await eventually(async () => expect((await a.api.get(`/campaigns/stats?campaignId=${c.id}`)).body).toMatchObject({ total: 3, byStatus: { DELIVERED: 3 } }));
  }, 60_000);

  it("skips, from the campaigns node, a number opted out and a contact deleted after the confirm", async () => {
    const a = await core.newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
    const { listId, contactIds } = await seedList(a.api, 4);
    const order = [...contactIds].sort();
    const phoneOf = async (id: string) => (await a.api.get(`/contacts/${id}`)).body.phoneNumber as string;
    const optedOut = await phoneOf(order[3]!);
    const deleted = await phoneOf(order[2]!);
    const c = (await a.api.post("/campaigns", campaignIn([listId], { sendRatePerSecond: 1 }))).body;
    expect((await a.api.put(`/campaigns/${c.id}/confirm`)).status).toBe(202);
    // After the confirm: one contact deleted, one number opted out (as the contacts service records it).
    expect((await a.api.delete(`/contacts/${order[2]}`)).status).toBe(204);
    await tdb.db.sequelize.query(`INSERT INTO opt_outs (company_id, channel, phone_number, source) VALUES ($1, 'SMS', $2, 'API')`, {
      bind: [a.companyId, optedOut],
    });
    const done = await untilStatus(a, c.id, "SENT", 20_000);
    expect(done.progress).toEqual({ audience: 4, sent: 2, failed: 0, skipped: 2 });
    const sent = await messagesPerDestination(core, c.id);
    expect(sent.get(optedOut)).toBeUndefined();
    expect(sent.get(deleted)).toBeUndefined();
  }, 60_000);
});
