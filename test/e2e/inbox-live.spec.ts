/**
 * The inbox's live view (issue 18 item 5) through the real gateway: Server-Sent Events on
 * GET /inbox/events and GET /inbox/conversations/{chatId}/events, fed from `inbox_events` rows.
 * Events are written as the inbox's writers write them (appendInboxEvents in a transaction, then the
 * broadcast), and by tracking for reply statuses.
 */
import { randomUUID } from "node:crypto";
import { QueryTypes } from "sequelize";
import { appendInboxEvents, announceInboxEvents, type InboxEvent } from "../../services/inbox/inbox.events";
import type { InboxEventType } from "../../services/inbox/inbox.contract";
import { loggerOptions } from "../../lib/observability/logger";
import { startTestApp, testConfig, type Account, type TestApp } from "../helpers/app";
import { capturedLogs } from "../helpers/logs";
import { receiptIn, readIn } from "../helpers/builders";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";
import { SseClient } from "../helpers/sse";
import { describeOncePerRun } from "../helpers/db";

let t: TestApp;
const HEARTBEAT_MS = 100;

beforeAll(async () => {
  t = await startTestApp({
    services: ["gateway", "auth", "inbox", "tracking"],
    config: { sseHeartbeatMs: HEARTBEAT_MS, sseMaxStreamsPerAccount: 4, sseMaxStreams: 12 },
  });
});
afterAll(() => t?.stop());

const url = (path: string) => `${t.api.baseUrl}${path}`;
const keyOf = (a: Account) => ({ "x-api-key": a.key.apiKey });
const open: SseClient[] = [];
afterEach(() => {
  for (const c of open.splice(0)) c.close();
});
async function stream(a: Account | null, path: string, headers: Record<string, string> = {}, o: { paused?: boolean } = {}): Promise<SseClient> {
  const c = await SseClient.open(url(path), { ...(a ? keyOf(a) : {}), ...headers }, o);
  open.push(c);
  return c;
}

/** A conversation row of the account (as the inbox's ingestion makes it). */
async function conversation(a: Account, o: { channel?: "RCS" | "WHATSAPP"; lastInboundAt?: Date | null } = {}): Promise<string> {
  const id = randomUUID();
  await t.db.sequelize.query(
    `INSERT INTO conversations (id, company_id, channel, sender_id, contact_number, last_message_at, last_inbound_at)
     VALUES ($1, $2, $3, '+351210000000', $4, now(), $5)`,
    {
      bind: [id, a.companyId, o.channel ?? "WHATSAPP", `+3519${Math.floor(Math.random() * 1e8)}`, o.lastInboundAt === undefined ? new Date() : o.lastInboundAt],
    },
  );
  return id;
}

/** Writes events as the inbox's writers do: in a transaction, then the broadcast after the commit. */
async function write(a: Account, chatId: string, ...types: InboxEventType[]): Promise<void> {
  const events: InboxEvent[] = types.map((type, i) => ({ companyId: a.companyId, conversationId: chatId, type, data: { n: i, type } }));
  await t.db.sequelize.transaction((tx) => appendInboxEvents(t.db.sequelize, tx, events));
  announceInboxEvents(t.app.broker, events);
}

