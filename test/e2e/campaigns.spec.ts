/**
 * The campaign resource through the gateway: create, find, get, update, delete; every bad input is a
 * 4xx problem with nothing stored; another account's campaign is a 404 on every route and stays as
 * it was; a key without the campaign's channel is a 401; statuses guard every change (409).
 * The media service is the test double of test/helpers/media-double.ts (a sibling change builds it).
 */
import { QueryTypes } from "sequelize";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { campaignIn, seedList } from "../helpers/campaigns";
import { expectProblem } from "../helpers/expect";
import { mediaDouble } from "../helpers/media-double";

let t: TestApp;
let a: Account;
let b: Account;
let listA: number;
const media = mediaDouble();

beforeAll(async () => {
  t = await startTestApp({
    services: ["gateway", "auth", "contacts", "tracking", "campaigns", "simulator", "inbox"],
    extraServices: [media.schema],
    config: { simulatorProfile: "all-delivered", simulatorMaxDelayMs: 100, campaignPollMs: 50, rateLimitRps: 10000 },
  });
  a = await t.newAccount(["CAMPAIGNS", "CONTACTS", "SMS", "RCS", "WHATSAPP"]);
  b = await t.newAccount(["CAMPAIGNS", "CONTACTS", "SMS", "RCS", "WHATSAPP"]);
  listA = (await seedList(a.api, 2)).listId;
}, 60_000);
afterAll(() => t?.stop());

const campaignsOf = async (companyId: string) =>
  (await t.db.sequelize.query<{ n: string }>(`SELECT count(*) AS n FROM campaigns WHERE company_id = $1`, { bind: [companyId], type: QueryTypes.SELECT }))[0]!
    .n;

describe("creating and reading campaigns", () => {
  it("creates a DRAFT with every field of the contract and reads it back", async () => {
    const body = campaignIn([listA], { scheduledAt: new Date(Date.now() + 3600_000).toISOString(), sendRatePerSecond: 20 });
    const res = await a.api.post("/campaigns", body);
    expect(res.status).toBe(201);
    expect(res.headers.get("location")).toMatch(new RegExp(`/campaigns/${res.body.id}$`));
    expect(res.body).toMatchObject({
      name: body.name,
      channel: "SMS",
      status: "DRAFT",
      contactListIds: [listA],
      message: { text: body.message.text, mediaIds: [] },
      sendRatePerSecond: 20,
      progress: { audience: 0, sent: 0, failed: 0, skipped: 0 },
      pauseReason: null,
      confirmedAt: null,
      completedAt: null,
    });
    expect(Date.parse(res.body.scheduledAt)).toBe(Date.parse(body.scheduledAt));
    expect((await a.api.get(`/campaigns/${res.body.id}`)).body).toEqual(res.body);
  });

  it("finds campaigns by status, channel and part of the name, in the page envelope", async () => {
    const acct = await t.newAccount(["CAMPAIGNS", "CONTACTS", "SMS", "RCS"]);
    const { listId } = await seedList(acct.api, 1);
    await acct.api.post("/campaigns", campaignIn([listId], { name: "Spring sale" }));
    await acct.api.post("/campaigns", campaignIn([listId], { name: "Autumn news", channel: "RCS" }));
    const all = await acct.api.get("/campaigns");
    expect(all.body).toMatchObject({ page: 0, limit: 10, total: 2, totalPages: 1 });
    expect(all.body.data.map((c: any) => c.name)).toEqual(["Autumn news", "Spring sale"]);
    expect((await acct.api.get("/campaigns?search=SPRING")).body.data.map((c: any) => c.name)).toEqual(["Spring sale"]);
    expect((await acct.api.get("/campaigns?channel=RCS")).body.data.map((c: any) => c.name)).toEqual(["Autumn news"]);
    expect((await acct.api.get("/campaigns?status=SENT")).body.total).toBe(0);
    expect((await acct.api.get("/campaigns?sortBy=name&sortOrder=asc&limit=1&page=1")).body.data.map((c: any) => c.name)).toEqual(["Spring sale"]);
    expectProblem(await acct.api.get("/campaigns?limit=1001"), 400);
    expectProblem(await acct.api.get("/campaigns?status=DONE"), 400);
  });

  it("updates a DRAFT partially and deletes it", async () => {
    const c = (await a.api.post("/campaigns", campaignIn([listA]))).body;
    const up = await a.api.put(`/campaigns/${c.id}`, { name: "Renamed", message: { text: "Hi {{lastName}}" } });
    expect(up.status).toBe(200);
    expect(up.body).toMatchObject({ name: "Renamed", message: { text: "Hi {{lastName}}" }, contactListIds: [listA] });
    expectProblem(await a.api.put(`/campaigns/${c.id}`, {}), 400);
    expect((await a.api.delete(`/campaigns/${c.id}`)).status).toBe(204);
    expectProblem(await a.api.get(`/campaigns/${c.id}`), 404);
  });
});

