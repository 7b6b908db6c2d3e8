/**
 * The inbox through HTTP (issue 18, contract section 4 "Conversation"): inbound messages posted to
 * the internal ingress become conversations partners list, read, mark read, archive and unarchive;
 * replies leave through the upstream adapter (here UPSTREAM_MODE=http against a local upstream the
 * test plays, which reports back through the ingress) and are tracked like any message.
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { QueryTypes } from "sequelize";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { inboundIn, phone, uniqueId } from "../helpers/builders";
import { itWithPostgres, WEBHOOK_EVENTS } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";
import { png, uploadMedia } from "../helpers/media";

let t: TestApp;
let a: Account;
let b: Account;
let server: Server;
/** What the upstream answers next (HTTP status). */
let upstreamStatus = 202;
const sent: Array<{ path: string; body: Record<string, unknown> }> = [];

const read = (req: IncomingMessage) =>
  new Promise<string>((resolve) => {
    let s = "";
    req.on("data", (c) => (s += c));
    req.on("end", () => resolve(s));
  });

beforeAll(async () => {
  server = createServer(async (req, res) => {
    const body = JSON.parse(await read(req));
    sent.push({ path: req.url ?? "", body });
    res.writeHead(upstreamStatus).end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  t = await startTestApp({
    services: ["gateway", "auth", "tracking", "inbox", "media"],
    listening: true,
    config: {
      upstreamMode: "http",
      upstreamSmsUrl: `${base}/sms`,
      upstreamRcsUrl: `${base}/rcs`,
      upstreamWhatsappUrl: `${base}/whatsapp`,
      upstreamTimeoutMs: 1000,
      upstreamConnectTimeoutMs: 1000,
      rateLimitRps: 10000,
    },
  });
  a = await t.newAccount(["INBOX", "MEDIA", "RCS", "WHATSAPP"]);
  b = await t.newAccount(["INBOX", "MEDIA", "RCS", "WHATSAPP"]);
}, 60_000);
afterAll(async () => {
  await t?.stop();
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r));
});

const patch = (acc: Account, path: string) => acc.api.request("PATCH", path);
const inbound = async (channel: "rcs" | "whatsapp", body: unknown) => {
  const res = await t.ingress.post(`/inbound/${channel}`, body);
  expect(res.status).toBe(202);
  return res;
};
const rows = <T extends object>(sql: string, bind: unknown[]) => t.db.sequelize.query<T>(sql, { bind, type: QueryTypes.SELECT });
const outboxOf = (companyId: string) =>
  rows<{ event_type: string; message_id: string; payload: Record<string, unknown> }>(
    `SELECT event_type, message_id, payload FROM ${WEBHOOK_EVENTS} WHERE company_id = $1 ORDER BY tx, id`,
    [companyId],
  );
const liveOf = (companyId: string) =>
  rows<{ type: string; conversation_id: string; data: Record<string, unknown> }>(
    `SELECT type, conversation_id, data FROM inbox_events WHERE company_id = $1 ORDER BY id`,
    [companyId],
  );
const chatOf = async (acc: Account, contactNumber: string) => {
  const res = await acc.api.get(`/inbox/conversations?status=ALL&search=${encodeURIComponent(contactNumber)}`);
  expect(res.status).toBe(200);
  expect(res.body.data).toHaveLength(1);
  return res.body.data[0];
};
/** A fresh conversation of `acc` on `channel`, opened by one inbound message received `at`. */
const open = async (acc: Account, channel: "rcs" | "whatsapp" = "whatsapp", over: Record<string, unknown> = {}) => {
  const body = inboundIn(acc.companyId, over);
  await inbound(channel, body);
  return { body, chat: await chatOf(acc, body.source) };
};

