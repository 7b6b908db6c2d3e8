/**
 * The internal ingress and the status model (contract section 6, spec parts 2, 3 and 6): what
 * upstreams post becomes statuses partners poll, and exactly the outbox events the spec names.
 */
import { QueryTypes } from "sequelize";
import { listening, startTestApp, uid, type Account, type TestApp } from "../helpers/app";
import { messageIn, phone, receiptIn, smsReceiptIn, uniqueId, type Sent } from "../helpers/builders";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";
import { Http } from "../helpers/http";
import { applyChannelSupport } from "../../services/contacts/contacts.support";
import { inTransaction } from "../../lib/db/db";
import type { IngestItem } from "../../services/tracking/tracking.fold";
import { writeItems } from "../../services/tracking/tracking.writes";
import { WEBHOOK_EVENTS } from "../helpers/db";

let t: TestApp;
/**
 * A contact's channels follow tracking's status feed (contacts.support.ts): a transaction running
 * anywhere on the test server (another file's) holds the feed's newer rows back until it ends.
 */
const FEED = { timeoutMs: 30_000 };
beforeAll(async () => {
  t = await startTestApp({ services: ["gateway", "auth", "contacts", "tracking", "inbox"], listening: true });
});
afterAll(() => t?.stop());

const mid = () => uniqueId("m");

interface EventRow {
  event_type: string;
  channel: string;
  message_id: string;
  num_part: number | null;
  payload: Record<string, unknown>;
}
const eventsOf = (companyId: string, messageId?: string) =>
  t.db.sequelize.query<EventRow>(
    `SELECT event_type, channel, message_id, num_part, payload FROM ${WEBHOOK_EVENTS} WHERE company_id = $1 ${messageId ? "AND message_id = $2" : ""} ORDER BY tx, id`,
    { bind: messageId ? [companyId, messageId] : [companyId], type: QueryTypes.SELECT },
  );

const status = async (a: Account, channel: string, id: string) => {
  const res = await a.api.get(`/messages/status/${encodeURIComponent(id)}?channel=${channel}`);
  expect(res.status).toBe(200);
  return res.body;
};

/** Registers a message (sent at a fixed time, so that the statuses below can be compared whole). */
const register = async (companyId: string, over: Record<string, unknown> = {}) => {
  const body = messageIn(companyId, { sentAt: "2026-11-20T10:00:00Z", ...over });
  const res = await t.ingress.post("/messages", body);
  expect(res.status).toBe(202);
  return body as typeof body & Sent;
};

/** An SMS receipt of `m` (DELIVERED at a fixed time). */
const smsReceipt = (companyId: string, m: Omit<Sent, "companyId">, over: Record<string, unknown> = {}) =>
  smsReceiptIn({ companyId, ...m }, { DELIVERY_DATE: "2026-11-20T10:00:05Z", ...over });

describe("registration", () => {
  it("registers an SMS as ACCEPTED and an RCS or WhatsApp message as UNKNOWN, answering 202 once stored", async () => {
    const a = await t.newAccount(["SMS", "RCS", "WHATSAPP"]);
    const sms = await register(a.companyId, { text: "Hello", campaignId: "c-1", totalParts: 1 });
    const rcs = await register(a.companyId, { channel: "RCS" });
    const wa = await register(a.companyId, { channel: "WHATSAPP" });
    expect(await status(a, "SMS", sms.customerMessageId)).toEqual({
      customerMessageId: sms.customerMessageId,
      channel: "SMS",
      deliveryStatus: "ACCEPTED",
      statusCode: 1,
      description: "accepted",
      destination: sms.destination,
      sentAt: "2026-11-20T10:00:00.000Z",
      deliveryDate: null,
      readAt: null,
      simulation: false,
    });
    expect(await status(a, "RCS", rcs.customerMessageId)).toMatchObject({
      deliveryStatus: "UNKNOWN",
      statusCode: 0,
      description: "unknown",
      destination: rcs.destination,
    });
    expect(await status(a, "WHATSAPP", wa.customerMessageId)).toMatchObject({ deliveryStatus: "UNKNOWN", statusCode: 0 });
    expect(await eventsOf(a.companyId)).toEqual([]); // in flight: no event
  });

  it("answers 202 with the count and an X-Request-Id, and a repeat changes nothing", async () => {
    const companyId = await listening(t.db);
    const body = [1, 2, 3].map(() => ({ companyId, channel: "SMS", customerMessageId: mid(), destination: phone() }));
    const res = await t.ingress.post("/messages", body, { headers: { "x-request-id": "upstream-batch-1" } });
    expect(res.status).toBe(202);
    expect(res.body).toEqual({ accepted: 3 });
    expect(res.headers.get("x-request-id")).toBe("upstream-batch-1");
    const again = await t.ingress.post(
      "/messages",
      body.map((b) => ({ ...b, text: "changed" })),
    );
    expect(again.status).toBe(202);
    const [row] = await t.db.sequelize.query<{ n: string; texts: string }>(`SELECT count(*) AS n, count(text) AS texts FROM messages WHERE company_id = $1`, {
      bind: [companyId],
      type: QueryTypes.SELECT,
    });
    expect(row).toEqual({ n: "3", texts: "0" });
  });

  it("defaults sentAt to the time of registration", async () => {
    const a = await t.newAccount(["SMS"]);
    const before = Date.now();
    const m = await register(a.companyId, { sentAt: undefined });
    const s = await status(a, "SMS", m.customerMessageId);
    expect(Date.parse(s.sentAt)).toBeGreaterThanOrEqual(before - 1000);
    expect(Date.parse(s.sentAt)).toBeLessThanOrEqual(Date.now() + 1000);
  });
});