describe("opening a stream", () => {
  it("refuses before streaming: 401 without a key or without INBOX, 404 for a missing or foreign chatId, 400 for a bad Last-Event-ID", async () => {
    const a = await t.newAccount(["INBOX"]);
    const b = await t.newAccount(["INBOX"]);
    const sms = await t.newAccount(["SMS"]);
    const chat = await conversation(a);
    const cases: Array<[Account | null, string, number, Record<string, string>?]> = [
      [null, "/inbox/events", 401],
      [sms, "/inbox/events", 401],
      [null, `/inbox/conversations/${chat}/events`, 401],
      [b, `/inbox/conversations/${chat}/events`, 404],
      [a, `/inbox/conversations/${randomUUID()}/events`, 404],
      [a, `/inbox/conversations/not-a-uuid/events`, 404],
      [a, "/inbox/events", 400, { "last-event-id": "twelve" }],
      [a, "/inbox/events?lastEventId=-1", 400],
    ];
    for (const [who, path, status, headers] of cases) {
      const res = await t.api.get(path, { headers: { ...(who ? keyOf(who) : {}), ...headers } });
      expectProblem(res, status);
    }
  });

  it("answers text/event-stream with no-cache and X-Accel-Buffering: no, and starts now (earlier events are not replayed)", async () => {
    const a = await t.newAccount(["INBOX"]);
    const chat = await conversation(a);
    await write(a, chat, "message.created");
    const c = await stream(a, "/inbox/events");
    expect(c.status).toBe(200);
    expect(c.headers["content-type"]).toBe("text/event-stream; charset=utf-8");
    expect(c.headers["cache-control"]).toBe("no-cache");
    expect(c.headers["x-accel-buffering"]).toBe("no");
    expect(c.headers["x-request-id"]).toEqual(expect.any(String));
    await write(a, chat, "conversation.archived");
    const [e] = await c.waitForEvents(1);
    expect(e).toMatchObject({ event: "conversation.archived", json: { chatId: chat, type: "conversation.archived" } });
    await new Promise((r) => setTimeout(r, 300));
    expect(c.events).toHaveLength(1);
  });
});

