/**
 * Large bodies and answers over the real NATS (its max_payload, 1 MiB by default): a request whose
 * honest error would name thousands of ids answers a bounded 400, and an answer larger than the bus
 * takes fails that one call with a 500 problem; every node keeps running and answering.
 */
import { randomUUID } from "node:crypto";
import { ApiError } from "../../lib/errors";
import { startTestApp, uid, type TestApp } from "../helpers/app";
import { createTestDatabase, describeOverNats, TEST_NATS_URL, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { Http } from "../helpers/http";

/** Runs on the contacts node: answers as many bytes as asked (more than the bus takes, say). */
const oversized = {
  name: "oversized",
  settings: { rest: "/" },
  actions: {
    answer: {
      rest: "GET /oversized/:bytes",
      operation: "AUTHENTICATION",
      responses: { 200: { type: "object" } },
      handler(ctx: { params: { bytes: string } }) {
        return { text: "x".repeat(Number(ctx.params.bytes)) };
      },
    },
    /** An error answer as large as asked: once, one of these ended the process that failed to send it. */
    fail: {
      rest: "GET /oversized/:bytes/error",
      operation: "AUTHENTICATION",
      responses: { 200: { type: "object" } },
      handler(ctx: { params: { bytes: string } }) {
        const errors = Array.from({ length: Math.ceil(Number(ctx.params.bytes) / 100) }, (_, i) => ({ path: `ids[${i}]`, message: "x".repeat(80) }));
        throw new ApiError("VALIDATION_ERROR", "Too many problems.", { errors });
      },
    },
  },
};

describeOverNats("payloads over NATS", () => {
  let tdb: TestDatabase;
  let backend: TestApp;
  let gw: TestApp;
  const namespace = uid("payload");

  beforeAll(async () => {
    tdb = await createTestDatabase();
    const cluster = { transporter: TEST_NATS_URL, databaseUrl: tdb.db.url, internalToken: "payload-test-token-0123" };
    backend = await startTestApp({
      services: ["auth", "contacts"],
      db: tdb.db,
      config: cluster,
      broker: { namespace, nodeID: `${namespace}-backend` },
      extraServices: [oversized as never],
    });
    gw = await startTestApp({ services: ["gateway"], db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-gw` } });
    await eventually(async () => expect((await gw.api.get("/oversized/1")).status).toBe(401));
  }, 60000);

  afterAll(async () => {
    await gw?.stop();
    await backend?.stop();
    await tdb?.drop();
  });

  /** A client of the gateway node with a new account's key (the account is made on the backend's database). */
  async function account() {
    const a = await backend.newAccount(["CONTACTS", "AUTHENTICATION"]);
    return { api: new Http(gw.api.baseUrl, { "x-api-key": a.key.apiKey }) };
  }

  /** Both nodes still answer a call that crosses the bus. */
  async function expectAlive(a: { api: Http }) {
    expect(backend.app.broker.transit?.connected).toBe(true);
    expect(gw.app.broker.transit?.connected).toBe(true);
    const res = await a.api.get("/contacts/list");
    expect(res.status).toBe(200);
  }

  it("names the first 100 unknown contacts of 10,000 and counts the rest; 20,000 ids are refused as too many", async () => {
    const a = await account();
    const list = await a.api.post("/contacts/list", { name: "Big" });
    expect(list.status).toBe(201);
    const ids = Array.from({ length: 10000 }, () => randomUUID());
    const res = await a.api.post("/contacts/list/contacts", { listIds: [list.body.id], contactIds: ids });
    expect(res.status).toBe(400);
    expect(res.body.errors).toHaveLength(100);
    expect(res.body.errors[0]).toEqual({ path: "contactIds", message: `contact ${ids[0]} does not exist in this account` });
    expect(res.body.errorsNotShown).toBe(9900);
    expect(res.body.detail).toMatch(/10000 lists or contacts do not exist.*9900 more/);
    expect(JSON.stringify(res.body).length).toBeLessThan(20000);

    const tooMany = await a.api.post("/contacts/list/contacts", { listIds: [list.body.id], contactIds: [...ids, ...ids.map(() => randomUUID())] });
    expect(tooMany.status).toBe(400);
    expect(JSON.stringify(tooMany.body).length).toBeLessThan(20000);
    await expectAlive(a);
  }, 60000);

  it("fails an answer (or an error) larger than the bus's max_payload with a 500 problem, and the node keeps answering", async () => {
    const a = await account();
    const res = await a.api.get(`/oversized/${2 * 1024 * 1024}`);
    expect(res.status).toBe(500);
    expect(res.headers.get("content-type")).toMatch(/problem\+json/);
    expect(res.body).toMatchObject({ status: 500 });
    const failed = await a.api.get(`/oversized/${2 * 1024 * 1024}/error`);
    expect(failed.status).toBe(500);
    expect(failed.body).toMatchObject({ status: 500 });
    // Well under the limit still crosses; the node that failed to answer is alive.
    expect((await a.api.get("/oversized/1000")).status).toBe(200);
    await expectAlive(a);
  }, 60000);
});