describe("SMS receipts", () => {
  it("makes the status final with its deliveryDate and writes one DELIVERY event with price and parts", async () => {
    const a = await t.newAccount(["SMS"]);
    const m = await register(a.companyId);
    const res = await t.ingress.post("/receipts/sms", smsReceipt(a.companyId, m, { PRICE: 0.045 }));
    expect(res.status).toBe(202);
    expect(await status(a, "SMS", m.customerMessageId)).toMatchObject({
      deliveryStatus: "DELIVERED",
      statusCode: 3,
      description: "delivered",
      deliveryDate: "2026-11-20T10:00:05.000Z",
    });
    const events = await eventsOf(a.companyId);
    expect(events).toEqual([
      {
        event_type: "DELIVERY",
        channel: "SMS",
        message_id: m.customerMessageId,
        num_part: 1,
        payload: {
          eventType: "DELIVERY",
          channel: "SMS",
          messageId: m.customerMessageId,
          destination: m.destination,
          statusCode: 3,
          description: "delivered",
          eventDate: "2026-11-20T10:00:05.000Z",
          price: 0.045,
          totalParts: 1,
          numPart: 1,
        },
      },
    ]);
  });

  it("never changes a final code and makes no event for a repeat", async () => {
    const a = await t.newAccount(["SMS"]);
    const m = await register(a.companyId);
    await t.ingress.post("/receipts/sms", smsReceipt(a.companyId, m, { DELIVERY_STATUS: 6 })).then((r) => expect(r.status).toBe(202));
    await t.ingress.post("/receipts/sms", smsReceipt(a.companyId, m, { DELIVERY_STATUS: 6 })).then((r) => expect(r.status).toBe(202));
    await t.ingress
      .post("/receipts/sms", smsReceipt(a.companyId, m, { DELIVERY_STATUS: 3, DELIVERY_DATE: "2026-11-21T00:00:00Z" }))
      .then((r) => expect(r.status).toBe(202));
    expect(await status(a, "SMS", m.customerMessageId)).toMatchObject({
      deliveryStatus: "UNDELIVERABLE",
      statusCode: 6,
      deliveryDate: "2026-11-20T10:00:05.000Z",
    });
    expect(await eventsOf(a.companyId)).toHaveLength(1);
  });

  it("keeps a receipt that arrives before its message is registered, applies it, and notifies it", async () => {
    const a = await t.newAccount(["SMS"]);
    const m = { customerMessageId: mid(), destination: phone() };
    await t.ingress.post("/receipts/sms", smsReceipt(a.companyId, m, { DELIVERY_STATUS: 4 })).then((r) => expect(r.status).toBe(202));
    expect(await status(a, "SMS", m.customerMessageId)).toMatchObject({ deliveryStatus: "EXPIRED", statusCode: 4, sentAt: null, destination: m.destination });
    await register(a.companyId, { ...m, sentAt: "2026-11-20T09:59:00Z", text: "late" });
    expect(await status(a, "SMS", m.customerMessageId)).toMatchObject({
      deliveryStatus: "EXPIRED",
      sentAt: "2026-11-20T09:59:00.000Z",
      deliveryDate: "2026-11-20T10:00:05.000Z",
    });
    const events = await eventsOf(a.companyId);
    expect(events.map((e) => e.payload.statusCode)).toEqual([4]);
    // The registration, once it came, puts the message in the history.
    const h = await a.api.get("/messages/history");
    expect(h.body.data.map((x: { customerMessageId: string; text: string }) => [x.customerMessageId, x.text])).toEqual([[m.customerMessageId, "late"]]);
  });

  it("makes a multi-part SMS final only when every part has a receipt, with the lowest failing part's code and the latest date", async () => {
    const a = await t.newAccount(["SMS"]);
    const m = await register(a.companyId, { totalParts: 3 });
    const part = (n: number, code: number, date: string) =>
      smsReceipt(a.companyId, m, { TOTAL_PARTS: 3, NUM_PART: n, DELIVERY_STATUS: code, DELIVERY_DATE: date, PRICE: 0.01 });
    await t.ingress.post("/receipts/sms", part(3, 6, "2026-11-20T10:00:09Z"));
    await t.ingress.post("/receipts/sms", part(1, 3, "2026-11-20T10:00:07Z"));
    expect(await status(a, "SMS", m.customerMessageId)).toMatchObject({ deliveryStatus: "ACCEPTED", statusCode: 1, deliveryDate: null });
    await t.ingress.post("/receipts/sms", part(1, 3, "2026-11-20T10:00:07Z")); // a repeat of part 1
    await t.ingress.post("/receipts/sms", part(2, 5, "2026-11-20T10:00:08Z"));
    expect(await status(a, "SMS", m.customerMessageId)).toMatchObject({ deliveryStatus: "DELETED", statusCode: 5, deliveryDate: "2026-11-20T10:00:09.000Z" });
    const events = await eventsOf(a.companyId);
    expect(events.map((e) => [e.num_part, e.payload.numPart, e.payload.totalParts, e.payload.statusCode])).toEqual([
      [3, 3, 3, 6],
      [1, 1, 3, 3],
      [2, 2, 3, 5],
    ]);
    const h = await a.api.get("/messages/history");
    expect(h.body.data[0]).toMatchObject({ totalParts: 3, price: 0.03 });
  });

  it("reads DELIVERED once every part of a multi-part SMS was delivered, whatever order the parts came in, in one array", async () => {
    const a = await t.newAccount(["SMS"]);
    const m = await register(a.companyId, { totalParts: 2 });
    const res = await t.ingress.post("/receipts/sms", [
      smsReceipt(a.companyId, m, { TOTAL_PARTS: 2, NUM_PART: 2, DELIVERY_DATE: "2026-11-20T10:00:03Z" }),
      smsReceipt(a.companyId, m, { TOTAL_PARTS: 2, NUM_PART: 1, DELIVERY_DATE: "2026-11-20T10:00:02Z" }),
      smsReceipt(a.companyId, m, { TOTAL_PARTS: 2, NUM_PART: 1, DELIVERY_DATE: "2026-11-20T10:00:02Z" }),
    ]);
    expect(res.body).toEqual({ accepted: 3 });
    expect(await status(a, "SMS", m.customerMessageId)).toMatchObject({ deliveryStatus: "DELIVERED", deliveryDate: "2026-11-20T10:00:03.000Z" });
    expect((await eventsOf(a.companyId)).map((e) => e.num_part)).toEqual([2, 1]);
  });

  it("takes the carrier's part count over a registration that got it wrong, and parts without TOTAL_PARTS", async () => {
    const a = await t.newAccount(["SMS"]);
    const over = await register(a.companyId, { totalParts: 3 });
    await t.ingress.post("/receipts/sms", smsReceipt(a.companyId, over, { TOTAL_PARTS: 2, NUM_PART: 1 }));
    await t.ingress.post("/receipts/sms", smsReceipt(a.companyId, over, { TOTAL_PARTS: 2, NUM_PART: 2, DELIVERY_STATUS: 4 }));
    expect(await status(a, "SMS", over.customerMessageId)).toMatchObject({ deliveryStatus: "EXPIRED", statusCode: 4 });
    const three = await register(a.companyId, { totalParts: 3 });
    for (const n of [1, 2, 3]) expect((await t.ingress.post("/receipts/sms", smsReceipt(a.companyId, three, { NUM_PART: n }))).status).toBe(202);
    expect(await status(a, "SMS", three.customerMessageId)).toMatchObject({ deliveryStatus: "DELIVERED" });
    expect((await eventsOf(a.companyId)).map((e) => e.payload.totalParts)).toEqual([2, 2, 3, 3, 3]);
  });

  it("takes the part count from the carrier when the registration left it out", async () => {
    const a = await t.newAccount(["SMS"]);
    const m = await register(a.companyId);
    await t.ingress.post("/receipts/sms", smsReceipt(a.companyId, m, { TOTAL_PARTS: 2, NUM_PART: 1 }));
    expect(await status(a, "SMS", m.customerMessageId)).toMatchObject({ deliveryStatus: "ACCEPTED" });
    await t.ingress.post("/receipts/sms", smsReceipt(a.companyId, m, { TOTAL_PARTS: 2, NUM_PART: 2 }));
    expect(await status(a, "SMS", m.customerMessageId)).toMatchObject({ deliveryStatus: "DELIVERED" });
  });
});

