/**
 * Issue 30's small inbox fixes, through HTTP: a repeated inbound messageId from another number
 * changes nothing (no empty conversation), read marks only move forward (also when marks race), and
 * live-view event ids are counted per account (another account's activity does not show in them),
 * with Last-Event-ID resuming as before.
 */
import { QueryTypes } from "sequelize";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { inboundIn, phone } from "../helpers/builders";
import { itWithPostgres } from "../helpers/db";
import { SseClient } from "../helpers/sse";

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ services: ["gateway", "auth", "tracking", "inbox"], config: { rateLimitRps: 10000 } });
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

const inbound = async (body: unknown, channel: "rcs" | "whatsapp" = "whatsapp") => {
  const res = await t.ingress.post(`/inbound/${channel}`, body);
  expect([res.status, res.text]).toEqual([202, expect.any(String)]);
  return res;
};
const conversations = async (a: Account) => {
  const res = await a.api.get("/inbox/conversations?status=ALL&limit=100");
  expect(res.status).toBe(200);
  return res.body.data as Array<{ chatId: string; contactNumber: string; unreadCount: number }>;
};
const emptyConversations = async (companyId: string) =>
  (
    await t.db.sequelize.query<{ n: string }>(
      `SELECT count(*) AS n FROM conversations c WHERE c.company_id = $1 AND NOT EXISTS (SELECT 1 FROM conversation_messages m WHERE m.conversation_id = c.id)`,
      { bind: [companyId], type: QueryTypes.SELECT },
    )
  )[0]!.n;

describe("a repeated inbound messageId from another number", () => {
  it("is answered 202 and changes nothing: no conversation for the other number, the first one as it was", async () => {
    const a = await t.newAccount(["INBOX"]);
    const first = inboundIn(a.companyId, { text: "first" });
    await inbound(first);
    const [before] = await conversations(a);
    // The same messageId again, from another number (the upstream's retry with a changed field, say).
    await inbound({ ...first, source: phone(), text: "again" });
    // And within one call: one id from two new numbers; only the first is stored.
    const twice = inboundIn(a.companyId);
    const other = phone();
    await inbound([twice, { ...twice, source: other }]);
    const after = await conversations(a);
    expect(after.map((c) => c.contactNumber).sort()).toEqual([first.source, twice.source].sort());
    expect(after.find((c) => c.chatId === before!.chatId)).toMatchObject({ unreadCount: 1 });
    expect(await emptyConversations(a.companyId)).toBe("0");
    const thread = await a.api.get(`/inbox/conversations/${before!.chatId}/messages`);
    expect(thread.body.data.map((m: { text: string }) => m.text)).toEqual(["first"]);
  });

  it("still stores a new message of the other number in the same call", async () => {
    const a = await t.newAccount(["INBOX"]);
    const first = inboundIn(a.companyId);
    await inbound(first);
    const other = phone();
    await inbound([{ ...first, source: other }, inboundIn(a.companyId, { source: other, text: "new" })]);
    const chat = (await conversations(a)).find((c) => c.contactNumber === other)!;
    expect(chat).toMatchObject({ unreadCount: 1 });
    expect(await emptyConversations(a.companyId)).toBe("0");
  });
});

describe("read marks", () => {
  /** A conversation with `n` inbound messages a minute apart; answers its chatId and the messages' ids, oldest first. */
  async function thread(a: Account, n: number): Promise<{ chatId: string; ids: string[] }> {
    const source = phone();
    const start = Date.now() - 3600_000;
    const bodies = Array.from({ length: n }, (_, i) => inboundIn(a.companyId, { source, receivedDate: new Date(start + i * 60_000).toISOString() }));
    await inbound(bodies);
    const chat = (await conversations(a)).find((c) => c.contactNumber === source)!;
    return { chatId: chat.chatId, ids: bodies.map((b) => b.messageId) };
  }
  const mark = (a: Account, chatId: string, upToMessageId: string) => a.api.post(`/inbox/conversations/${chatId}/read`, { upToMessageId });

  it("only move forward: an older mark leaves unreadCount as it is", async () => {
    const a = await t.newAccount(["INBOX"]);
    const { chatId, ids } = await thread(a, 4);
    expect((await mark(a, chatId, ids[2]!)).body.unreadCount).toBe(1);
    const older = await mark(a, chatId, ids[0]!);
    expect([older.status, older.body.unreadCount]).toEqual([200, 1]);
    expect((await a.api.get(`/inbox/conversations/${chatId}`)).body.unreadCount).toBe(1);
    expect((await mark(a, chatId, ids[3]!)).body.unreadCount).toBe(0);
    // A new message counts; a mark before it (even the furthest one again) does not raise the count.
    await inbound(inboundIn(a.companyId, { source: (await a.api.get(`/inbox/conversations/${chatId}`)).body.contactNumber }));
    expect((await mark(a, chatId, ids[1]!)).body.unreadCount).toBe(1);
    expect((await mark(a, chatId, ids[3]!)).body.unreadCount).toBe(1);
  });

  itWithPostgres("end at the furthest mark whatever order concurrent marks commit in", async () => {
    const a = await t.newAccount(["INBOX"]);
    for (let round = 0; round < 3; round++) {
      const { chatId, ids } = await thread(a, 10);
      // The furthest mark first, the older ones racing it and each other.
      const answers = await Promise.all([mark(a, chatId, ids[9]!), ...ids.slice(0, 9).map((id) => mark(a, chatId, id))]);
      expect(answers.map((r) => r.status)).toEqual(Array(10).fill(200));
      expect((await a.api.get(`/inbox/conversations/${chatId}`)).body.unreadCount).toBe(0);
    }
  });
});

describe("live-view event ids", () => {
  it("are counted per account: another account's activity leaves no gap, and Last-Event-ID resumes", async () => {
    const a = await t.newAccount(["INBOX"]);
    const b = await t.newAccount(["INBOX"]);
    const live = await stream(a, "/inbox/events");
    const mine = inboundIn(a.companyId);
    await inbound(mine);
    const [e1] = await live.waitForEvents(1);
    // The account's first event is its id 1, whatever the other accounts of this database did before.
    expect(e1).toMatchObject({ id: "1", event: "message.created" });
    for (let i = 0; i < 5; i++) await inbound(inboundIn(b.companyId));
    await inbound(inboundIn(a.companyId, { source: mine.source }));
    const got = await live.waitForEvents(2);
    expect(got.map((e) => e.id)).toEqual(["1", "2"]);
    live.close();

    // Written while the client is away (with the other account busy meanwhile): resumed after its Last-Event-ID.
    await inbound(inboundIn(b.companyId));
    await inbound(inboundIn(a.companyId, { source: mine.source }));
    const chatId = got[0]!.json.chatId as string;
    expect((await a.api.post(`/inbox/conversations/${chatId}/read`, { upToMessageId: mine.messageId })).status).toBe(200);
    const again = await stream(a, "/inbox/events", { "last-event-id": "2" });
    const missed = await again.waitForEvents(2);
    expect(missed.map((e) => [e.id, e.event])).toEqual([
      ["3", "message.created"],
      ["4", "conversation.read"],
    ]);
    const one = await stream(a, `/inbox/conversations/${chatId}/events?lastEventId=3`);
    expect((await one.waitForEvents(1)).map((e) => e.id)).toEqual(["4"]);
    // The other account counts its own.
    const theirs = await stream(b, "/inbox/events", { "last-event-id": "4" });
    expect((await theirs.waitForEvents(2)).map((e) => e.id)).toEqual(["5", "6"]);
  });
});
