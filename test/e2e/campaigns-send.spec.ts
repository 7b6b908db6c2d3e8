/**
 * Confirming and sending campaigns through the gateway on the simulator upstream: the audience
 * snapshot (distinct, valid, reachable), preview, statuses and progress, exactly one registered
 * message per recipient, receipts and statistics, test lists sent as simulations, scheduling,
 * pause/resume/cancel, and the contacts' lastCampaignType.
 */
import { QueryTypes } from "sequelize";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { receiptIn, messageIn } from "../helpers/builders";
import { addToList, campaignIn, messagesPerDestination, seedList, untilStatus } from "../helpers/campaigns";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";
import { mediaDouble } from "../helpers/media-double";

let t: TestApp;
let a: Account;
const media = mediaDouble();

beforeAll(async () => {
  t = await startTestApp({
    services: ["gateway", "auth", "contacts", "tracking", "campaigns", "simulator", "inbox"],
    extraServices: [media.schema],
    config: { simulatorProfile: "all-delivered", simulatorMaxDelayMs: 200, campaignPollMs: 50, rateLimitRps: 10000 },
  });
  a = await t.newAccount(["CAMPAIGNS", "CONTACTS", "SMS", "RCS", "WHATSAPP"]);
}, 60_000);
afterAll(() => t?.stop());

const sql = <T extends object>(q: string, bind: unknown[]) => t.db.sequelize.query<T>(q, { bind, type: QueryTypes.SELECT });