describe("inbound", () => {
  it("creates the conversation, stores the message with its mediaKey, counts it unread and writes one INBOUND event and one message.created", async () => {
    const body = inboundIn(a.companyId, { messageType: "IMAGE", text: "look", mediaKey: "upstream/abc.jpg", receivedDate: new Date().toISOString() });
    await inbound("whatsapp", body);
    await inbound("whatsapp", body); // a repeat is harmless
    const chat = await chatOf(a, body.source);
    expect(chat).toMatchObject({
      channel: "WHATSAPP",
      contactNumber: body.source,
      senderId: body.destination,
      status: "ACTIVE",
      unreadCount: 1,
      lastMessagePreview: "look",
      canReply: true,
    });
    expect(Date.parse(chat.serviceWindowExpiresAt) - Date.parse(body.receivedDate)).toBe(24 * 3600_000);
    const thread = await a.api.get(`/inbox/conversations/${chat.chatId}/messages`);
    expect(thread.status).toBe(200);
    expect(thread.body).toMatchObject({ total: 1, page: 0, limit: 10, totalPages: 1 });
    expect(thread.body.data[0]).toEqual({
      id: body.messageId,
      direction: "INBOUND",
      messageType: "IMAGE",
      text: "look",
      mediaKey: "upstream/abc.jpg",
      deliveryStatus: null,
      createdAt: new Date(body.receivedDate).toISOString(),
    });
    const outbox = (await outboxOf(a.companyId)).filter((e) => e.message_id === body.messageId);
    expect(outbox).toHaveLength(1);
    expect(outbox[0]!.payload).toMatchObject({ eventType: "INBOUND", channel: "WHATSAPP", source: body.source, mediaKey: "upstream/abc.jpg" });
    const live = (await liveOf(a.companyId)).filter((e) => e.conversation_id === chat.chatId);
    expect(live.map((e) => e.type)).toEqual(["message.created"]);
    expect(live[0]!.data).toMatchObject({ chatId: chat.chatId, id: body.messageId, direction: "INBOUND" });
  });

  it("stores an array in one go, one conversation per number, and a later message from the same number joins its conversation", async () => {
    const n1 = phone();
    const n2 = phone();
    await inbound("rcs", [
      inboundIn(a.companyId, { source: n1, destination: "agent-1", text: "one" }),
      inboundIn(a.companyId, { source: n1, destination: "agent-1", text: "two" }),
      inboundIn(a.companyId, { source: n2, destination: "agent-1", text: "three" }),
    ]);
    const c1 = await chatOf(a, n1);
    expect(c1).toMatchObject({ channel: "RCS", unreadCount: 2, canReply: true, serviceWindowExpiresAt: null });
    expect((await chatOf(a, n2)).unreadCount).toBe(1);
    await inbound("rcs", inboundIn(a.companyId, { source: n1, destination: "agent-1", text: "four" }));
    expect(await chatOf(a, n1)).toMatchObject({ chatId: c1.chatId, unreadCount: 3, lastMessagePreview: "four" });
  });

  it("keeps one conversation when many first messages of a number arrive at once", async () => {
    const source = phone();
    const bodies = Array.from({ length: 12 }, (_, i) => inboundIn(a.companyId, { source, text: `m${i}` }));
    const answers = await Promise.all(bodies.map((body) => t.ingress.post("/inbound/whatsapp", body)));
    expect(answers.map((r) => r.status)).toEqual(bodies.map(() => 202));
    const chat = await chatOf(a, source);
    expect(chat.unreadCount).toBe(12);
    expect((await a.api.get(`/inbox/conversations/${chat.chatId}/messages?limit=100`)).body.total).toBe(12);
    expect((await outboxOf(a.companyId)).filter((e) => e.payload.source === source)).toHaveLength(12);
  });

  it("refuses a whole array with one bad item (400, nothing stored)", async () => {
    const good = inboundIn(a.companyId);
    const res = await t.ingress.post("/inbound/whatsapp", [good, inboundIn(a.companyId, { source: "12345" })]);
    expectProblem(res, 400);
    expect(res.body.errors.map((e: { path: string }) => e.path)).toContain("[1].source");
    expect(await rows(`SELECT 1 FROM conversation_messages WHERE message_id = $1`, [good.messageId])).toEqual([]);
  });

  it.each([
    ["an unknown channel", "/inbound/sms", {}],
    ["a missing companyId", "/inbound/rcs", { companyId: undefined }],
    ["a malformed number", "/inbound/rcs", { source: "+12" }],
    ["a number shaped like E.164 that is no number", "/inbound/rcs", { source: "+35100000000" }],
    ["a malformed date", "/inbound/rcs", { receivedDate: "yesterday" }],
    ["a date PostgreSQL cannot store", "/inbound/rcs", { receivedDate: "0000-01-01T00:00:00Z" }],
    ["a null text", "/inbound/rcs", { text: null }],
    ["a numeric messageId", "/inbound/rcs", { messageId: 42 }],
  ])("refuses %s (4xx problem, nothing stored)", async (_name, path, over) => {
    const body = inboundIn(a.companyId, over);
    const res = await t.ingress.post(path, body);
    expectProblem(res, 400);
    expect(await rows(`SELECT 1 FROM conversations WHERE company_id = $1 AND contact_number = $2`, [a.companyId, body.source])).toEqual([]);
  });

  it("refuses through inbox.ingest itself (the simulator's way in) a number that is no number or an impossible date, storing nothing", async () => {
    const good = inboundIn(a.companyId);
    for (const bad of [{ source: "+35100000000" }, { receivedDate: "0000-01-01T00:00:00Z" }, { text: null }]) {
      // A validation error (ajv's 422 or our 400; the ingress answers both as a 400 problem).
      const err = (await t.app.broker.call("inbox.ingest", { channel: "RCS", items: [good, inboundIn(a.companyId, bad)] }).catch((e: unknown) => e)) as {
        code?: number;
      };
      expect([400, 422]).toContain(err.code);
    }
    expect(await rows(`SELECT 1 FROM conversation_messages WHERE message_id = $1`, [good.messageId])).toEqual([]);
    await expect(t.app.broker.call("inbox.ingest", { channel: "SMS", items: [good] })).rejects.toMatchObject({ code: expect.any(Number) });
  });

  it("reopens an archived conversation when the end user writes again", async () => {
    const { body, chat } = await open(a);
    expect((await patch(a, `/inbox/conversations/${chat.chatId}/archive`)).status).toBe(204);
    expect((await a.api.get(`/inbox/conversations?search=${encodeURIComponent(body.source)}`)).body.data).toEqual([]);
    await inbound("whatsapp", inboundIn(a.companyId, { source: body.source, destination: body.destination }));
    expect(await chatOf(a, body.source)).toMatchObject({ chatId: chat.chatId, status: "ACTIVE", unreadCount: 2 });
    const types = (await liveOf(a.companyId)).filter((e) => e.conversation_id === chat.chatId).map((e) => e.type);
    expect(types).toEqual(["message.created", "conversation.archived", "conversation.unarchived", "message.created"]);
  });
});

