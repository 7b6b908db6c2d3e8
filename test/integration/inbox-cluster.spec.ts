/**
 * The inbox on a node of its own over real NATS, as k8s/base/inbox.yaml runs it: tracking's ingress
 * (another node) stores inbound messages in its inbound feed, which the inbox node follows, the gateway (a third node)
 * reaches its actions, problems cross as problems, a reply leaves through the simulator (a fourth
 * node) and comes back DELIVERED; with no inbox node left the ingress still takes inbound messages
 * (tracking's inbound feed) and the next inbox node stores them.
 */
import { QueryTypes } from "sequelize";
import { inboxFollowed, startTestApp, uid, type Account, type TestApp, type TestAppOptions } from "../helpers/app";
import { inboundIn } from "../helpers/builders";
import { createTestDatabase, describeOverNats, TEST_NATS_URL, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";

describeOverNats("inbox over NATS", () => {
  let tdb: TestDatabase;
  let gw: TestApp;
  let tracker: TestApp;
  let inbox: TestApp | null;
  let sim: TestApp;
  let a: Account;
  const namespace = uid("inbox");

  let cluster: NonNullable<TestAppOptions["config"]>;

  beforeAll(async () => {
    tdb = await createTestDatabase();
    cluster = {
      transporter: TEST_NATS_URL,
      databaseUrl: tdb.db.url,
      internalTokenDisabled: true,
      simulatorProfile: "all-delivered" as const,
      simulatorMaxDelayMs: 100,
    };
    const node = (services: TestAppOptions["services"], name: string) =>
      startTestApp({ services, db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-${name}` } });
    gw = await node(["gateway", "auth"], "gw");
    tracker = await node(["tracking"], "tracking");
    inbox = await node(["inbox"], "inbox");
    sim = await node(["simulator"], "sim");
    await eventually(() => {
      const names = (gw.app.broker.registry.getServiceList({ onlyAvailable: true }) as Array<{ name: string }>).map((s) => s.name);
      for (const s of ["inbox", "tracking", "simulator"]) expect(names).toContain(s);
    });
    a = await gw.newAccount(["INBOX", "RCS", "WHATSAPP"]);
    await eventually(async () => expect((await a.api.get("/inbox/conversations")).status).toBe(200));
  }, 60_000);

  afterAll(async () => {
    await sim?.stop();
    await inbox?.stop();
    await tracker?.stop();
    await gw?.stop();
    await tdb?.drop();
  });

  it("stores inbound messages posted to the ingress on another node, and serves them through a gateway on a third", async () => {
    expect(tracker.app.broker.getLocalService("inbox")).toBeFalsy();
    const body = inboundIn(a.companyId, { text: "over the wire" });
    expect((await tracker.ingress.post("/inbound/whatsapp", [body])).status).toBe(202);
    await inboxFollowed(tdb.db);
    const list = await a.api.get(`/inbox/conversations?search=${encodeURIComponent(body.source)}`);
    expect(list.body.data).toEqual([expect.objectContaining({ contactNumber: body.source, unreadCount: 1, lastMessagePreview: "over the wire" })]);
    const chatId = list.body.data[0].chatId as string;

    const b = await gw.newAccount(["INBOX"]);
    expectProblem(await b.api.get(`/inbox/conversations/${chatId}`), 404);
    const bad = await a.api.post(`/inbox/conversations/${chatId}/messages`, { text: "x", mediaId: "00000000-0000-4000-8000-000000000000" });
    expectProblem(bad, 400);

    const reply = await a.api.post(`/inbox/conversations/${chatId}/messages`, { text: "answered from another node" });
    expect(reply.status).toBe(202);
    await eventually(async () => {
      const thread = await a.api.get(`/inbox/conversations/${chatId}/messages`);
      expect(thread.body.data.find((m: { id: string }) => m.id === reply.body.id)).toMatchObject({ deliveryStatus: "DELIVERED" });
    });
    expect((await a.api.request("PATCH", `/conversations/${chatId}/unarchive`)).status).toBe(204);
  }, 30_000);

  it("accepts inbound messages while no inbox node is left, and an inbox node stores them once one is back", async () => {
    await inbox!.stop();
    inbox = null;
    const body = inboundIn(a.companyId, { text: "while nobody listened" });
    expect((await tracker.ingress.post("/inbound/whatsapp", body)).status).toBe(202);
    const stored = () =>
      tdb.db.sequelize.query(`SELECT text FROM conversation_messages WHERE company_id = $1 AND message_id = $2`, {
        bind: [a.companyId, body.messageId],
        type: QueryTypes.SELECT,
      });
    await new Promise((r) => setTimeout(r, 300));
    expect(await stored()).toEqual([]);
    inbox = await startTestApp({ services: ["inbox"], db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-inbox-2` } });
    await eventually(async () => expect(await stored()).toEqual([{ text: "while nobody listened" }]), { timeoutMs: 15_000 });
  }, 30_000);
});