describe("bad input: a 4xx problem and nothing stored", () => {
  const cases: Array<[string, (l: number) => unknown, RegExp?]> = [
    ["an unknown placeholder", (l) => campaignIn([l], { message: { text: "Hi {{nickname}}" } }), /unknown placeholder/],
    ["an unterminated placeholder", (l) => campaignIn([l], { message: { text: "Hi {{firstName" } }), /unterminated/],
    ["a nested placeholder", (l) => campaignIn([l], { message: { text: "Hi {{first{{Name}}}}" } }), /nested/],
    ["an undeclared custom field", (l) => campaignIn([l], { message: { text: "Hi {{customFields.tier}}" } }), /custom fields/],
    ["SMS text over 1600 characters", (l) => campaignIn([l], { message: { text: "a".repeat(1601) } }), /1600/],
    ["RCS text over 3072 characters", (l) => campaignIn([l], { channel: "RCS", message: { text: "a".repeat(3073) } }), /3072/],
    ["a text over every channel's maximum", (l) => campaignIn([l], { channel: "WHATSAPP", message: { text: "a".repeat(4097) } })],
    ["media on SMS", (l) => campaignIn([l], { message: { text: "x", mediaIds: [media.add("x")] } }), /SMS/],
    ["unknown media", (l) => campaignIn([l], { channel: "RCS", message: { text: "x", mediaIds: ["nope-1"] } }), /nope-1/],
    ["an unknown list", (l) => campaignIn([l, 987654321]), /987654321/],
    ["scheduledAt in the past", (l) => campaignIn([l], { scheduledAt: "2001-01-01T00:00:00Z" }), /future/],
    ["scheduledAt unparsable", (l) => campaignIn([l], { scheduledAt: "tomorrow" })],
    ["scheduledAt a leap second", (l) => campaignIn([l], { scheduledAt: "2030-12-31T23:59:60Z" }), /scheduledAt/],
    ["a null name", (l) => campaignIn([l], { name: null })],
    ["a huge name", (l) => campaignIn([l], { name: "n".repeat(100_000) })],
    ["contactListIds as a string", () => campaignIn([], { contactListIds: "1,2" })],
    ["no lists", () => campaignIn([])],
    ["an unknown channel", (l) => campaignIn([l], { channel: "FAX" })],
    ["an unknown field", (l) => ({ ...campaignIn([l]), priority: 1 })],
    ["sendRatePerSecond 0", (l) => campaignIn([l], { sendRatePerSecond: 0 })],
    ["a hostile text (thousands of unterminated braces)", (l) => campaignIn([l], { message: { text: "{{".repeat(2000) } })],
  ];
  // Rest parameters: a handler of arity 3 would be taken for a done-callback test on two-element rows.
  it.each(cases)("refuses %s", async (...[, body, detail]: [string, (l: number) => unknown, RegExp?]) => {
    const before = await campaignsOf(a.companyId);
    const res = await a.api.post("/campaigns", body(listA));
    expectProblem(res, res.status);
    expect(res.status).toBe(400);
    if (detail) expect(JSON.stringify(res.body)).toMatch(detail);
    expect(await campaignsOf(a.companyId)).toBe(before);
  });

  it("refuses another account's list and a deleted list, naming them", async () => {
    const foreign = (await seedList(b.api, 0)).listId;
    const gone = (await seedList(a.api, 0)).listId;
    expect((await a.api.delete(`/contacts/list?ids=${gone}`)).status).toBe(200);
    const res = await a.api.post("/campaigns", campaignIn([listA, foreign, gone]));
    expectProblem(res, 400);
    expect(res.body.detail).toContain(String(foreign));
    expect(res.body.detail).toContain(String(gone));
  });

  it("answers 401 to a key without the campaign's channel, on create, update and confirm", async () => {
    const smsOnly = await t.newAccount(["CAMPAIGNS", "CONTACTS", "SMS"], { companyId: a.companyId });
    expectProblem(await smsOnly.api.post("/campaigns", campaignIn([listA], { channel: "WHATSAPP" })), 401);
    const wa = (await a.api.post("/campaigns", campaignIn([listA], { channel: "WHATSAPP" }))).body;
    expectProblem(await smsOnly.api.put(`/campaigns/${wa.id}`, { name: "x" }), 401);
    expectProblem(await smsOnly.api.put(`/campaigns/${wa.id}/confirm`), 401);
    const sms = (await smsOnly.api.post("/campaigns", campaignIn([listA]))).body;
    expectProblem(await smsOnly.api.put(`/campaigns/${sms.id}`, { channel: "RCS" }), 401);
    expect((await a.api.get(`/campaigns/${wa.id}`)).body).toMatchObject({ status: "DRAFT", name: wa.name });
    const noCampaigns = await t.newAccount(["CONTACTS", "SMS"], { companyId: a.companyId });
    expectProblem(await noCampaigns.api.get("/campaigns"), 401);
  });

  it("answers 503, not 500, while the media service is away; nothing is stored", async () => {
    const id = media.add(a.companyId);
    const svc = t.app.broker.getLocalService("media")!;
    await t.app.broker.destroyService(svc);
    try {
      const before = await campaignsOf(a.companyId);
      const res = await a.api.post("/campaigns", campaignIn([listA], { channel: "RCS", message: { text: "x", mediaIds: [id] } }));
      expectProblem(res, 503);
      expect(await campaignsOf(a.companyId)).toBe(before);
    } finally {
      t.app.broker.createService(media.schema);
      await t.app.broker.waitForServices(["media"]);
    }
  });
});