describe("conversations", () => {
  it("lists ACTIVE ones newest activity first, ARCHIVED or ALL on request, by channel and by number", async () => {
    const acc = await t.newAccount(["INBOX"]);
    const old = await open(acc, "whatsapp", { receivedDate: new Date(Date.now() - 3600_000).toISOString() });
    const mid = await open(acc, "rcs", { receivedDate: new Date(Date.now() - 60_000).toISOString() });
    const recent = await open(acc, "whatsapp");
    expect((await patch(acc, `/inbox/conversations/${mid.chat.chatId}/archive`)).status).toBe(204);
    const ids = async (q: string) => (await acc.api.get(`/inbox/conversations${q}`)).body.data.map((c: { chatId: string }) => c.chatId);
    expect(await ids("")).toEqual([recent.chat.chatId, old.chat.chatId]);
    expect(await ids("?status=ARCHIVED")).toEqual([mid.chat.chatId]);
    expect(await ids("?status=ALL")).toEqual([recent.chat.chatId, mid.chat.chatId, old.chat.chatId]);
    expect(await ids("?status=ALL&channel=RCS")).toEqual([mid.chat.chatId]);
    expect(await ids(`?search=${old.body.source.slice(4)}`)).toEqual([old.chat.chatId]);
    const page = await acc.api.get(`/inbox/conversations?status=ALL&limit=2&page=1`);
    expect(page.body).toMatchObject({ page: 1, limit: 2, total: 3, totalPages: 2 });
    expect((await patch(acc, `/conversations/${mid.chat.chatId}/unarchive`)).status).toBe(204);
    expect(await ids("")).toEqual([recent.chat.chatId, mid.chat.chatId, old.chat.chatId]);
    expect((await patch(acc, `/inbox/conversations/${mid.chat.chatId}/archive`)).status).toBe(204);
    expect((await patch(acc, `/inbox/conversations/${mid.chat.chatId}/unarchive`)).status).toBe(204);
    expect((await acc.api.get(`/inbox/conversations/${mid.chat.chatId}`)).body.status).toBe("ACTIVE");
    // Archiving deletes no message.
    expect((await acc.api.get(`/inbox/conversations/${mid.chat.chatId}/messages`)).body.total).toBe(1);
  });

  it("marks read up to a message: unreadCount counts the inbound messages after it", async () => {
    const { body, chat } = await open(a, "rcs", { receivedDate: new Date(Date.now() - 3000).toISOString() });
    const second = inboundIn(a.companyId, { source: body.source, destination: body.destination, receivedDate: new Date(Date.now() - 2000).toISOString() });
    const third = inboundIn(a.companyId, { source: body.source, destination: body.destination, receivedDate: new Date(Date.now() - 1000).toISOString() });
    await inbound("rcs", [second, third]);
    const res = await a.api.post(`/inbox/conversations/${chat.chatId}/read`, { upToMessageId: second.messageId });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ chatId: chat.chatId, unreadCount: 1 });
    expect((await a.api.post(`/inbox/conversations/${chat.chatId}/read`, { upToMessageId: third.messageId })).body.unreadCount).toBe(0);
    expect((await a.api.get(`/inbox/conversations/${chat.chatId}`)).body.unreadCount).toBe(0);
    const live = (await liveOf(a.companyId)).filter((e) => e.conversation_id === chat.chatId && e.type === "conversation.read");
    expect(live.map((e) => e.data.unreadCount)).toEqual([1, 0]);
    const unknown = await a.api.post(`/inbox/conversations/${chat.chatId}/read`, { upToMessageId: "no-such-message" });
    expectProblem(unknown, 400);
    expectProblem(await a.api.post(`/inbox/conversations/${chat.chatId}/read`, { upToMessageId: null }), 400);
    expectProblem(await a.api.post(`/inbox/conversations/${chat.chatId}/read`, { upToMessageId: 7 }), 400);
    expectProblem(await a.api.post(`/inbox/conversations/${chat.chatId}/read`, {}), 400);
  });

  it("dates a message from the future (the upstream's clock ahead) when it arrives: its WhatsApp window is 24 hours from now, not from then", async () => {
    const before = Date.now();
    const { chat } = await open(a, "whatsapp", { receivedDate: "2999-01-01T00:00:00Z" });
    const after = Date.now();
    expect(Date.parse(chat.lastMessageAt)).toBeGreaterThanOrEqual(before - 1000);
    expect(Date.parse(chat.lastMessageAt)).toBeLessThanOrEqual(after);
    expect(Date.parse(chat.serviceWindowExpiresAt)).toBeLessThanOrEqual(after + 24 * 3600_000);
    const thread = await a.api.get(`/inbox/conversations/${chat.chatId}/messages`);
    expect(Date.parse(thread.body.data[0].createdAt)).toBeLessThanOrEqual(after);
  });

  it("announces one conversation.windowClosed per WhatsApp window: a late message dated inside a closed window opens none", async () => {
    const hoursAgo = (h: number) => new Date(Date.now() - h * 3600_000).toISOString();
    const inbox = t.app.broker.getLocalService("inbox") as unknown as { closeWindows(): Promise<number> };
    const { body, chat } = await open(a, "whatsapp", { receivedDate: hoursAgo(23.99) });
    await t.db.sequelize.query(`UPDATE conversations SET last_inbound_at = last_inbound_at - interval '16 hours' WHERE id = $1`, { bind: [chat.chatId] });
    await inbox.closeWindows();
    const closedEvents = async () => (await liveOf(a.companyId)).filter((e) => e.conversation_id === chat.chatId && e.type === "conversation.windowClosed");
    expect(await closedEvents()).toHaveLength(1);
    // Late: dated 30 hours ago, after the last inbound message (40 hours ago) but its window long gone.
    await inbound("whatsapp", inboundIn(a.companyId, { source: body.source, destination: body.destination, receivedDate: hoursAgo(30) }));
    expect((await a.api.get(`/inbox/conversations/${chat.chatId}`)).body.canReply).toBe(false);
    await inbox.closeWindows();
    expect(await closedEvents()).toHaveLength(1);
    // A message now opens a window; once it has closed, a second event.
    await inbound("whatsapp", inboundIn(a.companyId, { source: body.source, destination: body.destination, receivedDate: new Date().toISOString() }));
    expect((await a.api.get(`/inbox/conversations/${chat.chatId}`)).body.canReply).toBe(true);
    await t.db.sequelize.query(`UPDATE conversations SET last_inbound_at = now() - interval '24 hours 1 minute' WHERE id = $1`, { bind: [chat.chatId] });
    await inbox.closeWindows();
    expect(await closedEvents()).toHaveLength(2);
  });

  // Needs PostgreSQL: on embedded PGlite every connection shares one backend session, so the open
  // transaction below would hold the only session the mark-read and the lock query need.
  itWithPostgres("keeps the unread count of a message stored while a mark-read waits for it (the count is taken after the message's commit)", async () => {
    const { body, chat } = await open(a, "rcs", { receivedDate: new Date(Date.now() - 3000).toISOString() });
    // An inbound message being stored as inbox.ingest stores it: the conversation locked, the message
    // inserted and unread raised, not yet committed while the partner marks read up to the first one.
    const tx = await t.db.sequelize.transaction();
    let marked: Promise<{ status: number; body: { unreadCount: number } }> | null = null;
    try {
      await t.db.sequelize.query(`SELECT 1 FROM conversations WHERE id = $1 FOR UPDATE`, { bind: [chat.chatId], transaction: tx });
      await t.db.sequelize.query(
        `INSERT INTO conversation_messages (id, company_id, conversation_id, channel, direction, message_id, message_type, text, created_at)
         VALUES (gen_random_uuid(), $1, $2, 'RCS', 'INBOUND', $3, 'TEXT', 'late', now())`,
        { bind: [a.companyId, chat.chatId, uniqueId("race")], transaction: tx },
      );
      await t.db.sequelize.query(`UPDATE conversations SET unread_count = unread_count + 1 WHERE id = $1`, { bind: [chat.chatId], transaction: tx });
      marked = a.api.post(`/inbox/conversations/${chat.chatId}/read`, { upToMessageId: body.messageId });
      // The mark-read is waiting for the conversation's row.
      await eventually(async () => {
        const [w] = await rows<{ n: string }>(`SELECT count(*) AS n FROM pg_locks WHERE NOT granted AND locktype IN ('tuple', 'transactionid')`, []);
        expect(Number(w!.n)).toBeGreaterThan(0);
      });
    } finally {
      await tx.commit();
    }
    const res = await marked!;
    expect(res.status).toBe(200);
    expect(res.body.unreadCount).toBe(1);
    expect((await a.api.get(`/inbox/conversations/${chat.chatId}`)).body.unreadCount).toBe(1);
  });

  it("answers 404 for another account's chat and an unknown one on every route, and 401 without a valid key", async () => {
    const { chat } = await open(a);
    const unknown = "00000000-0000-4000-8000-000000000000";
    for (const id of [chat.chatId, unknown]) {
      expectProblem(await b.api.get(`/inbox/conversations/${id}`), 404);
      expectProblem(await b.api.get(`/inbox/conversations/${id}/messages`), 404);
      expectProblem(await b.api.post(`/inbox/conversations/${id}/read`, { upToMessageId: "x" }), 404);
      expectProblem(await patch(b, `/inbox/conversations/${id}/archive`), 404);
      expectProblem(await patch(b, `/inbox/conversations/${id}/unarchive`), 404);
      expectProblem(await patch(b, `/conversations/${id}/unarchive`), 404);
      expectProblem(await b.api.post(`/inbox/conversations/${id}/messages`, { text: "hi" }), 404);
    }
    expect((await a.api.get(`/inbox/conversations/${chat.chatId}`)).body.status).toBe("ACTIVE"); // b changed nothing
    expectProblem(await t.api.get(`/inbox/conversations`), 401);
    expectProblem(await t.api.with({ "x-api-key": "pgw_wrong" }).request("PATCH", `/inbox/conversations/${chat.chatId}/archive`), 401);
    const noInbox = await t.newAccount(["RCS"]);
    expectProblem(await noInbox.api.get(`/inbox/conversations/${chat.chatId}`), 401);
    expectProblem(await a.api.get(`/inbox/conversations/not-a-uuid`), 400);
    expectProblem(await a.api.get(`/inbox/conversations?status=OPEN`), 400);
    expectProblem(await a.api.get(`/inbox/conversations?limit=1001`), 400);
  });
});

