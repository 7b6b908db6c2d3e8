/**
 * Opt-outs across nodes over real NATS, as k8s/base runs them (contacts, inbox and tracking each on
 * a node of its own): a STOP posted to tracking's ingress is recorded at contacts.applyOptOuts on
 * the contacts node before the ingress stores the message in its inbound feed, which the inbox node follows;
 * an upstream report travels from tracking to contacts; the gateway (a fourth node) lists them and
 * a reply to the number is a 409 recipient-opted-out problem across the wire. With no contacts node
 * left, a keyword message is a 503 to retry (nothing stored), and the retry succeeds once one is back.
 */
import { inboxFollowed, startTestApp, uid, type Account, type TestApp, type TestAppOptions } from "../helpers/app";
import { inboundIn, phone } from "../helpers/builders";
import { createTestDatabase, describeOverNats, TEST_NATS_URL, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";

describeOverNats("opt-outs over NATS", () => {
  let tdb: TestDatabase;
  let gw: TestApp;
  let tracker: TestApp;
  let inbox: TestApp;
  let contacts: TestApp | null;
  let a: Account;
  const namespace = uid("optouts");
  let node: (services: TestAppOptions["services"], name: string) => Promise<TestApp>;
  const serviceNames = (app: TestApp) => (app.app.broker.registry.getServiceList({ onlyAvailable: true }) as Array<{ name: string }>).map((s) => s.name);

  beforeAll(async () => {
    tdb = await createTestDatabase();
    const cluster = { transporter: TEST_NATS_URL, databaseUrl: tdb.db.url, internalTokenDisabled: true };
    node = (services, name) => startTestApp({ services, db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-${name}` } });
    gw = await node(["gateway", "auth"], "gw");
    tracker = await node(["tracking"], "tracking");
    inbox = await node(["inbox"], "inbox");
    contacts = await node(["contacts"], "contacts");
    await eventually(() => {
      for (const s of ["inbox", "contacts"]) expect(serviceNames(tracker)).toContain(s);
      expect(serviceNames(inbox)).toContain("contacts");
      for (const s of ["inbox", "contacts", "tracking"]) expect(serviceNames(gw)).toContain(s);
    });
    a = await gw.newAccount(["CONTACTS", "INBOX", "WHATSAPP"]);
    await eventually(async () => expect((await a.api.get("/contacts/opt-outs")).status).toBe(200));
  }, 60_000);

  afterAll(async () => {
    await contacts?.stop();
    await inbox?.stop();
    await tracker?.stop();
    await gw?.stop();
    await tdb?.drop();
  });

  it("records a STOP through the ingress, the inbox node and the contacts node, and refuses a reply to it with 409", async () => {
    expect(inbox.app.broker.getLocalService("contacts")).toBeFalsy();
    const n = phone();
    const stop = inboundIn(a.companyId, { source: n, text: "STOP" });
    expect((await tracker.ingress.post("/inbound/whatsapp", stop)).status).toBe(202);
    await inboxFollowed(tdb.db);
    const listed = await a.api.get(`/contacts/opt-outs?phoneNumber=${encodeURIComponent(n)}`);
    expect(listed.body.data).toEqual([expect.objectContaining({ channel: "WHATSAPP", phoneNumber: n, source: "KEYWORD" })]);

    const chats = await a.api.get(`/inbox/conversations?search=${encodeURIComponent(n)}`);
    expect(chats.body.data).toEqual([expect.objectContaining({ lastMessagePreview: "STOP" })]);
    const refused = await a.api.post(`/inbox/conversations/${chats.body.data[0].chatId}/messages`, { text: "sure?" });
    expectProblem(refused, 409);
    expect(refused.body.type).toBe("/docs#problem-recipient-opted-out");

    const reported = phone();
    const report = { companyId: a.companyId, channel: "SMS", phoneNumber: reported, action: "OPT_OUT", at: new Date().toISOString() };
    expect((await tracker.ingress.post("/opt-outs", [report])).status).toBe(202);
    expect((await a.api.get(`/contacts/opt-outs?phoneNumber=${encodeURIComponent(reported)}`)).body.data).toEqual([
      expect.objectContaining({ channel: "SMS", source: "UPSTREAM" }),
    ]);
  }, 30_000);

  it("answers 503 to a keyword message while no contacts node is left, storing nothing, and takes it again once one is back", async () => {
    await contacts!.stop();
    contacts = null;
    const n = phone();
    const stop = inboundIn(a.companyId, { source: n, text: "unsubscribe" });
    await eventually(
      async () => {
        const res = await tracker.ingress.post("/inbound/rcs", stop);
        expectProblem(res, 503);
        expect(res.headers.get("retry-after")).toBe("5");
      },
      { timeoutMs: 15_000 },
    );
    expect((await a.api.get(`/inbox/conversations?status=ALL&search=${encodeURIComponent(n)}`)).body.total).toBe(0);
    // Other messages are still taken.
    expect((await tracker.ingress.post("/inbound/rcs", inboundIn(a.companyId, { text: "hello" }))).status).toBe(202);

    contacts = await node(["contacts"], "contacts-2");
    await eventually(async () => expect((await tracker.ingress.post("/inbound/rcs", stop)).status).toBe(202), { timeoutMs: 15_000 });
    // The gateway routes contacts again once it has seen the new node.
    await eventually(async () =>
      expect((await a.api.get(`/contacts/opt-outs?phoneNumber=${encodeURIComponent(n)}`)).body.data).toEqual([
        expect.objectContaining({ channel: "RCS", source: "KEYWORD" }),
      ]),
    );
    await inboxFollowed(tdb.db);
    expect((await a.api.get(`/inbox/conversations?status=ALL&search=${encodeURIComponent(n)}`)).body.data).toEqual([
      expect.objectContaining({ lastMessagePreview: "unsubscribe", unreadCount: 1 }),
    ]);
  }, 60_000);
});
