/**
 * Signed webhooks across nodes over the real NATS, as operators run them (k8s/base/notifier.yaml):
 * the gateway, auth and tracking on one node, the notifier on others sharing SECRETS_KEY. The secret
 * made and sealed by one notifier node signs what another delivers, and an event whose first
 * attempt failed on one notifier keeps its webhook-id when another makes the retry; every delivery
 * verified with the `standardwebhooks` library, as a partner's receiver would.
 */
import type { IncomingMessage } from "node:http";
import { Webhook } from "standardwebhooks";
import { startTestApp, uid, type TestApp } from "../helpers/app";
import { messageIn, smsReceiptIn } from "../helpers/builders";
import { createTestDatabase, describeOverNats, TEST_NATS_URL, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { startReceiver, testCa, type Receiver } from "../helpers/receiver";

describeOverNats("signed webhooks over NATS", () => {
  let tdb: TestDatabase;
  let gw: TestApp;
  const notifiers: TestApp[] = [];
  let r: Receiver;
  const requests: { body: string; headers: IncomingMessage["headers"] }[] = [];
  const namespace = uid("signing");

  async function notifier(n: number): Promise<TestApp> {
    const ca = await testCa();
    const node = await startTestApp({
      services: ["notifier"],
      db: tdb.db,
      config: {
        transporter: TEST_NATS_URL,
        databaseUrl: tdb.db.url,
        webhookAllowPrivateTargets: true,
        extraCaCerts: ca.file,
        notifierRetryDelaySmsMs: 1500,
        notifierPollMs: 50,
      },
      broker: { namespace, nodeID: `${namespace}-n${n}` },
    });
    notifiers.push(node);
    await eventually(() => {
      const services = gw.app.broker.registry.getServiceList({ onlyAvailable: true }) as Array<{ name: string; nodeID: string }>;
      expect(services.some((s) => s.name === "notifier" && s.nodeID === `${namespace}-n${n}`)).toBe(true);
    });
    // Served through the gateway once it has the node's routes (an account without a webhook: 404).
    const probe = await gw.newAccount(["WEBHOOKS"]);
    await eventually(async () => expect((await probe.api.get("/webhooks/delivery-status")).status).toBe(404));
    return node;
  }

  beforeAll(async () => {
    tdb = await createTestDatabase();
    gw = await startTestApp({
      services: ["gateway", "auth", "tracking"],
      db: tdb.db,
      config: { transporter: TEST_NATS_URL, databaseUrl: tdb.db.url },
      broker: { namespace, nodeID: `${namespace}-gw` },
    });
    r = await startReceiver();
    r.behave((req, n, body) => {
      requests.push({ body, headers: req.headers });
      return { status: n === 1 ? 500 : 200 };
    });
  }, 60_000);

  afterAll(async () => {
    for (const n of notifiers) await n.stop();
    await gw?.stop();
    await r?.close();
    await tdb?.drop();
  });

  it("delivers from one notifier a retry of what another attempted, the same webhook-id, both verified by standardwebhooks", async () => {
    const first = await notifier(1);
    const a = await gw.newAccount(["WEBHOOKS", "SMS"]);
    // Registered through the gateway: the secret is made and sealed on the notifier node.
    const res = await a.api.post("/webhooks/delivery-status", { callbackUrl: r.url(), signed: true });
    expect(res.status).toBe(201);
    const secret = res.body.signingSecret as string;
    expect(gw.app.broker.getLocalService("notifier")).toBeFalsy();

    const m = messageIn(a.companyId);
    expect((await gw.ingress.post("/messages", m)).status).toBe(202);
    expect((await gw.ingress.post("/receipts/sms", smsReceiptIn(m))).status).toBe(202);
    // The first attempt (answered 500) by notifier 1; its outcome written, then notifier 1 goes.
    await eventually(async () => {
      const log = await a.api.get("/webhooks/delivery-status/attempts");
      expect(log.body.data).toMatchObject([{ attempt: 1, outcome: "RETRYING" }]);
    });
    await first.stop();
    notifiers.splice(notifiers.indexOf(first), 1);

    // The retry by notifier 2, which never saw the secret being made.
    await notifier(2);
    await r.waitFor(1, 30_000);
    expect(requests).toHaveLength(2);
    const verifier = new Webhook(secret);
    const [one, two] = requests.map((q) => ({ payload: verifier.verify(q.body, q.headers as Record<string, string>), id: q.headers["webhook-id"] }));
    expect(two!.payload).toEqual(one!.payload);
    expect(two!.payload).toMatchObject({ eventType: "DELIVERY", messageId: m.customerMessageId });
    expect(two!.id).toBe(one!.id);
    // The receiver has the request before notifier 2 has written its outcome.
    await eventually(async () => {
      const log = await a.api.get("/webhooks/delivery-status/attempts");
      expect(log.body.data.map((x: { attempt: number; outcome: string }) => [x.attempt, x.outcome])).toEqual([
        [2, "DELIVERED"],
        [1, "RETRYING"],
      ]);
    });
  }, 60_000);
});
