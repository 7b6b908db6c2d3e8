/**
 * The product split over real NATS: two gateway nodes and an auth+contacts node, as operators run it
 * (SERVICES=gateway / SERVICES=auth,contacts). Proves that key rules, errors, meta and the request id
 * survive the wire, that deleting a key reaches every gateway replica before the 204, and that an
 * upload received by a gateway is pulled by the contacts node whole (gateway.uploadRange), and that what an upstream posts
 * to the ingress of the tracking node is polled through a gateway node.
 */
import type { Context } from "moleculer";
import { API_PREFIX } from "../../lib/http/api";
import { startTestApp, uid, type TestApp } from "../helpers/app";
import { createTestDatabase, describeOverNats, TEST_NATS_URL, type TestDatabase } from "../helpers/db";
import { messageIn, smsReceiptIn, receiptIn } from "../helpers/builders";
import { eventually } from "../helpers/eventually";
import { Http } from "../helpers/http";

/** Runs on the auth node: shows what arrived there. */
const probe = {
  name: "probe",
  settings: { rest: "/" },
  actions: {
    whoami: {
      rest: "GET /probe/whoami",
      operation: "AUTHENTICATION",
      responses: { 200: { type: "object" } },
      handler(this: { broker: { nodeID: string } }, ctx: Context<unknown, { companyId: string; keyId: string }>) {
        return { node: this.broker.nodeID, companyId: ctx.meta.companyId, keyId: ctx.meta.keyId, requestId: ctx.requestID };
      },
    },
  },
};

/** Every declared field arrived (the status schema reached the gateway whole). */
function expectNoWireHoles(status: Record<string, unknown>) {
  expect(Object.keys(status).sort()).toEqual([
    "channel",
    "customerMessageId",
    "deliveryDate",
    "deliveryStatus",
    "description",
    "destination",
    "readAt",
    "sentAt",
    "simulation",
    "statusCode",
  ]);
}