describe("RCS and WhatsApp receipts and reads", () => {
  it("applies a receipt, then records a read (readAt, READ event without statusCode) while the status stays DELIVERED", async () => {
    const a = await t.newAccount(["RCS"]);
    const m = await register(a.companyId, { channel: "RCS" });
    await t.ingress
      .post("/receipts/rcs", {
        companyId: a.companyId,
        messageId: m.customerMessageId,
        destination: m.destination,
        statusCode: 3,
        eventDate: "2026-11-20T10:01:00+01:00",
      })
      .then((r) => expect(r.status).toBe(202));
    await t.ingress
      .post("/reads/rcs", { companyId: a.companyId, messageId: m.customerMessageId, destination: m.destination, eventDate: "2026-11-20T10:05:00Z" })
      .then((r) => expect(r.status).toBe(202));
    await t.ingress.post("/reads/rcs", {
      companyId: a.companyId,
      messageId: m.customerMessageId,
      destination: m.destination,
      eventDate: "2026-11-20T10:06:00Z",
    });
    expect(await status(a, "RCS", m.customerMessageId)).toMatchObject({
      deliveryStatus: "DELIVERED",
      statusCode: 3,
      deliveryDate: "2026-11-20T09:01:00.000Z",
      readAt: "2026-11-20T10:05:00.000Z",
    });
    const events = await eventsOf(a.companyId);
    expect(events.map((e) => e.payload)).toEqual([
      {
        eventType: "DELIVERY",
        channel: "RCS",
        messageId: m.customerMessageId,
        destination: m.destination,
        statusCode: 3,
        description: "delivered",
        eventDate: "2026-11-20T09:01:00.000Z",
      },
      { eventType: "READ", channel: "RCS", messageId: m.customerMessageId, destination: m.destination, eventDate: "2026-11-20T10:05:00.000Z" },
    ]);
  });

  it("accepts CONVERSATION_CLOSED on WhatsApp only", async () => {
    const a = await t.newAccount(["WHATSAPP", "RCS"]);
    const m = await register(a.companyId, { channel: "WHATSAPP" });
    const body = { companyId: a.companyId, messageId: m.customerMessageId, destination: m.destination, statusCode: 12, eventDate: "2026-11-20T10:01:00Z" };
    expect((await t.ingress.post("/receipts/whatsapp", body)).status).toBe(202);
    expect(await status(a, "WHATSAPP", m.customerMessageId)).toMatchObject({
      deliveryStatus: "CONVERSATION_CLOSED",
      statusCode: 12,
      description: "conversation closed",
    });
    expectProblem(await t.ingress.post("/receipts/rcs", body), 400);
  });

  it("gives a contact's number RCS once delivered to, and takes it away after UNSUPPORTED", async () => {
    const a = await t.newAccount(["RCS", "CONTACTS"]);
    const number = phone();
    const c = await a.api.post("/contacts", { phoneNumber: number });
    expect(c.body.communicationSupported).toEqual(["SMS"]);
    const receipt = async (code: number) => {
      const m = await register(a.companyId, { channel: "RCS", destination: number });
      await t.ingress.post("/receipts/rcs", receiptIn(m, { statusCode: code, eventDate: "2026-11-20T10:01:00Z" }));
    };
    const supported = async () => (await a.api.get(`/contacts/${c.body.id}`)).body.communicationSupported;
    // The channels a campaign's audience skips for the contact (not in the API: the contact's own row).
    const refused = async () =>
      (
        await t.db.sequelize.query<{ r: string[] }>(`SELECT communication_refused AS r FROM contacts WHERE id = $1`, {
          bind: [c.body.id],
          type: QueryTypes.SELECT,
        })
      )[0]!.r;
    await receipt(3);
    await eventually(async () => expect(await supported()).toEqual(["SMS", "RCS"]), FEED);
    expect(await refused()).toEqual([]);
    await receipt(11);
    await eventually(async () => expect(await supported()).toEqual(["SMS"]), FEED);
    expect(await refused()).toEqual(["RCS"]);
    await receipt(11);
    await receipt(3);
    await eventually(async () => expect(await supported()).toEqual(["SMS", "RCS"]), FEED);
    expect(await refused()).toEqual([]);
  }, 120_000);
});

