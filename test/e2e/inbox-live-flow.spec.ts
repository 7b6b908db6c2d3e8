/**
 * The live view fed by the real inbox: inbound messages posted to the internal ingress (tracking hands
 * them to inbox.ingest) reach the open streams as message.created, and a stream resumed with
 * Last-Event-ID gets the ones stored while it was away.
 */
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { inboundIn, phone } from "../helpers/builders";
import { eventually } from "../helpers/eventually";
import { SseClient } from "../helpers/sse";

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({
    services: ["gateway", "auth", "tracking", "inbox", "simulator"],
    config: { rateLimitRps: 10000, simulatorProfile: "all-delivered", simulatorMaxDelayMs: 50 },
  });
}, 60_000);
afterAll(() => t?.stop());

const open: SseClient[] = [];
afterEach(() => {
  for (const c of open.splice(0)) c.close();
});
const stream = async (a: Account, path: string, headers: Record<string, string> = {}) => {
  const c = await SseClient.open(`${t.api.baseUrl}${path}`, { "x-api-key": a.key.apiKey, ...headers });
  open.push(c);
  expect(c.status).toBe(200);
  return c;
};
const inbound = async (body: unknown) => expect((await t.ingress.post("/inbound/whatsapp", body)).status).toBe(202);

it("streams an inbound message stored by the inbox as message.created, to the account's stream and then its conversation's", async () => {
  const a = await t.newAccount(["INBOX", "WHATSAPP"]);
  const other = await t.newAccount(["INBOX", "WHATSAPP"]);
  const all = await stream(a, "/inbox/events");
  const theirs = await stream(other, "/inbox/events");
  const from = phone();
  await inbound(inboundIn(a.companyId, { source: from, text: "hello there" }));
  const [created] = await all.waitForEvents(1);
  expect(created).toMatchObject({ event: "message.created", json: { direction: "INBOUND", text: "hello there", chatId: expect.any(String) } });
  const chatId = created!.json.chatId as string;
  const one = await stream(a, `/inbox/conversations/${chatId}/events`);
  await inbound(inboundIn(a.companyId, { source: phone(), text: "another conversation" }));
  await inbound(inboundIn(a.companyId, { source: from, text: "again" }));
  expect((await all.waitForEvents(3)).map((e) => e.json.text)).toEqual(["hello there", "another conversation", "again"]);
  expect((await one.waitForEvents(1)).map((e) => e.json.text)).toEqual(["again"]);
  expect(theirs.events).toEqual([]);
});

it("gives a stream resumed with Last-Event-ID the inbound messages stored while it was away, in order", async () => {
  const a = await t.newAccount(["INBOX", "WHATSAPP"]);
  const from = phone();
  const first = await stream(a, "/inbox/events");
  await inbound(inboundIn(a.companyId, { source: from, text: "one" }));
  const [seen] = await first.waitForEvents(1);
  first.close();
  await inbound(inboundIn(a.companyId, { source: from, text: "two" }));
  await inbound([inboundIn(a.companyId, { source: from, text: "three" }), inboundIn(a.companyId, { source: from, text: "four" })]);
  const again = await stream(a, `/inbox/conversations/${seen!.json.chatId}/events`, { "last-event-id": seen!.id! });
  expect((await again.waitForEvents(3)).map((e) => e.json.text)).toEqual(["two", "three", "four"]);
});

it("streams read, archive, unarchive, a reply and the reply's status as the partner API and the upstream make them", async () => {
  const a = await t.newAccount(["INBOX", "WHATSAPP"]);
  const all = await stream(a, "/inbox/events");
  const asked = inboundIn(a.companyId, { source: phone(), text: "can you help?" });
  await inbound(asked);
  const [first] = await all.waitForEvents(1);
  const chatId = first!.json.chatId as string;
  const one = await stream(a, `/inbox/conversations/${chatId}/events`);
  expect((await a.api.post(`/inbox/conversations/${chatId}/read`, { upToMessageId: asked.messageId })).status).toBe(200);
  expect((await a.api.request("PATCH", `/inbox/conversations/${chatId}/archive`)).status).toBe(204);
  expect((await a.api.request("PATCH", `/conversations/${chatId}/unarchive`)).status).toBe(204);
  const reply = await a.api.post(`/inbox/conversations/${chatId}/messages`, { text: "sure!" });
  expect(reply.status).toBeLessThan(300);
  // The simulator plays the end user too: a message it writes back (INBOUND) may arrive between
  // the reply and its status, so the end user's messages are set aside here.
  const ours = (c: SseClient) => c.events.filter((e) => !(e.event === "message.created" && e.json.direction === "INBOUND"));
  await eventually(() => expect(ours(one).length).toBeGreaterThanOrEqual(5), { timeoutMs: 15_000, intervalMs: 20 });
  const mine = ours(one);
  expect(mine.slice(0, 5).map((e) => e.event)).toEqual([
    "conversation.read",
    "conversation.archived",
    "conversation.unarchived",
    "message.created",
    "message.status",
  ]);
  expect(mine[3]!.json).toMatchObject({ chatId, direction: "OUTBOUND", text: "sure!" });
  expect(mine[4]!.json).toMatchObject({ chatId, id: mine[3]!.json.id, deliveryStatus: "DELIVERED", statusCode: 3 });
  // The account's stream had the same events, with the same ids, after the inbound one.
  await eventually(() => expect(ours(all).length).toBeGreaterThanOrEqual(5), { timeoutMs: 15_000, intervalMs: 20 });
  expect(
    ours(all)
      .slice(0, 5)
      .map((e) => e.id),
  ).toEqual(mine.slice(0, 5).map((e) => e.id));
});
