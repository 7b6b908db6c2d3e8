/**
 * Campaigns honour consent at the last moment (contract section 7, issue 31 item 2): a number opted
 * out of the channel before the confirm or while the campaign sends, and a contact deleted after the
 * confirm, are never messaged; they end skipped (progress.skipped), the preview counts them in
 * excluded.optedOut and never shows a deleted contact.
 */
import { QueryTypes } from "sequelize";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { campaignIn, messagesPerDestination, seedList, untilStatus } from "../helpers/campaigns";
import { inboundIn } from "../helpers/builders";
import { eventually } from "../helpers/eventually";
import { mediaDouble } from "../helpers/media-double";

let t: TestApp;
let a: Account;
const media = mediaDouble();

beforeAll(async () => {
  t = await startTestApp({
    services: ["gateway", "auth", "contacts", "tracking", "campaigns", "simulator", "inbox"],
    extraServices: [media.schema],
    config: { simulatorProfile: "all-delivered", simulatorMaxDelayMs: 100, campaignPollMs: 50, rateLimitRps: 10000 },
  });
  a = await t.newAccount(["CAMPAIGNS", "CONTACTS", "SMS", "RCS", "WHATSAPP", "INBOX"]);
}, 60_000);
afterAll(() => t?.stop());

const sql = <T extends object>(q: string, bind: unknown[]) => t.db.sequelize.query<T>(q, { bind, type: QueryTypes.SELECT });

/** Opts `phone` out of `channel` for the account, as the contacts service records it. */
async function optOut(companyId: string, channel: string, phone: string) {
  await t.db.sequelize.query(
    `INSERT INTO opt_outs (company_id, channel, phone_number, source) VALUES ($1, $2, $3, 'API')
     ON CONFLICT (company_id, channel, phone_number) DO UPDATE SET opted_out = true, changed_at = now()`,
    { bind: [companyId, channel, phone] },
  );
}

async function phonesOf(ids: string[]): Promise<string[]> {
  const rows = await sql<{ id: string; phone_number: string }>(`SELECT id, phone_number FROM contacts WHERE id = ANY ($1::uuid[])`, [ids]);
  const byId = new Map(rows.map((r) => [r.id, r.phone_number]));
  return ids.map((id) => byId.get(id)!);
}