describe("communicationSupported", () => {
  it("applies an RCS and a WhatsApp change of the same number given together, and ignores simulated messages", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const number = phone();
    const c = await a.api.post("/contacts", { phoneNumber: number });
    await inTransaction(t.db.sequelize, (exec) =>
      applyChannelSupport(exec, [
        { companyId: a.companyId, channel: "RCS", destination: number, supported: true },
        { companyId: a.companyId, channel: "WHATSAPP", destination: number, supported: true },
      ]),
    );
    expect((await a.api.get(`/contacts/${c.body.id}`)).body.communicationSupported).toEqual(["SMS", "RCS", "WHATSAPP"]);
    // A simulated message is never sent: its "receipt" says nothing about the number.
    const m = await register(a.companyId, { channel: "WHATSAPP", destination: number, simulation: true });
    expect((await t.ingress.post("/receipts/whatsapp", receiptIn(m, { statusCode: 11, eventDate: "2026-11-20T10:01:00Z" }))).status).toBe(202);
    // Then a real UNSUPPORTED receipt on RCS, posted after it: once that one has been applied, the
    // simulated one (had it counted) would have been too. Only RCS goes.
    const real = await register(a.companyId, { channel: "RCS", destination: number });
    expect((await t.ingress.post("/receipts/rcs", receiptIn(real, { statusCode: 11, eventDate: "2026-11-20T10:01:00Z" }))).status).toBe(202);
    await eventually(async () => expect((await a.api.get(`/contacts/${c.body.id}`)).body.communicationSupported).not.toContain("RCS"), FEED);
    expect((await a.api.get(`/contacts/${c.body.id}`)).body.communicationSupported).toEqual(["SMS", "WHATSAPP"]);
    // Contacts follows tracking's status feed for this: its lag is on /metrics beside the inbox's.
    const text = (await t.root.get("/metrics")).text;
    expect(text).toMatch(/^feed_follow_lag_seconds\{feed="message_status_changes",follower="contacts"\} \d/m);
    expect(text).toMatch(/^feed_follow_lag_seconds\{feed="message_status_changes",follower="inbox"\} \d/m);
  });
});

describe("simulation", () => {
  it("tracks a simulated message, marks it, and writes no event", async () => {
    const a = await t.newAccount(["SMS"]);
    const m = await register(a.companyId, { simulation: true });
    await t.ingress.post("/receipts/sms", smsReceipt(a.companyId, m));
    expect(await status(a, "SMS", m.customerMessageId)).toMatchObject({ deliveryStatus: "DELIVERED", simulation: true });
    expect(await eventsOf(a.companyId)).toEqual([]);
  });

  it("withdraws the events of an early receipt when the registration then says simulation", async () => {
    const a = await t.newAccount(["RCS"]);
    const m = { customerMessageId: mid(), destination: phone() };
    await t.ingress.post("/receipts/rcs", {
      companyId: a.companyId,
      messageId: m.customerMessageId,
      destination: m.destination,
      statusCode: 3,
      eventDate: "2026-11-20T10:01:00Z",
    });
    expect(await eventsOf(a.companyId)).toHaveLength(1);
    await register(a.companyId, { ...m, channel: "RCS", simulation: true });
    // Taken back in the feed (the notifier drops it unsent: notifier-feed.spec).
    expect(
      await t.db.sequelize.query(`SELECT event_type, message_id FROM message_webhook_events WHERE company_id = $1 ORDER BY tx, id`, {
        bind: [a.companyId],
        type: QueryTypes.SELECT,
      }),
    ).toEqual([
      { event_type: "DELIVERY", message_id: m.customerMessageId },
      { event_type: "RETRACT", message_id: m.customerMessageId },
    ]);
    expect(await status(a, "RCS", m.customerMessageId)).toMatchObject({ deliveryStatus: "DELIVERED", simulation: true });
  });
});