describe("a campaign sent end to end on the simulator", () => {
  it("sends each distinct reachable contact exactly one message, counts parts and prices, and reports statistics", async () => {
    const one = await seedList(a.api, 3, { contact: (i) => ({ firstName: i === 0 ? "Zoë" : `P${i}` }) });
    const two = await seedList(a.api, 2);
    await addToList(a.api, two.listId, [one.contactIds[1]!, one.contactIds[2]!]); // overlapping lists
    const emailOnly = await a.api.post("/contacts", { email: `nophone${Date.now()}@example.com`, firstName: "Mail" });
    await addToList(a.api, one.listId, [emailOnly.body.id]);
    const text = `Olá {{firstName|friend}}! ${"x".repeat(70)}`; // UCS-2 (á): over 70 units, two parts
    const c = (await a.api.post("/campaigns", campaignIn([one.listId, two.listId], { message: { text } }))).body;

    const pre = await a.api.get(`/campaigns/${c.id}/preview`);
    expect(pre.status).toBe(200);
    expect(pre.body).toMatchObject({ audience: 5, messages: 5, parts: 10, encodings: { GSM7: 0, UCS2: 5 } });
    expect(pre.body.samples.map((s: any) => s.text)).toContain(`Olá Zoë! ${"x".repeat(70)}`);
    expect((await sql(`SELECT 1 FROM campaign_recipients WHERE campaign_id = $1`, [c.id])).length).toBe(0);

    const conf = await a.api.put(`/campaigns/${c.id}/confirm`);
    expect(conf.status).toBe(202);
    expect(conf.body).toMatchObject({ status: "SCHEDULED", progress: { audience: 5, sent: 0, failed: 0 } });
    expectProblem(await a.api.put(`/campaigns/${c.id}/confirm`), 409);
    expectProblem(await a.api.put(`/campaigns/${c.id}`, { name: "late" }), 409);
    expectProblem(await a.api.delete(`/campaigns/${c.id}`), 409);

    const done = await untilStatus(a, c.id, "SENT");
    expect(done.progress).toEqual({ audience: 5, sent: 5, failed: 0, skipped: 0 });
    expect(done.completedAt).not.toBeNull();
    const perNumber = await messagesPerDestination(t, c.id);
    expect(perNumber.size).toBe(5);
    expect([...perNumber.values()]).toEqual([1, 1, 1, 1, 1]);

    // Receipts come back through the ingress: every message DELIVERED, each of its 2 parts priced.
    const stats = await eventually(async () => {
      const s = await a.api.get(`/campaigns/stats?campaignId=${c.id}`);
      expect(s.body).toMatchObject({ total: 5, pending: 0, byStatus: { DELIVERED: 5 } });
      return s.body;
    });
    expect(stats).toEqual({ total: 5, byStatus: { DELIVERED: 5 }, read: 0, pending: 0, parts: 10, price: 0.075, responded: 0 });
    expect((await a.api.get(`/campaigns/stats?channel=RCS`)).body.total).toBe(0);
    expect((await a.api.get(`/campaigns/stats?from=2001-01-01T00:00:00Z&to=2002-01-01T00:00:00Z`)).body.total).toBe(0);
    expectProblem(await a.api.get(`/campaigns/stats?from=2030-01-01T00:00:00Z&to=2002-01-01T00:00:00Z`), 400);

    const history = await a.api.get(`/messages/history?campaignId=${c.id}`);
    expect(history.body.data).toHaveLength(5);
    expect(history.body.data.every((m: any) => m.campaignId === c.id && m.deliveryStatus === "DELIVERED" && m.totalParts === 2)).toBe(true);

    await eventually(async () => {
      const contact = await a.api.get(`/contacts/${one.contactIds[0]}`);
      expect(contact.body).toMatchObject({ lastCampaignType: "SMS", lastContactType: "SMS" });
    });
    expect((await a.api.get(`/contacts/${emailOnly.body.id}`)).body.lastCampaignType).toBeNull();
    // Final: no more changes.
    expectProblem(await a.api.put(`/campaigns/${c.id}/cancel`), 409);
    expectProblem(await a.api.put(`/campaigns/${c.id}/pause`), 409);
  });

  it("never cuts a text placeholder values push past the maximum: preview counts it tooLong, the sender records it FAILED with why", async () => {
    await a.api.post("/contacts/custom-fields", { key: "note", type: "TEXT" });
    const { listId, contactIds } = await seedList(a.api, 3, { contact: (i) => ({ customFields: { note: i === 0 ? "🎉".repeat(40) : "ok" } }) });
    const text = `${"🎉".repeat(1570)}{{customFields.note}}`; // the template (1591) and 1570 + 2 fit SMS's 1600 characters; 1570 + 40 do not
    const c = (await a.api.post("/campaigns", campaignIn([listId], { message: { text } }))).body;
    expect(c.id).toBeDefined();
    const pre = await a.api.get(`/campaigns/${c.id}/preview`);
    expect(pre.body).toMatchObject({ audience: 3, messages: 2, tooLong: 1 });
    expect(pre.body.samples.map((x: any) => x.text)).toEqual([`${"🎉".repeat(1570)}ok`, `${"🎉".repeat(1570)}ok`]);
    await a.api.put(`/campaigns/${c.id}/confirm`);
    const done = await untilStatus(a, c.id, "SENT");
    expect(done.progress).toEqual({ audience: 3, sent: 2, failed: 1, skipped: 0 });
    const rows = await sql<{ contact_id: string; status: string; error: string }>(
      `SELECT contact_id, status, error FROM campaign_recipients WHERE campaign_id = $1 AND status = 'FAILED'`,
      [c.id],
    );
    expect(rows).toEqual([{ contact_id: contactIds[0], status: "FAILED", error: expect.stringMatching(/more than 1600 characters.*never cut/) }]);
    const sent = await sql<{ text: string }>(`SELECT text FROM messages WHERE campaign_id = $1`, [c.id]);
    expect(sent.map((m) => m.text)).toEqual([`${"🎉".repeat(1570)}ok`, `${"🎉".repeat(1570)}ok`]);
  });

  it("refuses an empty audience with a 400 and leaves the campaign DRAFT with no recipients", async () => {
    const { listId } = await seedList(a.api, 0);
    const c = (await a.api.post("/campaigns", campaignIn([listId]))).body;
    const res = await a.api.put(`/campaigns/${c.id}/confirm`);
    expectProblem(res, 400);
    expect(res.body.detail).toMatch(/empty/);
    expect((await a.api.get(`/campaigns/${c.id}`)).body).toMatchObject({ status: "DRAFT", progress: { audience: 0 } });
    expect((await sql(`SELECT 1 FROM campaign_recipients WHERE campaign_id = $1`, [c.id])).length).toBe(0);
  });

  it("refuses to confirm a campaign whose list was deleted meanwhile (400, still DRAFT)", async () => {
    const { listId } = await seedList(a.api, 1);
    const c = (await a.api.post("/campaigns", campaignIn([listId]))).body;
    await a.api.delete(`/contacts/list?ids=${listId}`);
    const res = await a.api.put(`/campaigns/${c.id}/confirm`);
    expectProblem(res, 400);
    expect(res.body.detail).toContain(String(listId));
    expect((await a.api.get(`/campaigns/${c.id}`)).body.status).toBe("DRAFT");
  });

  it("sends test lists with simulation: true (registered, never answered, not counted)", async () => {
    const { listId } = await seedList(a.api, 2, { list: { isTest: true } });
    const c = (await a.api.post("/campaigns", campaignIn([listId]))).body;
    await a.api.put(`/campaigns/${c.id}/confirm`);
    await untilStatus(a, c.id, "SENT");
    const rows = await sql<{ simulation: boolean; status_code: number }>(`SELECT simulation, status_code FROM messages WHERE campaign_id = $1`, [c.id]);
    expect(rows).toEqual([
      { simulation: true, status_code: 1 },
      { simulation: true, status_code: 1 },
    ]);
    await new Promise((r) => setTimeout(r, 500)); // past the simulator's delay: still no receipt
    expect((await sql(`SELECT 1 FROM messages WHERE campaign_id = $1 AND status_code <> 1`, [c.id])).length).toBe(0);
    expect((await a.api.get(`/campaigns/stats?campaignId=${c.id}`)).body.total).toBe(0);
  });

  it("skips RCS numbers whose latest RCS receipt was UNSUPPORTED, tries numbers never tried, and releases media when SENT", async () => {
    // The receipts reach the contacts through tracking's status feed, which contacts follows: the preview counts them once applied.
    const { listId, contactIds } = await seedList(a.api, 3);
    const phones = await Promise.all(contactIds.map(async (id) => (await a.api.get(`/contacts/${id}`)).body.phoneNumber as string));
    // phones[0]: UNSUPPORTED on RCS; phones[1]: UNSUPPORTED once, then DELIVERED later; phones[2]: never tried.
    const m0 = messageIn(a.companyId, { channel: "RCS", destination: phones[0] });
    const m1a = messageIn(a.companyId, { channel: "RCS", destination: phones[1], sentAt: new Date(Date.now() - 60_000).toISOString() });
    const m1b = messageIn(a.companyId, { channel: "RCS", destination: phones[1] });
    expect((await t.ingress.post("/messages", [m0, m1a, m1b])).status).toBe(202);
    expect((await t.ingress.post("/receipts/rcs", [receiptIn(m0, { statusCode: 11 }), receiptIn(m1a, { statusCode: 11 }), receiptIn(m1b)])).status).toBe(202);
    const mediaId = media.add(a.companyId);
    const c = (await a.api.post("/campaigns", campaignIn([listId], { channel: "RCS", message: { text: "Look!", mediaIds: [mediaId] } }))).body;
    expect(media.refs(a.companyId, `campaign:${c.id}`)).toEqual([mediaId]);
    // A transaction running anywhere on the test server holds the feed's newer rows back until it ends.
    await eventually(
      async () => expect((await a.api.get(`/campaigns/${c.id}/preview`)).body).toMatchObject({ audience: 2, messages: 2, parts: null, encodings: null }),
      { timeoutMs: 30_000 },
    );
    const conf = await a.api.put(`/campaigns/${c.id}/confirm`);
    expect(conf.body.progress.audience).toBe(2);
    await untilStatus(a, c.id, "SENT");
    expect([...(await messagesPerDestination(t, c.id)).keys()].sort()).toEqual([phones[1], phones[2]].sort());
    await eventually(() => expect(media.refs(a.companyId, `campaign:${c.id}`)).toEqual([]));
  });
});

