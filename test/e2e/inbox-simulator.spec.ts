/**
 * The inbox loop on the simulator upstream, as `npm start` runs it: recipients of an RCS campaign
 * write back (the simulator plays them, through inbox.ingest), conversations appear, a reply is
 * delivered through the simulator, and GET /campaigns/stats counts who wrote back within 24 h.
 */
import { QueryTypes } from "sequelize";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { inboundIn } from "../helpers/builders";
import { campaignIn, seedList, untilStatus } from "../helpers/campaigns";
import { eventually } from "../helpers/eventually";

let t: TestApp;
let a: Account;
beforeAll(async () => {
  t = await startTestApp({
    services: ["gateway", "auth", "contacts", "tracking", "campaigns", "simulator", "inbox"],
    config: { simulatorProfile: "all-delivered", simulatorMaxDelayMs: 200, campaignPollMs: 50, rateLimitRps: 10000 },
  });
  a = await t.newAccount(["CAMPAIGNS", "CONTACTS", "RCS", "WHATSAPP", "INBOX"]);
}, 60_000);
afterAll(() => t?.stop());

it("shows campaign recipients writing back as conversations, delivers a reply, and counts the recipients who responded", async () => {
  const { listId } = await seedList(a.api, 20);
  const c = (await a.api.post("/campaigns", campaignIn([listId], { channel: "RCS" }))).body;
  expect((await a.api.put(`/campaigns/${c.id}/confirm`)).status).toBe(202);
  await untilStatus(a, c.id, "SENT");

  // About half of the 20 write back (all-delivered profile): at least one conversation appears.
  const chats = await eventually(
    async () => {
      const res = await a.api.get(`/inbox/conversations?channel=RCS&limit=100`);
      expect(res.body.total).toBeGreaterThan(0);
      return res.body.data as Array<{ chatId: string; contactNumber: string; unreadCount: number; senderId: string }>;
    },
    { timeoutMs: 15_000 },
  );
  expect(chats[0]!.unreadCount).toBeGreaterThanOrEqual(1);

  // Every one of them wrote within 24 h of its campaign message: once the end users are done
  // (no new conversation for a while), responded counts each number once.
  let seen = -1;
  await eventually(
    async () => {
      const all = (await a.api.get(`/inbox/conversations?channel=RCS&limit=100`)).body.total as number;
      const settled = all === seen;
      seen = all;
      expect(settled).toBe(true);
    },
    { timeoutMs: 15_000, intervalMs: 1000 },
  );
  expect((await a.api.get(`/campaigns/stats?campaignId=${c.id}`)).body).toMatchObject({ total: 20, responded: seen });

  // A message from a number an hour before the campaign, or from a number it never reached, is no response.
  const before = (await a.api.get(`/campaigns/stats?campaignId=${c.id}`)).body.responded as number;
  const [silent] = await t.db.sequelize.query<{ destination: string }>(
    `SELECT m.destination FROM messages m WHERE m.campaign_id = $1
        AND NOT EXISTS (SELECT 1 FROM conversations v WHERE v.company_id = m.company_id AND v.contact_number = m.destination) LIMIT 1`,
    { bind: [c.id], type: QueryTypes.SELECT },
  );
  if (silent) {
    const early = inboundIn(a.companyId, {
      source: silent.destination,
      destination: "simulator-agent",
      receivedDate: new Date(Date.now() - 3600_000).toISOString(),
    });
    expect((await t.ingress.post("/inbound/rcs", early)).status).toBe(202);
  }
  expect((await t.ingress.post("/inbound/rcs", inboundIn(a.companyId, { destination: "simulator-agent" }))).status).toBe(202);
  expect((await a.api.get(`/campaigns/stats?campaignId=${c.id}`)).body.responded).toBe(before);
  if (silent) {
    // The same number writing now does count.
    expect((await t.ingress.post("/inbound/rcs", inboundIn(a.companyId, { source: silent.destination, destination: "simulator-agent" }))).status).toBe(202);
    expect((await a.api.get(`/campaigns/stats?campaignId=${c.id}`)).body.responded).toBe(before + 1);
  }

  // Simulated end users sometimes write STOP: their numbers opted out of RCS (contract section 7), and
  // a reply to them is a 409. A reply to another goes out through the simulator and comes back
  // DELIVERED in the thread.
  const settledChats = (await a.api.get(`/inbox/conversations?channel=RCS&limit=100`)).body.data as Array<{ chatId: string; lastMessagePreview: string }>;
  const stopped = settledChats.find((c) => c.lastMessagePreview === "STOP");
  if (stopped) expect((await a.api.post(`/inbox/conversations/${stopped.chatId}/messages`, { text: "Sorry to see you go" })).status).toBe(409);
  const chat = settledChats.find((c) => c.lastMessagePreview !== "STOP")!;
  const reply = await a.api.post(`/inbox/conversations/${chat.chatId}/messages`, { text: "Thanks for writing!" });
  expect(reply.status).toBe(202);
  await eventually(async () => {
    const thread = await a.api.get(`/inbox/conversations/${chat.chatId}/messages?limit=100`);
    expect(thread.body.data.find((m: { id: string }) => m.id === reply.body.id)).toMatchObject({ direction: "OUTBOUND", deliveryStatus: "DELIVERED" });
  });
  expect((await a.api.get(`/messages/status/${reply.body.id}?channel=RCS`)).body.deliveryStatus).toBe("DELIVERED");
}, 60_000);