/** An inbound text message of `companyId` (a fresh messageId and sender). */
const textIn = (companyId: string) => ({
  companyId,
  messageId: mid(),
  source: phone(),
  destination: "+351210000000",
  receivedDate: "2026-11-20T11:00:00Z",
  messageType: "TEXT",
  text: "Hi!",
});

describe("events only where somebody listens", () => {
  it("writes no event for an account without a webhook: its receipts, reads and inbound messages are stored all the same", async () => {
    const companyId = uid(); // no webhook (the accounts of this file's other cases have one)
    const sms = await register(companyId);
    const rcs = await register(companyId, { channel: "RCS" });
    expect((await t.ingress.post("/receipts/sms", smsReceipt(companyId, sms))).status).toBe(202);
    expect((await t.ingress.post("/receipts/rcs", receiptIn(rcs, { statusCode: 3, eventDate: "2026-11-20T10:01:00Z" }))).status).toBe(202);
    const read = (m: Sent & { companyId: string }) => ({
      companyId: m.companyId,
      messageId: m.customerMessageId,
      destination: m.destination,
      eventDate: "2026-11-20T10:05:00Z",
    });
    expect((await t.ingress.post("/reads/rcs", read(rcs))).status).toBe(202);
    const inbound = textIn(companyId);
    expect((await t.ingress.post("/inbound/whatsapp", inbound)).status).toBe(202);
    const stored = await t.db.sequelize.query<{ customer_message_id: string; status_code: number; read: boolean }>(
      `SELECT customer_message_id, status_code, read_at IS NOT NULL AS read FROM messages WHERE company_id = $1 ORDER BY channel`,
      { bind: [companyId], type: QueryTypes.SELECT },
    );
    expect(stored).toEqual([
      { customer_message_id: rcs.customerMessageId, status_code: 3, read: true },
      { customer_message_id: sms.customerMessageId, status_code: 3, read: false },
    ]);
    const [held] = await t.db.sequelize.query<{ n: number }>(`SELECT count(*)::int AS n FROM conversation_messages WHERE company_id = $1`, {
      bind: [companyId],
      type: QueryTypes.SELECT,
    });
    expect(held).toEqual({ n: 1 });
    expect(await eventsOf(companyId)).toEqual([]);
    // The same changes for an account with a webhook write their four events (DELIVERY, DELIVERY, READ, INBOUND).
    const listened = await listening(t.db);
    const sms2 = await register(listened);
    const rcs2 = await register(listened, { channel: "RCS" });
    await t.ingress.post("/receipts/sms", smsReceipt(listened, sms2));
    await t.ingress.post("/receipts/rcs", receiptIn(rcs2, { statusCode: 3, eventDate: "2026-11-20T10:01:00Z" }));
    await t.ingress.post("/reads/rcs", read(rcs2));
    await t.ingress.post("/inbound/whatsapp", { ...inbound, companyId: listened, messageId: mid() });
    expect((await eventsOf(listened)).map((e) => e.event_type)).toEqual(["DELIVERY", "DELIVERY", "READ", "INBOUND"]);
  });

  it("counts as written, for the notifiers' wake-up, only the events of accounts with a webhook", async () => {
    const deaf = uid();
    const heard = await listening(t.db);
    const [a, b] = [await register(deaf, { channel: "RCS" }), await register(heard, { channel: "RCS" })];
    // Reads take the general path (the states folded, then one statement for the updates and the events).
    const read = (m: Sent & { companyId: string }): IngestItem => ({
      kind: "read",
      channel: "RCS",
      companyId: m.companyId,
      messageId: m.customerMessageId,
      destination: m.destination,
      date: "2026-11-20T10:05:00.000Z",
    });
    const effects = await inTransaction(t.db.sequelize, (exec) => writeItems(exec, [read(a), read(b)]));
    expect(effects.events).toBe(1);
    expect(await eventsOf(deaf)).toEqual([]);
    expect((await eventsOf(heard)).map((e) => e.event_type)).toEqual(["READ"]);
  });
});