describe("a campaign and opted-out numbers", () => {
  it("excludes a number opted out before the confirm: counted in the preview, skipped, never sent", async () => {
    const { listId, contactIds } = await seedList(a.api, 3, { contact: (i) => ({ firstName: `C${i}` }) });
    const phones = await phonesOf(contactIds);
    await optOut(a.companyId, "SMS", phones[1]!);
    await optOut(a.companyId, "RCS", phones[2]!); // another channel: no effect on SMS
    const c = (await a.api.post("/campaigns", campaignIn([listId]))).body;

    const preview = await a.api.get(`/campaigns/${c.id}/preview`);
    expect(preview.status).toBe(200);
    expect(preview.body).toMatchObject({ audience: 3, messages: 2, excluded: { optedOut: 1 } });
    expect(preview.body.samples.map((s: { destination: string }) => s.destination)).not.toContain(phones[1]);

    const confirmed = await a.api.put(`/campaigns/${c.id}/confirm`);
    expect(confirmed.status).toBe(202);
    expect(confirmed.body.progress).toMatchObject({ audience: 3, skipped: 1 });
    const done = await untilStatus(a, c.id, "SENT");
    expect(done.progress).toEqual({ audience: 3, sent: 2, failed: 0, skipped: 1 });
    const sent = await messagesPerDestination(t, c.id);
    expect(sent.get(phones[1]!)).toBeUndefined();
    expect(sent.get(phones[0]!)).toBe(1);
    expect(sent.get(phones[2]!)).toBe(1);
  });

  it("refuses to confirm when every number opted out (400, stays DRAFT)", async () => {
    const { listId, contactIds } = await seedList(a.api, 2);
    for (const p of await phonesOf(contactIds)) await optOut(a.companyId, "SMS", p);
    const c = (await a.api.post("/campaigns", campaignIn([listId]))).body;
    const res = await a.api.put(`/campaigns/${c.id}/confirm`);
    expect(res.status).toBe(400);
    expect(res.body.errors[0].path).toBe("contactListIds");
    expect((await a.api.get(`/campaigns/${c.id}`)).body.status).toBe("DRAFT");
  });

  it("skips a number that opts out while the campaign sends, between two batches", async () => {
    const { listId, contactIds } = await seedList(a.api, 4);
    const phones = await phonesOf(contactIds);
    // One message a second: a batch of one each second.
    const c = (await a.api.post("/campaigns", campaignIn([listId], { sendRatePerSecond: 1 }))).body;
    expect((await a.api.put(`/campaigns/${c.id}/confirm`)).status).toBe(202);
    // The first batch has gone out: opt out the contact sent last (by contact id, the claim order).
    await eventually(async () => expect([...(await messagesPerDestination(t, c.id)).values()].length).toBeGreaterThanOrEqual(1), {
      timeoutMs: 10_000,
      intervalMs: 20,
    });
    const order = [...contactIds].sort();
    const last = phones[contactIds.indexOf(order[order.length - 1]!)]!;
    await optOut(a.companyId, "SMS", last);
    const done = await untilStatus(a, c.id, "SENT", 20_000);
    expect(done.progress).toEqual({ audience: 4, sent: 3, failed: 0, skipped: 1 });
    expect((await messagesPerDestination(t, c.id)).get(last)).toBeUndefined();
    const [row] = await sql<{ status: string }>(`SELECT status FROM campaign_recipients WHERE campaign_id = $1 AND destination = $2`, [c.id, last]);
    expect(row!.status).toBe("SKIPPED");
  }, 30_000);

  /** A campaign of `n` contacts at one message a second; answers it once its first message is registered, with the contacts in send order. */
  async function sending(channel: string, n: number) {
    const { listId, contactIds } = await seedList(a.api, n);
    const phones = await phonesOf(contactIds);
    const c = (await a.api.post("/campaigns", campaignIn([listId], { channel, sendRatePerSecond: 1 }))).body;
    expect((await a.api.put(`/campaigns/${c.id}/confirm`)).status).toBe(202);
    await eventually(async () => expect([...(await messagesPerDestination(t, c.id)).values()].length).toBeGreaterThanOrEqual(1), {
      timeoutMs: 10_000,
      intervalMs: 20,
    });
    const order = [...contactIds].sort();
    return { id: c.id as string, last: phones[contactIds.indexOf(order[order.length - 1]!)]! };
  }

  it("skips the number whose STOP arrives (an inbound WhatsApp message) between two batches", async () => {
    const c = await sending("WHATSAPP", 3);
    const stop = inboundIn(a.companyId, { source: c.last, text: "  Stop " });
    expect((await t.ingress.post("/inbound/whatsapp", stop)).status).toBe(202);
    const done = await untilStatus(a, c.id, "SENT", 20_000);
    expect(done.progress).toEqual({ audience: 3, sent: 2, failed: 0, skipped: 1 });
    expect((await messagesPerDestination(t, c.id)).get(c.last)).toBeUndefined();
    // The STOP itself is still an inbound message of the inbox.
    const chats = await a.api.get(`/inbox/conversations?search=${encodeURIComponent(c.last)}`);
    expect(chats.body.data[0].lastMessagePreview).toMatch(/stop/i);
  }, 30_000);

  it("skips the number an SMS upstream reports opted out (POST /internal/v1/opt-outs) between two batches", async () => {
    const c = await sending("SMS", 3);
    const res = await t.ingress.post("/opt-outs", {
      companyId: a.companyId,
      channel: "SMS",
      phoneNumber: c.last,
      action: "OPT_OUT",
      at: new Date().toISOString(),
    });
    expect(res.status).toBe(202);
    const done = await untilStatus(a, c.id, "SENT", 20_000);
    expect(done.progress).toEqual({ audience: 3, sent: 2, failed: 0, skipped: 1 });
    expect((await messagesPerDestination(t, c.id)).get(c.last)).toBeUndefined();
  }, 30_000);

  it("never messages a contact deleted after the confirm, and the preview no longer shows it", async () => {
    const { listId, contactIds } = await seedList(a.api, 3, { contact: (i) => ({ firstName: `Del${i}` }) });
    const phones = await phonesOf(contactIds);
    const c = (await a.api.post("/campaigns", campaignIn([listId], { sendRatePerSecond: 1 }))).body;
    expect((await a.api.put(`/campaigns/${c.id}/confirm`)).status).toBe(202);
    const order = [...contactIds].sort();
    const gone = order[order.length - 1]!;
    expect((await a.api.delete(`/contacts/${gone}`)).status).toBe(204);
    const preview = await a.api.get(`/campaigns/${c.id}/preview`);
    expect(preview.status).toBe(200);
    expect(preview.body.audience).toBe(2);
    expect(JSON.stringify(preview.body)).not.toContain(gone);
    expect(JSON.stringify(preview.body)).not.toContain(phones[contactIds.indexOf(gone)]!);
    const done = await untilStatus(a, c.id, "SENT", 20_000);
    expect(done.progress).toEqual({ audience: 3, sent: 2, failed: 0, skipped: 1 });
    expect((await messagesPerDestination(t, c.id)).get(phones[contactIds.indexOf(gone)]!)).toBeUndefined();
  }, 30_000);
});