describe("replies", () => {
  it("sends a text reply through the upstream, answers 202 with it, and tracks it in the thread, polling, history and events", async () => {
    const { body, chat } = await open(a);
    const res = await a.api.post(`/inbox/conversations/${chat.chatId}/messages`, { text: "Hello back" });
    expect(res.status).toBe(202);
    expect(res.body).toMatchObject({ direction: "OUTBOUND", messageType: "TEXT", text: "Hello back", mediaKey: null, deliveryStatus: "UNKNOWN" });
    const id = res.body.id as string;
    expect(id).toMatch(/^inbox-/);
    const up = sent.find((s) => s.body.customerMessageId === id)!;
    expect(up).toMatchObject({
      path: "/whatsapp",
      body: { companyId: a.companyId, channel: "WHATSAPP", destination: body.source, senderId: body.destination, text: "Hello back" },
    });
    expect(await chatOf(a, body.source)).toMatchObject({ lastMessagePreview: "Hello back" });
    // The upstream reports what it sent and what happened, as upstreams do.
    expect((await t.ingress.post("/messages", { companyId: a.companyId, channel: "WHATSAPP", customerMessageId: id, destination: body.source })).status).toBe(
      202,
    );
    expect(
      (
        await t.ingress.post("/receipts/whatsapp", {
          companyId: a.companyId,
          messageId: id,
          destination: body.source,
          statusCode: 3,
          eventDate: new Date().toISOString(),
        })
      ).status,
    ).toBe(202);
    expect(
      (await t.ingress.post("/reads/whatsapp", { companyId: a.companyId, messageId: id, destination: body.source, eventDate: new Date().toISOString() }))
        .status,
    ).toBe(202);
    const thread = await a.api.get(`/inbox/conversations/${chat.chatId}/messages`);
    expect(thread.body.data.map((m: { id: string; deliveryStatus: string | null }) => [m.id, m.deliveryStatus])).toEqual([
      [body.messageId, null],
      [id, "DELIVERED"],
    ]);
    expect((await a.api.get(`/messages/status?channel=WHATSAPP&ids=${id}`)).body.data[0]).toMatchObject({ customerMessageId: id, deliveryStatus: "DELIVERED" });
    expect((await a.api.get(`/messages/history?channel=WHATSAPP`)).body.data.map((m: { customerMessageId: string }) => m.customerMessageId)).toContain(id);
    expect((await outboxOf(a.companyId)).filter((e) => e.message_id === id).map((e) => e.event_type)).toEqual(["DELIVERY", "READ"]);
    const live = (await liveOf(a.companyId)).filter((e) => e.conversation_id === chat.chatId && e.type === "message.created");
    expect(live.map((e) => e.data.id)).toEqual([body.messageId, id]);
  });

  it("sends a media reply with the media's key", async () => {
    const { chat } = await open(a, "rcs");
    const media = await uploadMedia(a, png(), "p.png");
    expect(media.status).toBe(201);
    const res = await a.api.post(`/inbox/conversations/${chat.chatId}/messages`, { mediaId: media.body.id });
    expect(res.status).toBe(202);
    expect(res.body).toMatchObject({ messageType: "MEDIA", text: null, mediaKey: media.body.mediaKey, deliveryStatus: "UNKNOWN" });
    expect(sent.find((s) => s.body.customerMessageId === res.body.id)).toMatchObject({ path: "/rcs", body: { mediaIds: [media.body.id] } });
  });

  it("holds a reply's media until the reply's status is final (DELETE /media answers 409 meanwhile); a refused reply holds nothing", async () => {
    const { body, chat } = await open(a, "rcs");
    const media = await uploadMedia(a, png(), "held.png");
    const res = await a.api.post(`/inbox/conversations/${chat.chatId}/messages`, { mediaId: media.body.id });
    expect(res.status).toBe(202);
    const id = res.body.id as string;
    const inbox = t.app.broker.getLocalService("inbox") as unknown as { releaseReplyMedia(): Promise<number> };
    await inbox.releaseReplyMedia();
    expectProblem(await a.api.delete(`/media/${media.body.id}`), 409); // not final yet: the upstream may still fetch it
    expect((await t.ingress.post("/messages", { companyId: a.companyId, channel: "RCS", customerMessageId: id, destination: body.source })).status).toBe(202);
    const receipt = { companyId: a.companyId, messageId: id, destination: body.source, statusCode: 3, eventDate: new Date().toISOString() };
    expect((await t.ingress.post("/receipts/rcs", receipt)).status).toBe(202);
    await eventually(async () => {
      const thread = await a.api.get(`/inbox/conversations/${chat.chatId}/messages`);
      expect(thread.body.data.find((m: { id: string }) => m.id === id)?.deliveryStatus).toBe("DELIVERED");
    });
    expect(await inbox.releaseReplyMedia()).toBeGreaterThanOrEqual(1);
    expect((await a.api.delete(`/media/${media.body.id}`)).status).toBe(204);

    const other = await uploadMedia(a, png(), "refused.png");
    upstreamStatus = 503;
    try {
      expectProblem(await a.api.post(`/inbox/conversations/${chat.chatId}/messages`, { mediaId: other.body.id }), 502);
    } finally {
      upstreamStatus = 202;
    }
    expect((await a.api.delete(`/media/${other.body.id}`)).status).toBe(204);
  });

  it("ends a WhatsApp reply outside the 24-hour window CONVERSATION_CLOSED (12) without sending it, with its DELIVERY event", async () => {
    const { chat } = await open(a, "whatsapp", { receivedDate: new Date(Date.now() - 25 * 3600_000).toISOString() });
    expect(chat).toMatchObject({ canReply: false });
    const before = sent.length;
    const res = await a.api.post(`/inbox/conversations/${chat.chatId}/messages`, { text: "Too late?" });
    expect(res.status).toBe(202);
    expect(res.body.deliveryStatus).toBe("CONVERSATION_CLOSED");
    expect(sent.length).toBe(before);
    const id = res.body.id as string;
    expect((await a.api.get(`/messages/status/${id}?channel=WHATSAPP`)).body).toMatchObject({ deliveryStatus: "CONVERSATION_CLOSED", statusCode: 12 });
    const thread = await a.api.get(`/inbox/conversations/${chat.chatId}/messages`);
    expect(thread.body.data[1]).toMatchObject({ id, deliveryStatus: "CONVERSATION_CLOSED" });
    const events = (await outboxOf(a.companyId)).filter((e) => e.message_id === id);
    expect(events.map((e) => [e.event_type, e.payload.statusCode])).toEqual([["DELIVERY", 12]]);
  });

  it("answers 502 when the upstream refuses the reply, and stores nothing", async () => {
    const { chat } = await open(a);
    upstreamStatus = 503;
    try {
      expectProblem(await a.api.post(`/inbox/conversations/${chat.chatId}/messages`, { text: "fails" }), 502);
    } finally {
      upstreamStatus = 202;
    }
    expect((await a.api.get(`/inbox/conversations/${chat.chatId}/messages`)).body.total).toBe(1);
  });

  it.each([
    ["neither text nor media", {}],
    ["both text and media", { text: "x", mediaId: "00000000-0000-4000-8000-000000000000" }],
    ["an unknown mediaId", { mediaId: "00000000-0000-4000-8000-000000000000" }],
    ["a malformed mediaId", { mediaId: "nope" }],
    ["an empty text", { text: "" }],
    ["a null text", { text: null }],
    ["a numeric text", { text: 5 }],
    ["an unknown field", { text: "x", colour: "red" }],
    ["a text over WhatsApp's 4096 characters", { text: "😀".repeat(4097) }],
  ])("refuses %s with 400 and sends nothing", async (_name, body) => {
    const { chat } = await open(a);
    const before = sent.length;
    expectProblem(await a.api.post(`/inbox/conversations/${chat.chatId}/messages`, body), 400);
    expect(sent.length).toBe(before);
    expect((await a.api.get(`/inbox/conversations/${chat.chatId}/messages`)).body.total).toBe(1);
  });

  it("counts RCS text in code points: 3072 emoji pass, 3073 are a 400", async () => {
    const { chat } = await open(a, "rcs");
    expect((await a.api.post(`/inbox/conversations/${chat.chatId}/messages`, { text: "😀".repeat(3072) })).status).toBe(202);
    expectProblem(await a.api.post(`/inbox/conversations/${chat.chatId}/messages`, { text: "😀".repeat(3073) }), 400);
  });

  it("refuses another account's media (400)", async () => {
    const { chat } = await open(a);
    const media = await uploadMedia(b, png(), "p.png");
    expectProblem(await a.api.post(`/inbox/conversations/${chat.chatId}/messages`, { mediaId: media.body.id }), 400);
  });
});

it("exposes inbox_inbound_total and inbox_replies_total", async () => {
  await eventually(async () => {
    const text = (await t.root.get("/metrics")).text;
    expect(text).toMatch(/inbox_inbound_total\{channel="WHATSAPP"\} \d+/);
    expect(text).toMatch(/inbox_replies_total\{channel="WHATSAPP",outcome="closed"\} 1/);
    expect(text).toMatch(/inbox_replies_total\{channel="WHATSAPP",outcome="failed"\} 1/);
  });
});

void uniqueId;