describe("inbound", () => {
  it("stores an inbound message once and writes one INBOUND event with the fields given", async () => {
    const companyId = await listening(t.db);
    const body = textIn(companyId);
    expect((await t.ingress.post("/inbound/whatsapp", body)).status).toBe(202);
    expect((await t.ingress.post("/inbound/whatsapp", body)).status).toBe(202);
    const events = await eventsOf(companyId);
    expect(events.map((e) => e.payload)).toEqual([
      {
        eventType: "INBOUND",
        channel: "WHATSAPP",
        messageId: body.messageId,
        source: body.source,
        destination: body.destination,
        receivedDate: "2026-11-20T11:00:00.000Z",
        messageType: "TEXT",
        text: "Hi!",
      },
    ]);
    // Handed to inbox, which owns inbound messages: stored once, in the end user's conversation.
    const stored = await t.db.sequelize.query<{ message_id: string; sender_id: string; contact_number: string }>(
      `SELECT m.message_id, c.sender_id, c.contact_number FROM conversation_messages m JOIN conversations c ON c.id = m.conversation_id WHERE m.company_id = $1`,
      { bind: [companyId], type: QueryTypes.SELECT },
    );
    expect(stored).toEqual([{ message_id: body.messageId, sender_id: body.destination, contact_number: body.source }]);
  });

  it("accepts an inbound message while no inbox node runs, and the inbox stores it once one starts (tracking calls nothing of the inbox's)", async () => {
    const alone = await startTestApp({ services: ["tracking"] });
    let inbox: TestApp | undefined;
    try {
      const companyId = await listening(alone.db);
      const body = {
        companyId,
        messageId: mid(),
        source: phone(),
        destination: "agent",
        receivedDate: "2026-11-20T11:00:00Z",
        messageType: "TEXT",
        text: "hi",
      };
      expect((await alone.ingress.post("/inbound/rcs", body)).status).toBe(202);
      const held = () =>
        alone.db.sequelize.query<{ message_id: string }>(`SELECT message_id FROM conversation_messages WHERE company_id = $1`, {
          bind: [companyId],
          type: QueryTypes.SELECT,
        });
      // In tracking's feed, not yet in the inbox.
      expect(
        await alone.db.sequelize.query(`SELECT message_id FROM inbound_messages_received WHERE company_id = $1`, {
          bind: [companyId],
          type: QueryTypes.SELECT,
        }),
      ).toEqual([{ message_id: body.messageId }]);
      expect(await held()).toEqual([]);
      inbox = await startTestApp({ services: ["inbox"], db: alone.db });
      await eventually(async () => expect(await held()).toEqual([{ message_id: body.messageId }]));
      const [row] = await alone.db.sequelize.query<{ n: string }>(
        `SELECT count(*) AS n FROM ${WEBHOOK_EVENTS} WHERE company_id = $1 AND event_type = 'INBOUND'`,
        {
          bind: [companyId],
          type: QueryTypes.SELECT,
        },
      );
      expect(Number(row!.n)).toBe(1);
    } finally {
      await inbox?.stop();
      await alone.stop();
    }
  });
});

describe("grouped writes", () => {
  it("stores 60 concurrent single-object posts, each answered once committed, with one event per receipt", async () => {
    const companyId = await listening(t.db);
    const ms = Array.from({ length: 60 }, () => ({ customerMessageId: mid(), destination: phone() }));
    const regs = await Promise.all(ms.map((m) => t.ingress.post("/messages", { companyId, channel: "SMS", ...m })));
    expect(regs.every((r) => r.status === 202)).toBe(true);
    const receipts = await Promise.all(ms.map((m) => t.ingress.post("/receipts/sms", smsReceipt(companyId, m))));
    expect(receipts.every((r) => r.status === 202)).toBe(true);
    const [row] = await t.db.sequelize.query<{ n: string }>(`SELECT count(*) AS n FROM messages WHERE company_id = $1 AND status_code = 3`, {
      bind: [companyId],
      type: QueryTypes.SELECT,
    });
    expect(row!.n).toBe("60");
    expect(await eventsOf(companyId)).toHaveLength(60);
  });
});

describe("races", () => {
  it("makes exactly one event per part when parts and their repeats of many messages arrive at once", async () => {
    const companyId = await listening(t.db);
    const ms = Array.from({ length: 20 }, () => ({ customerMessageId: mid(), destination: phone() }));
    await t.ingress.post(
      "/messages",
      ms.map((m) => ({ companyId, channel: "SMS", totalParts: 3, ...m })),
    );
    const posts = ms.flatMap((m) => [1, 2, 3, 1, 2, 3].map((n) => smsReceipt(companyId, m, { TOTAL_PARTS: 3, NUM_PART: n, DELIVERY_STATUS: n === 2 ? 6 : 3 })));
    posts.sort(() => Math.random() - 0.5);
    const answers = await Promise.all(posts.map((b) => t.ingress.post("/receipts/sms", b)));
    expect(answers.every((r) => r.status === 202)).toBe(true);
    const events = await eventsOf(companyId);
    expect(events).toHaveLength(60);
    expect(new Set(events.map((e) => `${e.message_id}/${e.num_part}`)).size).toBe(60);
    const [row] = await t.db.sequelize.query<{ n: string }>(`SELECT count(*) AS n FROM messages WHERE company_id = $1 AND status_code = 6`, {
      bind: [companyId],
      type: QueryTypes.SELECT,
    });
    expect(row!.n).toBe("20");
  });

  it("ends with one row, the registration's data and one event when registrations and receipts race", async () => {
    const companyId = await listening(t.db);
    const ms = Array.from({ length: 30 }, () => ({ customerMessageId: mid(), destination: phone() }));
    const posts = ms.flatMap((m) => [
      () => t.ingress.post("/messages", { companyId, channel: "SMS", text: "hi", sentAt: "2026-11-20T09:00:00Z", ...m }),
      () => t.ingress.post("/receipts/sms", smsReceipt(companyId, m)),
    ]);
    posts.sort(() => Math.random() - 0.5);
    const answers = await Promise.all(posts.map((p) => p()));
    expect(answers.every((r) => r.status === 202)).toBe(true);
    const rows = await t.db.sequelize.query<{ status_code: number; text: string; sent_at: Date }>(
      `SELECT status_code, text, sent_at FROM messages WHERE company_id = $1`,
      { bind: [companyId], type: QueryTypes.SELECT },
    );
    expect(rows).toHaveLength(30);
    expect(rows.every((r) => r.status_code === 3 && r.text === "hi" && r.sent_at?.toISOString() === "2026-11-20T09:00:00.000Z")).toBe(true);
    expect(await eventsOf(companyId)).toHaveLength(30);
  });
});

