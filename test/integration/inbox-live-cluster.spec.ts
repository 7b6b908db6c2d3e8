/**
 * The inbox's live view over real NATS, as operators run it: the inbox and tracking on one node, two
 * gateways (A with auth, B alone). An event stored on the inbox node (or a reply's status folded by
 * tracking there) reaches a stream held open on either gateway, woken by the inbox.eventsWritten
 * broadcast and read from the database through inbox.eventsSince across the wire; a client that
 * leaves gateway A resumes on gateway B with Last-Event-ID and loses nothing.
 */
import { randomUUID } from "node:crypto";
import { appendInboxEvents, announceInboxEvents, type InboxEvent } from "../../services/inbox/inbox.events";
import type { InboxEventType } from "../../services/inbox/inbox.contract";
import { startTestApp, uid, type Account, type TestApp } from "../helpers/app";
import { inboundIn, receiptIn } from "../helpers/builders";
import { createTestDatabase, describeOverNats, TEST_NATS_URL, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";
import { SseClient } from "../helpers/sse";

describeOverNats("inbox live view over NATS", () => {
  let tdb: TestDatabase;
  let inbox: TestApp;
  let gatewayA: TestApp;
  let gatewayB: TestApp;
  const namespace = uid("live");
  const open: SseClient[] = [];

  beforeAll(async () => {
    tdb = await createTestDatabase();
    const cluster = { transporter: TEST_NATS_URL, databaseUrl: tdb.db.url, internalTokenDisabled: true };
    inbox = await startTestApp({ services: ["inbox", "tracking"], db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-inbox` } });
    gatewayA = await startTestApp({ services: ["gateway", "auth"], db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-gwa` } });
    gatewayB = await startTestApp({ services: ["gateway"], db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-gwb` } });
    // Both gateways have the inbox's routes (401 without a key, not 404).
    for (const gw of [gatewayA, gatewayB]) await eventually(async () => expect((await gw.api.get("/inbox/events")).status).toBe(401));
    // The inbox node knows both gateways (and so their inbox.eventsWritten listeners) before its first broadcast.
    const gatewayNodes = () =>
      (inbox.app.broker.registry.getServiceList({ onlyAvailable: true }) as Array<{ name: string; nodeID: string }>)
        .filter((s) => s.name === "gateway")
        .map((s) => s.nodeID)
        .sort();
    await eventually(() => expect(gatewayNodes()).toEqual([`${namespace}-gwa`, `${namespace}-gwb`]));
  }, 60_000);

  afterEach(() => {
    for (const c of open.splice(0)) c.close();
  });

  afterAll(async () => {
    await gatewayB?.stop();
    await gatewayA?.stop();
    await inbox?.stop();
    await tdb?.drop();
  });

  const stream = async (gw: TestApp, a: Account, path: string, headers: Record<string, string> = {}) => {
    const c = await SseClient.open(`${gw.api.baseUrl}${path}`, { "x-api-key": a.key.apiKey, ...headers });
    open.push(c);
    return c;
  };

  async function conversation(a: Account): Promise<string> {
    const id = randomUUID();
    await tdb.db.sequelize.query(
      `INSERT INTO conversations (id, company_id, channel, sender_id, contact_number, last_message_at, last_inbound_at)
       VALUES ($1, $2, 'WHATSAPP', '+351210000000', $3, now(), now())`,
      { bind: [id, a.companyId, `+3519${Math.floor(Math.random() * 1e8)}`] },
    );
    return id;
  }

  /** Stored on the inbox node: the rows in a transaction, the broadcast from that node. */
  async function write(a: Account, chatId: string, ...types: InboxEventType[]): Promise<void> {
    const events: InboxEvent[] = types.map((type) => ({ companyId: a.companyId, conversationId: chatId, type, data: { type } }));
    await tdb.db.sequelize.transaction((tx) => appendInboxEvents(tdb.db.sequelize, tx, events));
    announceInboxEvents(inbox.app.broker, events);
  }

  it("delivers an event stored on the inbox node to streams on both gateways, and a reply's status folded by tracking to gateway B", async () => {
    const a = await gatewayA.newAccount(["INBOX"]);
    const chat = await conversation(a);
    const onA = await stream(gatewayA, a, "/inbox/events");
    const onB = await stream(gatewayB, a, `/inbox/conversations/${chat}/events`);
    expect([onA.status, onB.status]).toEqual([200, 200]);
    const started = Date.now();
    await write(a, chat, "message.created");
    const [ea] = await onA.waitForEvents(1);
    const [eb] = await onB.waitForEvents(1);
    // Woken by the broadcast, not found by the 5 s safety poll (room for a loaded CI machine).
    expect(Date.now() - started).toBeLessThan(3500);
    expect(eb).toEqual(ea);
    expect(eb).toMatchObject({ event: "message.created", json: { chatId: chat } });

    const reply = { companyId: a.companyId, customerMessageId: `reply-${randomUUID()}`, destination: "+351912345678" };
    await tdb.db.sequelize.query(
      `INSERT INTO conversation_messages (id, company_id, conversation_id, channel, direction, message_id, message_type, text)
       VALUES ($1, $2, $3, 'WHATSAPP', 'OUTBOUND', $4, 'TEXT', 'hello')`,
      { bind: [randomUUID(), a.companyId, chat, reply.customerMessageId] },
    );
    expect((await inbox.ingress.post("/messages", { ...reply, channel: "WHATSAPP" })).status).toBe(202);
    expect((await inbox.ingress.post("/receipts/whatsapp", receiptIn(reply))).status).toBe(202);
    const [, status] = await onB.waitForEvents(2);
    expect(status).toMatchObject({ event: "message.status", json: { chatId: chat, deliveryStatus: "DELIVERED" } });
  });

  it("streams on gateway B an inbound message the ingress on the inbox node handed to inbox.ingest", async () => {
    const a = await gatewayA.newAccount(["INBOX"]);
    const onB = await stream(gatewayB, a, "/inbox/events");
    expect((await inbox.ingress.post("/inbound/whatsapp", inboundIn(a.companyId, { text: "over the wire" }))).status).toBe(202);
    const [e] = await onB.waitForEvents(1);
    expect(e).toMatchObject({ event: "message.created", json: { direction: "INBOUND", text: "over the wire", chatId: expect.any(String) } });
  });

  it("answers 404 for another account's conversation on the gateway without auth (the key verified across the wire)", async () => {
    const a = await gatewayA.newAccount(["INBOX"]);
    const b = await gatewayA.newAccount(["INBOX"]);
    const chat = await conversation(a);
    expectProblem(await gatewayB.api.get(`/inbox/conversations/${chat}/events`, { headers: { "x-api-key": b.key.apiKey } }), 404);
  });

  it("resumes on gateway B with Last-Event-ID from where the client left gateway A", async () => {
    const a = await gatewayA.newAccount(["INBOX"]);
    const chat = await conversation(a);
    const onA = await stream(gatewayA, a, "/inbox/events");
    await write(a, chat, "message.created");
    const [seen] = await onA.waitForEvents(1);
    onA.close();
    await write(a, chat, "conversation.read", "conversation.archived");
    const onB = await stream(gatewayB, a, "/inbox/events", { "last-event-id": seen!.id! });
    expect((await onB.waitForEvents(2)).map((e) => e.event)).toEqual(["conversation.read", "conversation.archived"]);
    await write(a, chat, "conversation.unarchived");
    expect((await onB.waitForEvents(3))[2]!.event).toBe("conversation.unarchived");
  });
});