describeOverNats("cluster over NATS", () => {
  let tdb: TestDatabase;
  let authNode: TestApp;
  let gwA: TestApp;
  let gwB: TestApp;
  const namespace = uid("cluster");

  beforeAll(async () => {
    tdb = await createTestDatabase();
    const cluster = { transporter: TEST_NATS_URL, databaseUrl: tdb.db.url };
    authNode = await startTestApp({
      services: ["auth", "contacts", "tracking"],
      db: tdb.db,
      config: cluster,
      broker: { namespace, nodeID: `${namespace}-auth` },
      extraServices: [probe as never],
    });
    gwA = await startTestApp({ services: ["gateway"], db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-gw-a` } });
    gwB = await startTestApp({ services: ["gateway"], db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-gw-b` } });
    // The cluster is formed once every node knows every other: the auth node must know both gateways
    // (its key-deletion broadcast goes to the nodes it knows), each gateway the remote actions.
    await eventually(() => {
      const known = (authNode.app.broker.registry.getServiceList({ onlyAvailable: true }) as Array<{ name: string; nodeID: string }>).filter(
        (s) => s.name === "gateway",
      );
      expect(known).toHaveLength(2);
    });
    for (const gw of [gwA, gwB]) await eventually(async () => expect((await gw.api.get("/probe/whoami")).status).toBe(401));
  }, 60000);

  afterAll(async () => {
    await gwA?.stop();
    await gwB?.stop();
    await authNode?.stop();
    await tdb?.drop();
  });

  it("runs the services on separate nodes", () => {
    expect(gwA.app.broker.getLocalService("auth")).toBeFalsy();
    expect(authNode.app.broker.getLocalService("gateway")).toBeFalsy();
    expect(gwA.app.broker.transit?.connected).toBe(true);
  });

  it("carries the account, the key and the request id to the remote service", async () => {
    const a = await authNode.newAccount(["AUTHENTICATION"]);
    const res = await new Http(gwA.api.baseUrl, { "x-api-key": a.key.apiKey }).get("/probe/whoami", { headers: { "x-request-id": "cross-node-1" } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ node: `${namespace}-auth`, companyId: a.companyId, keyId: a.key.id, requestId: "cross-node-1" });
  });

  it("applies the key rules across nodes: 201, 403, 400 and 404 as problems", async () => {
    const a = await authNode.newAccount(["AUTHENTICATION", "SMS"]);
    const b = await authNode.newAccount(["AUTHENTICATION"]);
    const api = new Http(gwA.api.baseUrl, { "x-api-key": a.key.apiKey });
    const created = await api.post("/authentication", { operations: ["SMS"] });
    expect(created.status).toBe(201);
    expect(created.body.apiKey).toMatch(/^pgw_/);
    const forbidden = await api.post("/authentication", { operations: ["RCS"] });
    expect(forbidden.status).toBe(403);
    expect(forbidden.body).toMatchObject({ status: 403, type: "/docs#problem-key-scope-exceeded", requestId: forbidden.headers.get("x-request-id") });
    const invalid = await api.post("/authentication", { operations: [] });
    expect(invalid.status).toBe(400);
    expect(invalid.body.errors).toEqual([{ path: "operations", message: expect.any(String) }]);
    const foreign = await api.delete(`/authentication/${b.key.id}`);
    expect(foreign.status).toBe(404);
    expect(foreign.headers.get("content-type")).toMatch(/problem\+json/);
  });

  it("refuses a deleted key on the very next request at every gateway replica", async () => {
    const a = await authNode.newAccount(["AUTHENTICATION"]);
    const owner = new Http(gwA.api.baseUrl, { "x-api-key": a.key.apiKey });
    for (let round = 0; round < 5; round++) {
      const created = await owner.post("/authentication", { operations: ["AUTHENTICATION"] });
      const viaA = new Http(gwA.api.baseUrl, { "x-api-key": created.body.apiKey });
      const viaB = new Http(gwB.api.baseUrl, { "x-api-key": created.body.apiKey });
      // Both replicas have the key cached now.
      expect((await viaA.get("/authentication/me")).status).toBe(200);
      expect((await viaB.get("/authentication/me")).status).toBe(200);
      expect((await owner.delete(`/authentication/${created.body.id}`)).status).toBe(204);
      expect((await viaB.get("/authentication/me")).status).toBe(401);
      expect((await viaA.get("/authentication/me")).status).toBe(401);
    }
  });

  it("serves the OpenAPI document of the remote services from either gateway", async () => {
    const doc = await new Http(`http://127.0.0.1:${gwB.app.port}${API_PREFIX}`).get("/openapi.json");
    expect(Object.keys(doc.body.paths)).toEqual(expect.arrayContaining(["/authentication", "/authentication/me", "/authentication/{id}"]));
  });

  it("pulls an upload from the gateway node to the contacts node and imports it there", async () => {
    const a = await authNode.newAccount(["CONTACTS"]);
    const api = new Http(gwB.api.baseUrl, { "x-api-key": a.key.apiKey });
    // Several MiB: many ranges over NATS, and more than one import batch.
    const lines = ["email,firstName,lastName"];
    for (let i = 0; i < 30000; i++) lines.push(`n${i}@cluster.example,First${i}${"x".repeat(80)},Last${i}${"y".repeat(80)}`);
    const file = new FormData();
    file.append("file", new Blob([lines.join("\n") + "\n"]), "cluster.csv");
    const res = await api.request("POST", "/contacts/upload", { form: file });
    expect(res.status).toBe(202);
    const done = await eventually(
      async () => {
        const body = (await api.get(`/contacts/imports/${res.body.importId}`)).body;
        expect(["COMPLETED", "FAILED"]).toContain(body.status);
        return body;
      },
      { timeoutMs: 45_000 },
    );
    expect(done).toMatchObject({ status: "COMPLETED", totalRows: 30000, created: 30000, skipped: 0 });
    expect((await api.get("/contacts?email=n29999@cluster.example")).body.data[0].firstName).toMatch(/^First29999x/);
    const refused = await api.request("POST", "/contacts/upload", {
      form: ((f) => (f.append("file", new Blob(["email\nx@y.pt\n"]), "a.csv"), f.append("listId", "999999"), f))(new FormData()),
    });
    expect(refused.status).toBe(400);
    expect(refused.body.errors).toEqual([expect.objectContaining({ path: "listId" })]);
  }, 60000);

  it("stores what an upstream posts to the tracking node's ingress and answers it through a gateway node", async () => {
    const a = await authNode.newAccount(["SMS", "RCS", "CONTACTS"]);
    const api = new Http(gwA.api.baseUrl, { "x-api-key": a.key.apiKey });
    const contact = await api.post("/contacts", { phoneNumber: "+351919999001" });
    expect(contact.status).toBe(201);
    const post = (path: string, body: unknown) => authNode.ingress.post(path, body).then((r) => expect(r.status).toBe(202));
    const sms = messageIn(a.companyId, { customerMessageId: "c-1", destination: "+351919999001", totalParts: 2 });
    const rcs = messageIn(a.companyId, { channel: "RCS", customerMessageId: "c-2", destination: "+351919999001" });
    await post("/messages", [sms, rcs]);
    await post("/receipts/sms", smsReceiptIn(sms, { DELIVERY_DATE: "2026-11-20T10:00:00Z", TOTAL_PARTS: 2, NUM_PART: 2 }));
    await post("/receipts/rcs", receiptIn(rcs, { eventDate: "2026-11-20T10:00:01Z" }));
    const bulk = await api.get("/messages/status?channel=SMS&ids=c-1,nope");
    expect(bulk.body.data.map((x: { deliveryStatus: string }) => x.deliveryStatus)).toEqual(["ACCEPTED", "UNKNOWN"]);
    expect((await api.get("/messages/status/c-2?channel=RCS")).body).toMatchObject({ deliveryStatus: "DELIVERED", deliveryDate: "2026-11-20T10:00:01.000Z" });
    const history = await api.get("/messages/history?limit=1");
    expect(history.body.data).toHaveLength(1);
    const next = await new Http(gwB.api.baseUrl, { "x-api-key": a.key.apiKey }).get(`/messages/history?limit=1&cursor=${history.body.nextCursor}`);
    expect(next.body.data).toHaveLength(1);
    expect(next.body.nextCursor).toBeNull();
    expectNoWireHoles(bulk.body.data[0]);
    // The contact gains RCS (the contacts node follows tracking's status feed, woken by its broadcast).
    await eventually(async () => expect((await api.get(`/contacts/${contact.body.id}`)).body.communicationSupported).toContain("RCS"), { timeoutMs: 30_000 });
  }, 60000);
});