describe("bad input", () => {
  const companyId = "bad-input-co";
  const count = async () =>
    (await t.db.sequelize.query<{ n: string }>(`SELECT count(*) AS n FROM messages WHERE company_id = $1`, { bind: [companyId], type: QueryTypes.SELECT }))[0]!
      .n;

  it.each([
    [
      "a code from the RCS row on SMS",
      "/receipts/sms",
      { companyId, MESSAGE_ID: "a", DESTINATION: "+351911111111", DELIVERY_STATUS: 9, DELIVERY_DATE: "2026-11-20T10:00:00Z" },
      "DELIVERY_STATUS",
    ],
    [
      "ACCEPTED (1) as a receipt",
      "/receipts/sms",
      { companyId, MESSAGE_ID: "a", DESTINATION: "+351911111111", DELIVERY_STATUS: 1, DELIVERY_DATE: "2026-11-20T10:00:00Z" },
      "DELIVERY_STATUS",
    ],
    [
      "UNKNOWN (0) as a receipt",
      "/receipts/rcs",
      { companyId, messageId: "a", destination: "+351911111111", statusCode: 0, eventDate: "2026-11-20T10:00:00Z" },
      "statusCode",
    ],
    [
      "an SMS-only code on RCS",
      "/receipts/rcs",
      { companyId, messageId: "a", destination: "+351911111111", statusCode: 5, eventDate: "2026-11-20T10:00:00Z" },
      "statusCode",
    ],
    [
      "NUM_PART above TOTAL_PARTS",
      "/receipts/sms",
      { companyId, MESSAGE_ID: "a", DESTINATION: "+351911111111", DELIVERY_STATUS: 3, DELIVERY_DATE: "2026-11-20T10:00:00Z", TOTAL_PARTS: 2, NUM_PART: 3 },
      "NUM_PART",
    ],
    [
      "a date that does not parse",
      "/receipts/sms",
      { companyId, MESSAGE_ID: "a", DESTINATION: "+351911111111", DELIVERY_STATUS: 3, DELIVERY_DATE: "yesterday" },
      "DELIVERY_DATE",
    ],
    ["an impossible date", "/reads/whatsapp", { companyId, messageId: "a", destination: "+351911111111", eventDate: "2026-02-30T10:00:00Z" }, "eventDate"],
    ["an unknown channel", "/messages", { companyId, channel: "TELEGRAM", customerMessageId: "a", destination: "+351911111111" }, "channel"],
    ["a missing channel", "/messages", { companyId, customerMessageId: "a", destination: "+351911111111" }, "channel"],
    ["a missing companyId", "/messages", { channel: "SMS", customerMessageId: "a", destination: "+351911111111" }, "companyId"],
    ["a destination not in E.164", "/messages", { companyId, channel: "SMS", customerMessageId: "a", destination: "912345678" }, "destination"],
    [
      "a price out of range",
      "/receipts/sms",
      { companyId, MESSAGE_ID: "a", DESTINATION: "+351911111111", DELIVERY_STATUS: 3, DELIVERY_DATE: "2026-11-20T10:00:00Z", PRICE: 100000000 },
      "PRICE",
    ],
    ["a NUL in a text", "/messages", { companyId, channel: "SMS", customerMessageId: "a", destination: "+351911111111", text: "a\u0000b" }, "text"],
    [
      "an unpaired surrogate in a text",
      "/inbound/rcs",
      { companyId, messageId: "a", source: "+351911111111", destination: "agent", receivedDate: "2026-11-20T10:00:00Z", messageType: "TEXT", text: "\ud800" },
      "text",
    ],
    ["year 0", "/messages", { companyId, channel: "SMS", customerMessageId: "a", destination: "+351911111111", sentAt: "0000-01-01T00:00:00Z" }, "sentAt"],
    ["an unknown field", "/messages", { companyId, channel: "SMS", customerMessageId: "a", destination: "+351911111111", colour: "red" }, "colour"],
  ])("refuses %s with 400 naming the field", async (_name, path, body, field) => {
    const res = await t.ingress.post(path, body);
    expectProblem(res, 400);
    expect(res.body.errors.map((e: { path: string }) => e.path)).toContain(field);
    expect(await count()).toBe("0");
  });

  it("stores nothing of an array with one bad object, and names it by index", async () => {
    const body = Array.from({ length: 5 }, (_, i) => ({
      companyId,
      channel: "SMS",
      customerMessageId: `batch-${i}`,
      destination: i === 3 ? "nope" : "+351911111111",
    }));
    const res = await t.ingress.post("/messages", body);
    expectProblem(res, 400);
    expect(res.body.errors).toEqual([expect.objectContaining({ path: "[3].destination" })]);
    expect(await count()).toBe("0");
  });

  it("refuses an array of more than 1000 objects, and an empty one", async () => {
    const body = Array.from({ length: 1001 }, (_, i) => ({ companyId, channel: "SMS", customerMessageId: `big-${i}`, destination: "+351911111111" }));
    expectProblem(await t.ingress.post("/messages", body), 400);
    expectProblem(await t.ingress.post("/messages", []), 400);
    expect(await count()).toBe("0");
  });

  it("answers unknown paths 404, other methods 405, non-JSON 415 and malformed JSON 400, all as problems", async () => {
    expectProblem(await t.ingress.post("/receipts/telegram", {}), 404);
    expectProblem(await t.ingress.post("/reads/sms", {}), 404);
    expectProblem(await t.ingress.post("/nothing", {}), 404);
    const get = await t.ingress.get("/messages");
    expectProblem(get, 405);
    expect(get.headers.get("allow")).toBe("POST");
    expectProblem(await t.ingress.post("/messages", undefined, { raw: "a=b", headers: { "content-type": "application/x-www-form-urlencoded" } }), 415);
    expectProblem(await t.ingress.post("/messages", undefined, { raw: "{nope", headers: { "content-type": "application/json" } }), 400);
  });
});