describe("events", () => {
  it("streams message.created, archived and unarchived in order, each with its id, to the account's stream and to the conversation's", async () => {
    const a = await t.newAccount(["INBOX"]);
    const chat = await conversation(a);
    const other = await conversation(a);
    const all = await stream(a, "/inbox/events");
    const one = await stream(a, `/inbox/conversations/${chat}/events`);
    await write(a, chat, "message.created");
    await write(a, other, "message.created");
    await write(a, chat, "conversation.archived", "conversation.unarchived");
    const got = await all.waitForEvents(4);
    expect(got.map((e) => [e.event, e.json.chatId])).toEqual([
      ["message.created", chat],
      ["message.created", other],
      ["conversation.archived", chat],
      ["conversation.unarchived", chat],
    ]);
    const ids = got.map((e) => Number(e.id));
    expect([...ids].sort((x, y) => x - y)).toEqual(ids);
    expect(new Set(ids).size).toBe(4);
    const mine = await one.waitForEvents(3);
    expect(mine.map((e) => e.event)).toEqual(["message.created", "conversation.archived", "conversation.unarchived"]);
    expect(mine.map((e) => e.id)).toEqual([got[0]!.id, got[2]!.id, got[3]!.id]);
  });

  it("delivers to a conversation's stream opened with its chatId in upper case", async () => {
    const a = await t.newAccount(["INBOX"]);
    const chat = await conversation(a);
    const one = await stream(a, `/inbox/conversations/${chat.toUpperCase()}/events`);
    expect(one.status).toBe(200);
    await write(a, chat, "message.created", "conversation.archived");
    const got = await one.waitForEvents(2);
    expect(got.map((e) => [e.event, e.json.chatId])).toEqual([
      ["message.created", chat],
      ["conversation.archived", chat],
    ]);
  });

  it("ends the streams of a key when the key is deleted; the key cannot open another", async () => {
    const a = await t.newAccount(["INBOX", "AUTHENTICATION"]);
    const admin = await t.newAccount(["AUTHENTICATION"], { companyId: a.companyId });
    const chat = await conversation(a);
    const doomed = await stream(a, "/inbox/events");
    const alsoDoomed = await stream(a, `/inbox/conversations/${chat}/events`);
    const b = await t.newAccount(["INBOX"], { companyId: a.companyId });
    const kept = await stream(b, "/inbox/events");
    expect([doomed.status, alsoDoomed.status, kept.status]).toEqual([200, 200, 200]);
    expect((await admin.api.delete(`/authentication/${a.key.id}`)).status).toBe(204);
    await eventually(() => expect([doomed.ended, alsoDoomed.ended]).toEqual([true, true]));
    expect(kept.ended).toBe(false);
    await write(a, chat, "message.created");
    expect((await kept.waitForEvents(1)).map((e) => e.event)).toEqual(["message.created"]);
    expectProblem(await a.api.get("/inbox/conversations"), 401);
    const again = await stream(a, "/inbox/events");
    expect(again.status).toBe(401);
  });

  it("never shows one account's events to another", async () => {
    const a = await t.newAccount(["INBOX"]);
    const b = await t.newAccount(["INBOX"]);
    const chatA = await conversation(a);
    const chatB = await conversation(b);
    const sa = await stream(a, "/inbox/events");
    const sb = await stream(b, "/inbox/events");
    await write(a, chatA, "message.created", "conversation.read");
    await write(b, chatB, "conversation.archived");
    await sa.waitForEvents(2);
    await sb.waitForEvents(1);
    await new Promise((r) => setTimeout(r, 300));
    expect(sa.events.map((e) => e.json.chatId)).toEqual([chatA, chatA]);
    expect(sb.events.map((e) => [e.event, e.json.chatId])).toEqual([["conversation.archived", chatB]]);
  });

  it("resumes after Last-Event-ID with the events written while the client was away (and with ?lastEventId=)", async () => {
    const a = await t.newAccount(["INBOX"]);
    const chat = await conversation(a);
    const first = await stream(a, `/inbox/conversations/${chat}/events`);
    await write(a, chat, "message.created");
    const [seen] = await first.waitForEvents(1);
    first.close();
    // Written while nobody listens: no stream is woken, the rows wait.
    await write(a, chat, "message.created", "conversation.read", "conversation.archived");
    const again = await stream(a, `/inbox/conversations/${chat}/events`, { "last-event-id": seen!.id! });
    const missed = await again.waitForEvents(3);
    expect(missed.map((e) => e.event)).toEqual(["message.created", "conversation.read", "conversation.archived"]);
    expect(Number(missed[0]!.id)).toBeGreaterThan(Number(seen!.id));
    // Then live events follow on the same stream.
    await write(a, chat, "conversation.unarchived");
    expect((await again.waitForEvents(4))[3]!.event).toBe("conversation.unarchived");
    const byQuery = await stream(a, `/inbox/events?lastEventId=${missed[1]!.id}`);
    expect((await byQuery.waitForEvents(2)).map((e) => e.event)).toEqual(["conversation.archived", "conversation.unarchived"]);
  });

  it("drops the days of events past INBOX_EVENT_RETENTION_HOURS, hides older ones of the day kept, and resumes an older Last-Event-ID from the oldest kept", async () => {
    const a = await t.newAccount(["INBOX"]);
    const chat = await conversation(a);
    await write(a, chat, "message.created", "conversation.read", "conversation.archived", "conversation.unarchived");
    const rows = await t.db.sequelize.query<{ id: string }>(`SELECT id FROM inbox_events WHERE company_id = $1 ORDER BY id`, {
      bind: [a.companyId],
      type: QueryTypes.SELECT,
    });
    // The first as if written 5 days ago (its day's partition, moved there), the second 73 hours ago: both older than retention (72 h by default).
    const old = new Date(Date.now() - 5 * 86400_000).toISOString().slice(0, 10);
    await t.db.sequelize.query(`SELECT ensure_day_partitions('inbox_events', $1::date, (now() AT TIME ZONE 'UTC')::date)`, { bind: [old] });
    await t.db.sequelize.query(`UPDATE inbox_events SET created_at = now() - interval '5 days' WHERE company_id = $1 AND id = $2`, {
      bind: [a.companyId, rows[0]!.id],
    });
    await t.db.sequelize.query(`UPDATE inbox_events SET created_at = now() - interval '73 hours' WHERE company_id = $1 AND id = $2`, {
      bind: [a.companyId, rows[1]!.id],
    });
    const inbox = t.app.broker.getLocalService("inbox") as unknown as { purgeEvents(): Promise<string[]> };
    expect(await inbox.purgeEvents()).toContain(old);
    const [gone] = await t.db.sequelize.query<{ t: string | null }>(`SELECT to_regclass($1) AS t`, {
      bind: [`inbox_events_p${old.replaceAll("-", "")}`],
      type: QueryTypes.SELECT,
    });
    expect(gone!.t).toBeNull();
    const c = await stream(a, `/inbox/conversations/${chat}/events`, { "last-event-id": String(Number(rows[0]!.id) - 1) });
    const events = await c.waitForEvents(2);
    expect(events.map((e) => e.id)).toEqual([rows[2]!.id, rows[3]!.id]);
  });

  it("sends heartbeat comment lines every SSE_HEARTBEAT_MS while nothing happens", async () => {
    const a = await t.newAccount(["INBOX"]);
    const c = await stream(a, "/inbox/events");
    await new Promise((r) => setTimeout(r, HEARTBEAT_MS * 6));
    expect(c.comments.filter((x) => x === "heartbeat").length).toBeGreaterThanOrEqual(3);
    expect(c.events).toEqual([]);
  });

  it("streams message.status when tracking folds a receipt and a read for an inbox reply, and nothing for other messages", async () => {
    const a = await t.newAccount(["INBOX", "WHATSAPP"]);
    const chat = await conversation(a);
    const reply = { companyId: a.companyId, customerMessageId: `reply-${randomUUID()}`, destination: "+351912345678" };
    const plain = { companyId: a.companyId, customerMessageId: `camp-${randomUUID()}`, destination: "+351912345679" };
    const replyId = randomUUID();
    await t.db.sequelize.query(
      `INSERT INTO conversation_messages (id, company_id, conversation_id, channel, direction, message_id, message_type, text)
       VALUES ($1, $2, $3, 'WHATSAPP', 'OUTBOUND', $4, 'TEXT', 'hello')`,
      { bind: [replyId, a.companyId, chat, reply.customerMessageId] },
    );
    for (const m of [reply, plain]) expect((await t.ingress.post("/messages", { ...m, channel: "WHATSAPP" })).status).toBe(202);
    const c = await stream(a, `/inbox/conversations/${chat}/events`);
    expect((await t.ingress.post("/receipts/whatsapp", receiptIn(plain))).status).toBe(202);
    expect((await t.ingress.post("/receipts/whatsapp", receiptIn(reply))).status).toBe(202);
    const [delivered] = await c.waitForEvents(1);
    expect(delivered).toMatchObject({
      event: "message.status",
      json: { chatId: chat, id: reply.customerMessageId, deliveryStatus: "DELIVERED", statusCode: 3, readAt: null },
    });
    expect((await t.ingress.post("/reads/whatsapp", readIn(reply))).status).toBe(202);
    const [, read] = await c.waitForEvents(2);
    expect(read).toMatchObject({ event: "message.status", json: { id: reply.customerMessageId, deliveryStatus: "DELIVERED", readAt: expect.any(String) } });
    // A repeated receipt changes nothing: no event.
    expect((await t.ingress.post("/receipts/whatsapp", receiptIn(reply))).status).toBe(202);
    await new Promise((r) => setTimeout(r, 300));
    expect(c.events).toHaveLength(2);
    const rows = await t.db.sequelize.query<{ n: number }>(`SELECT count(*)::int AS n FROM inbox_events WHERE company_id = $1 AND type = 'message.status'`, {
      bind: [a.companyId],
      type: QueryTypes.SELECT,
    });
    expect(rows[0]!.n).toBe(2);
  });

  it("writes conversation.windowClosed once per closed WhatsApp window (not for RCS, not for an open window)", async () => {
    const a = await t.newAccount(["INBOX"]);
    const closed = await conversation(a, { lastInboundAt: new Date(Date.now() - 25 * 3600_000) });
    await conversation(a, { lastInboundAt: new Date(Date.now() - 23 * 3600_000) });
    await conversation(a, { channel: "RCS", lastInboundAt: new Date(Date.now() - 25 * 3600_000) });
    const c = await stream(a, "/inbox/events", { "last-event-id": "0" });
    const inbox = t.app.broker.getLocalService("inbox") as unknown as { closeWindows(): Promise<number> };
    expect(await inbox.closeWindows()).toBeGreaterThanOrEqual(1);
    await inbox.closeWindows();
    const [e] = await c.waitForEvents(1);
    expect(e).toMatchObject({ event: "conversation.windowClosed", json: { chatId: closed, canReply: false, serviceWindowExpiresAt: expect.any(String) } });
    await new Promise((r) => setTimeout(r, 300));
    expect(c.events).toHaveLength(1);
    // A new inbound message opens a new window; once it has closed, a second event.
    await t.db.sequelize.query(`UPDATE conversations SET last_inbound_at = now() - interval '24 hours 1 minute' WHERE id = $1`, { bind: [closed] });
    await inbox.closeWindows();
    expect((await c.waitForEvents(2))[1]!.event).toBe("conversation.windowClosed");
  });
});

