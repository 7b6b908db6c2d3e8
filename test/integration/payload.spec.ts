/**
 * Large bodies and answers over the real NATS (its max_payload, 1 MiB by default): a request whose
 * honest error would name thousands of ids answers a bounded 400, pages of any size cross (as
 * streams of chunks under the limit, lib/bus/large-answers.ts), and any other answer larger than the
 * bus takes fails that one call with a 500 problem (nothing is framed in parts); every node keeps
 * running and answering.
 */
import { randomUUID } from "node:crypto";
import { ApiError } from "../../lib/errors";
import { startTestApp, uid, type TestApp } from "../helpers/app";
import { createTestDatabase, describeOverNats, TEST_NATS_URL, type TestDatabase } from "../helpers/db";
import { messageIn } from "../helpers/builders";
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
    /** A page of rows of 1000 characters, as many as asked: pages cross whatever their size. */
    page: {
      rest: "GET /oversized/:rows/page",
      operation: "AUTHENTICATION",
      responses: { 200: { type: "object" } },
      handler(ctx: { params: { rows: string } }) {
        return { data: Array.from({ length: Number(ctx.params.rows) }, (_, i) => ({ i, text: "p".repeat(1000) })), next: null };
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

const TOKEN = "payload-test-token-0123";

describeOverNats("payloads over NATS", () => {
  let tdb: TestDatabase;
  let backend: TestApp;
  let gw: TestApp;
  let tracker: TestApp;
  let limited: TestApp;
  const namespace = uid("payload");

  beforeAll(async () => {
    tdb = await createTestDatabase();
    const cluster = { transporter: TEST_NATS_URL, databaseUrl: tdb.db.url, internalToken: TOKEN, rateLimitRps: 100000 };
    backend = await startTestApp({ services: ["auth", "contacts"], db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-backend` } });
    // A node of the test action only.
    limited = await startTestApp({
      services: [],
      db: tdb.db,
      config: cluster,
      broker: { namespace, nodeID: `${namespace}-limited` },
      extraServices: [oversized as never],
    });
    tracker = await startTestApp({ services: ["tracking"], db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-tracker` } });
    gw = await startTestApp({ services: ["gateway"], db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-gw` } });
    await eventually(async () => expect((await gw.api.get("/oversized/1")).status).toBe(401));
  }, 60000);

  afterAll(async () => {
    await gw?.stop();
    await backend?.stop();
    await tracker?.stop();
    await limited?.stop();
    await tdb?.drop();
  });

  /** A client of the gateway node with a new account's key (the account is made on the backend's database). */
  async function account() {
    const a = await backend.newAccount(["CONTACTS", "AUTHENTICATION", "SMS"]);
    return { companyId: a.companyId, api: new Http(gw.api.baseUrl, { "x-api-key": a.key.apiKey }) };
  }

  /** Both nodes still answer a call that crosses the bus. */
  async function expectAlive(a: { api: Http }) {
    expect(backend.app.broker.transit?.connected).toBe(true);
    expect(gw.app.broker.transit?.connected).toBe(true);
    expect(tracker.app.broker.transit?.connected).toBe(true);
    expect(limited.app.broker.transit?.connected).toBe(true);
    expect((await a.api.get("/oversized/10")).status).toBe(200);
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
    expect(res.body.errorsNotShown).toBeGreaterThanOrEqual(9900);
    expect(res.body.detail).toMatch(/10000 lists or contacts do not exist.*9900 more/);
    expect(JSON.stringify(res.body).length).toBeLessThan(20000);

    const tooMany = await a.api.post("/contacts/list/contacts", { listIds: [list.body.id], contactIds: [...ids, ...ids.map(() => randomUUID())] });
    expect(tooMany.status).toBe(400);
    expect(JSON.stringify(tooMany.body).length).toBeLessThan(20000);
    await expectAlive(a);
  }, 60000);

  it("fails an answer larger than the bus's max_payload with a 500 problem (no parts), streams a page of any size; the node keeps answering", async () => {
    const a = await account();
    const max = 1024 * 1024; // the test server's max_payload
    const res = await a.api.get(`/oversized/${Math.round(1.5 * max)}`);
    expect(res.status).toBe(500);
    expect(res.headers.get("content-type")).toMatch(/problem\+json/);
    expect(res.body).toMatchObject({ status: 500 });
    // An error answer too large to send (once, it ended the process that failed to send it).
    const failed = await a.api.get(`/oversized/${3 * max}/error`);
    expect(failed.status).toBe(500);
    expect(failed.body).toMatchObject({ status: 500 });
    // A page three times the bus's limit crosses whole, in chunks.
    const page = await a.api.get("/oversized/3000/page");
    expect(page.status).toBe(200);
    expect(page.body.data).toHaveLength(3000);
    expect(page.body.data[2999]).toEqual({ i: 2999, text: "p".repeat(1000) });
    // Well under the limit still crosses; the node that failed to answer is alive.
    expect((await a.api.get("/oversized/1000")).status).toBe(200);
    await expectAlive(a);
  }, 60000);

  it("carries the largest answers over the bus: 1000 history rows with long texts, a status of 1000 long ids", async () => {
    const a = await account();
    const ingress = new Http(tracker.ingress.baseUrl, { "x-internal-token": TOKEN });
    const ids = Array.from({ length: 1000 }, (_, i) => `${String(i).padStart(4, "0")}-${"m".repeat(195)}`);
    // The ingress takes arrays of up to 1000 (8 MiB a body): here two of 500, 10,000-character texts.
    for (const half of [ids.slice(0, 500), ids.slice(500)]) {
      const res = await ingress.post(
        "/messages",
        half.map((id) => messageIn(a.companyId, { customerMessageId: id, text: "t".repeat(10000) })),
      );
      expect(res.status).toBe(202);
    }
    const history = await a.api.get("/messages/history?limit=1000");
    expect(history.status).toBe(200);
    expect(history.body.data).toHaveLength(1000);
    expect(JSON.stringify(history.body).length).toBeGreaterThan(10_000_000);
    const statuses = await a.api.get(`/messages/status?channel=SMS&ids=${ids.join(",")}`);
    expect(statuses.status).toBe(200);
    expect(statuses.body.data).toHaveLength(1000);
    await expectAlive(a);
  }, 60000);

  it("carries a 1000-row page of contacts with custom fields over the bus", async () => {
    const a = await account();
    const keys = Array.from({ length: 10 }, (_, i) => `field${i}`);
    for (const key of keys) expect((await a.api.post("/contacts/custom-fields", { key, type: "TEXT" })).status).toBe(201);
    const customFields = Object.fromEntries(keys.map((k) => [k, "v".repeat(500)]));
    for (let batch = 0; batch < 40; batch++) {
      const made = await Promise.all(
        Array.from({ length: 25 }, (_, i) =>
          a.api.post("/contacts", { firstName: `C${batch * 25 + i}`, phoneNumber: `+35191${String(batch * 25 + i).padStart(7, "0")}`, customFields }),
        ),
      );
      for (const r of made) expect(r.status).toBe(201);
    }
    const page = await a.api.get("/contacts?limit=1000");
    expect(page.status).toBe(200);
    expect(page.body.data).toHaveLength(1000);
    expect(JSON.stringify(page.body).length).toBeGreaterThan(5_000_000);
    await expectAlive(a);
  }, 120000);

  it("answers 10,000 malformed ids with a bounded 400 (the first 100 named, the rest counted)", async () => {
    const a = await account();
    const res = await a.api.post("/contacts/list/contacts", { listIds: [1], contactIds: Array.from({ length: 10000 }, (_, i) => `not-a-uuid-${i}`) });
    expect(res.status).toBe(400);
    expect(res.body.errors).toHaveLength(100);
    expect(res.body.errorsNotShown).toBeGreaterThanOrEqual(9900);
    expect(JSON.stringify(res.body).length).toBeLessThan(50000);
    await expectAlive(a);
  }, 60000);
});