describe("the ingress listener", () => {
  it("answers its own health probes (no token), with an X-Request-Id", async () => {
    const root = new Http(`http://127.0.0.1:${t.app.internalPort}`);
    const ready = await root.get("/healthz/ready");
    expect(ready.status).toBe(200);
    expect(ready.body).toEqual({ status: "ready", checks: { database: "ok" } });
    expect(ready.headers.get("x-request-id")).toBeTruthy();
    expect((await root.get("/healthz/live")).status).toBe(200);
    expectProblem(await root.post("/healthz/live", {}), 405);
  });

  it("serves Prometheus metrics: objects stored by path, grouped transactions, requests by route", async () => {
    const root = new Http(`http://127.0.0.1:${t.app.internalPort}`);
    const before = await root.get("/metrics");
    const count = (text: string, re: RegExp) => Number(re.exec(text)?.[1] ?? 0);
    const objects = /ingest_objects_total\{path="messages"\} (\d+)/;
    await t.ingress.post(
      "/messages",
      [1, 2, 3].map(() => ({ companyId: uid(), channel: "SMS", customerMessageId: mid(), destination: phone() })),
    );
    await t.ingress.post("/nowhere/at/all", {});
    const after = await root.get("/metrics");
    expect(after.status).toBe(200);
    expect(after.headers.get("content-type")).toMatch(/^text\/plain/);
    expect(count(after.text, objects) - count(before.text, objects)).toBe(3);
    expect(after.text).toMatch(/ingest_transaction_objects_count \d+/);
    expect(after.text).toMatch(/http_requests_total\{method="POST",route="\/internal\/v1\/messages",status="202"\} \d+/);
    expect(after.text).toMatch(/http_requests_total\{method="POST",route="unmatched",status="404"\} \d+/);
    expect(after.text).not.toMatch(/nowhere/);
  });

  it("is not the partner gateway: partner paths are unknown there, and the ingress is unknown on the gateway", async () => {
    const root = new Http(`http://127.0.0.1:${t.app.internalPort}`);
    expectProblem(await root.get("/api/partner-gateway/v1/messages/history"), 404);
    expectProblem(await t.root.post("/internal/v1/messages", { companyId: "x" }), 404);
  });
});

describe("X-Internal-Token", () => {
  let guarded: TestApp;
  beforeAll(async () => {
    guarded = await startTestApp({ services: ["tracking"], config: { internalToken: "s3cret-token-0123456789" } });
  });
  afterAll(() => guarded?.stop());

  it("refuses a missing or wrong token with 401 and stores nothing; the right one is accepted", async () => {
    const body = { companyId: "tok-co", channel: "SMS", customerMessageId: "t-1", destination: "+351911111111" };
    expectProblem(await guarded.ingress.post("/messages", body), 401);
    expectProblem(await guarded.ingress.post("/messages", body, { headers: { "x-internal-token": "s3cret-token-0123456780" } }), 401);
    const [before] = await guarded.db.sequelize.query<{ n: string }>(`SELECT count(*) AS n FROM messages`, { type: QueryTypes.SELECT });
    expect(before!.n).toBe("0");
    expect((await guarded.ingress.post("/messages", body, { headers: { "x-internal-token": "s3cret-token-0123456789" } })).status).toBe(202);
  });

  it("refuses a wrong token of any length and an empty one the same way", async () => {
    const body = { companyId: "tok-co", channel: "SMS", customerMessageId: "t-2", destination: "+351911111111" };
    for (const token of ["S3CRET-TOKEN-0123456789", "s3cret-token-012345678", "s3cret-token-01234567890", "x".repeat(4096), ""]) {
      const res = await guarded.ingress.post("/messages", body, { headers: { "x-internal-token": token } });
      expectProblem(res, 401);
    }
  });

  it("listens on 127.0.0.1 only when not in cluster mode", () => {
    const server = (guarded.app.broker.getLocalService("tracking") as unknown as { server: import("node:http").Server }).server;
    expect(guarded.config.internalHost).toBe("127.0.0.1");
    expect((server.address() as { address: string }).address).toBe("127.0.0.1");
  });
});