describeOncePerRun("slow clients and limits", () => {
  it("never lets a client that does not read block other requests; it gets every event, in order, once it reads again", async () => {
    const a = await t.newAccount(["INBOX"]);
    const chat = await conversation(a);
    const slow = await stream(a, "/inbox/events", {}, { paused: true });
    const brisk = await stream(a, "/inbox/events");
    const big = "x".repeat(16 * 1024);
    const N = 400; // ~6.5 MiB: far past the socket buffers of both ends
    for (let i = 0; i < N; i += 50) {
      const events: InboxEvent[] = Array.from({ length: 50 }, (_, k) => ({
        companyId: a.companyId,
        conversationId: chat,
        type: "message.created",
        data: { n: i + k, text: big },
      }));
      await t.db.sequelize.transaction((tx) => appendInboxEvents(t.db.sequelize, tx, events));
      announceInboxEvents(t.app.broker, events);
    }
    await brisk.waitForEvents(N, 30_000);
    // The gateway answers others meanwhile.
    const started = performance.now();
    expect((await t.api.get("/openapi.json")).status).toBe(200);
    expect((await t.root.get("/healthz/live")).status).toBe(200);
    expect(performance.now() - started).toBeLessThan(3000);
    expect(slow.events.length).toBeLessThan(N);
    // What the gateway holds for the slow client stays about one page (256 KiB of events) past its buffer, not the 6.5 MiB written.
    const live = (t.app.broker.getLocalService("gateway") as unknown as { live: { pendingBytes(): number } }).live;
    // (The slow stream may still be reading its next page from the database on a busy machine: wait for it to fill.)
    await eventually(async () => expect(live.pendingBytes()).toBeGreaterThan(0), { timeoutMs: 10_000 });
    expect(live.pendingBytes()).toBeLessThan(512 * 1024);
    slow.resume();
    const all = await slow.waitForEvents(N, 30_000);
    expect(all.map((e) => e.json.n)).toEqual(Array.from({ length: N }, (_, i) => i));
  });

  it("refuses streams past SSE_MAX_STREAMS_PER_ACCOUNT (429) and past SSE_MAX_STREAMS (503), and frees a place when a client leaves", async () => {
    const a = await t.newAccount(["INBOX"]);
    const mine = await Promise.all([1, 2, 3, 4].map(() => stream(a, "/inbox/events")));
    expect(mine.map((c) => c.status)).toEqual([200, 200, 200, 200]);
    const fifth = await stream(a, "/inbox/events");
    expect(fifth.status).toBe(429);
    expect(await fifth.body()).toMatchObject({ status: 429, type: expect.stringMatching(/stream-limit-reached/) });
    mine[0]!.close();
    await eventually(async () => expect((await stream(a, "/inbox/events")).status).toBe(200));
    // The gateway's own limit (12): other accounts fill it.
    const others = await Promise.all([1, 2].map(() => t.newAccount(["INBOX"])));
    const more: SseClient[] = [];
    for (const o of others) for (let i = 0; i < 4; i++) more.push(await stream(o, "/inbox/events"));
    expect(more.filter((c) => c.status === 200).length).toBe(8);
    const third = await t.newAccount(["INBOX"]);
    const full = await stream(third, "/inbox/events");
    expect(full.status).toBe(503);
    expect(full.headers["retry-after"]).toBe("5");
  });

  it("counts open streams and streamed events in /metrics", async () => {
    const a = await t.newAccount(["INBOX"]);
    const chat = await conversation(a);
    const gauge = async () => {
      const text = (await t.root.get("/metrics")).text;
      return Number(/^sse_streams_open\{scope="conversation"\} (\d+)/m.exec(text)?.[1] ?? 0);
    };
    const before = await gauge();
    const c = await stream(a, `/inbox/conversations/${chat}/events`);
    await eventually(async () => expect(await gauge()).toBe(before + 1));
    await write(a, chat, "message.created");
    await c.waitForEvents(1);
    expect((await t.root.get("/metrics")).text).toMatch(/^sse_events_streamed_total\{type="message.created"\} [1-9]/m);
    c.close();
    await eventually(async () => expect(await gauge()).toBe(before));
  });
});