describe("scheduling, pause, resume and cancel", () => {
  it("waits for scheduledAt, then sends", async () => {
    const { listId } = await seedList(a.api, 1);
    const at = new Date(Date.now() + 1500).toISOString();
    const c = (await a.api.post("/campaigns", campaignIn([listId], { scheduledAt: at }))).body;
    await a.api.put(`/campaigns/${c.id}/confirm`);
    await new Promise((r) => setTimeout(r, 700));
    expect((await a.api.get(`/campaigns/${c.id}`)).body).toMatchObject({ status: "SCHEDULED", progress: { sent: 0 } });
    const done = await untilStatus(a, c.id, "SENT");
    expect(Date.parse(done.completedAt)).toBeGreaterThanOrEqual(Date.parse(at));
  });

  it("pauses a sending campaign, resumes it where it stopped, and cancels another before it ends", async () => {
    const { listId } = await seedList(a.api, 12);
    const c = (await a.api.post("/campaigns", campaignIn([listId], { sendRatePerSecond: 4 }))).body;
    await a.api.put(`/campaigns/${c.id}/confirm`);
    await eventually(async () => expect((await a.api.get(`/campaigns/${c.id}`)).body.progress.sent).toBeGreaterThan(0));
    const paused = await a.api.put(`/campaigns/${c.id}/pause`);
    expect(paused.status).toBe(200);
    expect(paused.body).toMatchObject({ status: "PAUSED", pauseReason: expect.any(String) });
    expectProblem(await a.api.put(`/campaigns/${c.id}/pause`), 409);
    await new Promise((r) => setTimeout(r, 1500));
    const held = (await a.api.get(`/campaigns/${c.id}`)).body.progress.sent;
    await new Promise((r) => setTimeout(r, 1000));
    expect((await a.api.get(`/campaigns/${c.id}`)).body.progress.sent).toBe(held);
    expect(held).toBeLessThan(12);
    const resumed = await a.api.put(`/campaigns/${c.id}/resume`);
    expect(resumed.body).toMatchObject({ status: "SENDING", pauseReason: null });
    expectProblem(await a.api.put(`/campaigns/${c.id}/resume`), 409);
    const done = await untilStatus(a, c.id, "SENT", 30_000);
    expect(done.progress).toEqual({ audience: 12, sent: 12, failed: 0, skipped: 0 });
    expect([...(await messagesPerDestination(t, c.id)).values()].every((n) => n === 1)).toBe(true);

    const d = (await a.api.post("/campaigns", campaignIn([listId], { sendRatePerSecond: 2 }))).body;
    await a.api.put(`/campaigns/${d.id}/confirm`);
    await eventually(async () => expect((await a.api.get(`/campaigns/${d.id}`)).body.progress.sent).toBeGreaterThan(0));
    const cancelled = await a.api.put(`/campaigns/${d.id}/cancel`);
    expect(cancelled.body.status).toBe("CANCELLED");
    await new Promise((r) => setTimeout(r, 1500));
    const after = (await a.api.get(`/campaigns/${d.id}`)).body;
    expect(after.status).toBe("CANCELLED");
    expect(after.progress.sent).toBeLessThan(12);
    expect((await messagesPerDestination(t, d.id)).size).toBe(after.progress.sent);
  }, 60_000);
});