describe("another account's campaign", () => {
  it("is a 404 on every route and is left untouched", async () => {
    const c = (await a.api.post("/campaigns", campaignIn([listA]))).body;
    const routes: Array<[string, string, unknown?]> = [
      ["GET", `/campaigns/${c.id}`],
      ["PUT", `/campaigns/${c.id}`, { name: "hijack" }],
      ["DELETE", `/campaigns/${c.id}`],
      ["PUT", `/campaigns/${c.id}/confirm`],
      ["PUT", `/campaigns/${c.id}/pause`],
      ["PUT", `/campaigns/${c.id}/resume`],
      ["PUT", `/campaigns/${c.id}/cancel`],
      ["GET", `/campaigns/${c.id}/preview`],
      ["GET", `/campaigns/stats?campaignId=${c.id}`],
    ];
    for (const [method, path, body] of routes) {
      const res = await b.api.request(method, path, body === undefined ? {} : { body });
      expect({ method, path, status: res.status }).toEqual({ method, path, status: 404 });
      expectProblem(res, 404);
    }
    expect((await a.api.get(`/campaigns/${c.id}`)).body).toEqual(c);
    expect((await b.api.get("/campaigns")).body.data.map((x: any) => x.id)).not.toContain(c.id);
  });
});

describe("media references", () => {
  it("registers a campaign's media with the media service and replaces them on update", async () => {
    const [m1, m2] = [media.add(a.companyId), media.add(a.companyId, "video")];
    const c = (await a.api.post("/campaigns", campaignIn([listA], { channel: "RCS", message: { text: "Look", mediaIds: [m1] } }))).body;
    expect(c.message.mediaIds).toEqual([m1]);
    expect(media.refs(a.companyId, `campaign:${c.id}`)).toEqual([m1]);
    await a.api.put(`/campaigns/${c.id}`, { message: { text: "Look", mediaIds: [m2] } });
    expect(media.refs(a.companyId, `campaign:${c.id}`)).toEqual([m2]);
    const otherAccounts = media.add(b.companyId);
    expectProblem(await a.api.put(`/campaigns/${c.id}`, { message: { text: "x", mediaIds: [otherAccounts] } }), 400);
    expect(media.refs(a.companyId, `campaign:${c.id}`)).toEqual([m2]);
    expect((await a.api.delete(`/campaigns/${c.id}`)).status).toBe(204);
    expect(media.refs(a.companyId, `campaign:${c.id}`)).toEqual([]);
  });

  it("puts media references back when the campaign's transaction fails at commit (no orphan reference)", async () => {
    // A deferred trigger fails the commit of campaigns named "fail-at-commit", after media.reference ran.
    await t.db.sequelize.query(`CREATE OR REPLACE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.name = 'fail-at-commit' THEN RAISE EXCEPTION 'commit refused by the test'; END IF; RETURN NEW; END $$`);
    await t.db.sequelize.query(`CREATE CONSTRAINT TRIGGER fail_at_commit AFTER INSERT OR UPDATE ON campaigns DEFERRABLE INITIALLY DEFERRED
      FOR EACH ROW EXECUTE FUNCTION fail_at_commit()`);
    try {
      const [m1, m2] = [media.add(a.companyId), media.add(a.companyId)];
      const before = media.owners(a.companyId);
      const res = await a.api.post("/campaigns", campaignIn([listA], { name: "fail-at-commit", channel: "RCS", message: { text: "x", mediaIds: [m1] } }));
      expect(res.status).toBe(500);
      expect(media.owners(a.companyId)).toEqual(before);
      const c = (await a.api.post("/campaigns", campaignIn([listA], { channel: "RCS", message: { text: "x", mediaIds: [m1] } }))).body;
      expect((await a.api.put(`/campaigns/${c.id}`, { name: "fail-at-commit", message: { text: "x", mediaIds: [m2] } })).status).toBe(500);
      expect(media.refs(a.companyId, `campaign:${c.id}`)).toEqual([m1]);
    } finally {
      await t.db.sequelize.query(`DROP TRIGGER fail_at_commit ON campaigns`);
    }
  });
});