describeOncePerRun("a long stream", () => {
  const { lines, stream: logStream } = capturedLogs();
  let own: TestApp;
  beforeAll(async () => {
    // Action calls time out after 200 ms here; a stream is not an action call and lives on.
    own = await startTestApp({
      services: ["gateway", "auth", "inbox"],
      config: { logLevel: "info", requestTimeoutMs: 200, sseHeartbeatMs: 100 },
      broker: { logger: loggerOptions(testConfig({ logLevel: "info" }), logStream) },
    });
  });
  afterAll(() => own?.stop());

  it("outlives the request timeout; its access line is written when it opens, its end in a line of its own", async () => {
    const a = await own.newAccount(["INBOX"]);
    const id = randomUUID();
    await own.db.sequelize.query(
      `INSERT INTO conversations (id, company_id, channel, sender_id, contact_number, last_message_at) VALUES ($1, $2, 'RCS', 'agent', '+351911111111', now())`,
      { bind: [id, a.companyId] },
    );
    const c = await SseClient.open(`${own.api.baseUrl}/inbox/events`, { ...keyOf(a), "x-request-id": "long-stream-1" });
    expect(c.status).toBe(200);
    const access = () => lines.filter((l) => l.msg === "request" && l.requestId === "long-stream-1");
    await eventually(() => expect(access()).toEqual([expect.objectContaining({ status: 200, route: expect.stringContaining("/inbox/events") })]));
    await new Promise((r) => setTimeout(r, 1200));
    const events: InboxEvent[] = [{ companyId: a.companyId, conversationId: id, type: "message.created", data: {} }];
    await own.db.sequelize.transaction((tx) => appendInboxEvents(own.db.sequelize, tx, events));
    announceInboxEvents(own.app.broker, events);
    await c.waitForEvents(1);
    expect(c.ended).toBe(false);
    expect(c.comments.filter((x) => x === "heartbeat").length).toBeGreaterThanOrEqual(5);
    c.close();
    await eventually(() =>
      expect(lines.filter((l) => l.msg === "event stream closed" && l.requestId === "long-stream-1")).toEqual([
        expect.objectContaining({ events: 1, companyId: a.companyId, seconds: expect.any(Number) }),
      ]),
    );
    expect(lines.find((l) => l.msg === "event stream closed" && l.requestId === "long-stream-1")!.seconds).toBeGreaterThan(1);
    expect(access()).toHaveLength(1);
  });
});

describeOncePerRun("gateway stop", () => {
  it("ends open streams cleanly when the gateway stops", async () => {
    const own = await startTestApp({ services: ["gateway", "auth", "inbox"] });
    try {
      const a = await own.newAccount(["INBOX"]);
      const c = await SseClient.open(`${own.api.baseUrl}/inbox/events`, keyOf(a));
      expect(c.status).toBe(200);
      const stopping = own.stop();
      await eventually(() => expect(c.ended).toBe(true));
      await stopping;
    } catch (err) {
      await own.stop().catch(() => undefined);
      throw err;
    }
  });
});
