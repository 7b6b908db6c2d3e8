/**
 * The largest bodies the bulk endpoints accept, all of them invalid, answered in milliseconds with
 * the first 100 errors and a count, while another account's requests keep their latency (issue 30,
 * item 2: 20,000 malformed contact ids took 12 s to answer and froze the node meanwhile).
 */
import { randomUUID } from "node:crypto";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import type { Res } from "../helpers/http";

let t: TestApp;
let victim: Account;

beforeAll(async () => {
  t = await startTestApp({ services: ["gateway", "auth", "contacts", "tracking"] });
  victim = await t.newAccount(["AUTHENTICATION", "CONTACTS"]);
});
afterAll(() => t.stop());

/**
 * Runs `heavy` and, from 20 ms after it starts until it answers, another account's
 * `GET /authentication/me` back to back; answers the heavy answer and the slowest of those.
 */
async function whileMeasuring(heavy: () => Promise<Res>): Promise<{ res: Res; slowestMs: number; probes: number }> {
  let done = false;
  let slowestMs = 0;
  let probes = 0;
  const probe = (async () => {
    await new Promise((r) => setTimeout(r, 20));
    while (!done) {
      const start = performance.now();
      const me = await victim.api.get("/authentication/me");
      expect(me.status).toBe(200);
      slowestMs = Math.max(slowestMs, performance.now() - start);
      probes++;
    }
  })();
  const res = await heavy().finally(() => (done = true));
  await probe;
  return { res, slowestMs, probes };
}

const malformed = (n: number, prefix: string) => Array.from({ length: n }, (_, i) => `${prefix}-${i}-not-a-uuid`);

describe("bulk bodies at their largest", () => {
  it("answers 20,000 malformed contact ids (over the 10,000 allowed) with that one error, without stalling another account", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const list = await a.api.post("/contacts/list", { name: "Big" });
    expect(list.status).toBe(201);
    const body = { listIds: [list.body.id], contactIds: malformed(20000, "c") };
    expect(JSON.stringify(body).length).toBeGreaterThan(300_000);
    const { res, slowestMs } = await whileMeasuring(() => a.api.post("/contacts/list/contacts", body));
    expect(res.status).toBe(400);
    expect(res.headers.get("content-type")).toMatch(/application\/problem\+json/);
    // The array over its size is the answer: its items are not read one by one.
    expect(res.body.errors).toEqual([{ path: "contactIds", message: "must NOT have more than 10000 items" }]);
    expect(res.body.errorsNotShown).toBeUndefined();
    // Before: 12 s for the answer, and every other request waited as long.
    expect(slowestMs).toBeLessThan(3000);
  });

  it("answers the largest valid-shaped add and remove bodies (10,000 ids and 10,000 exclusions, all malformed) in the same way", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const list = await a.api.post("/contacts/list", { name: "Big" });
    const body = { listIds: [list.body.id], contactIds: malformed(10000, "c"), excludeIdsAllContacts: malformed(10000, "x") };
    expect(JSON.stringify(body).length).toBeLessThan(1024 * 1024);
    for (const method of ["POST", "DELETE"] as const) {
      const { res, slowestMs } = await whileMeasuring(() => a.api.request(method, "/contacts/list/contacts", { body }));
      expect(res.status).toBe(400);
      expect(res.body.errors).toHaveLength(100);
      expect(res.body.errors[0]).toEqual({ path: "contactIds[0]", message: expect.stringMatching(/must match pattern|must be a UUID/) });
      // Each bad id once (the membership schema's if/then/else once reported every one twice).
      expect(res.body.errors.length + res.body.errorsNotShown).toBe(20000);
      expect(JSON.stringify(res.body).length).toBeLessThan(20_000);
      expect(slowestMs).toBeLessThan(3000);
    }
  });

  it("answers a body holding more values than any valid one with its first error alone", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    // 1 MiB of zeros after a malformed list id: nothing walks the 400,000 items one by one.
    const body = { listIds: ["nope"], contactIds: new Array(400_000).fill(0) };
    expect(JSON.stringify(body).length).toBeLessThan(1024 * 1024);
    const { res, slowestMs } = await whileMeasuring(() => a.api.post("/contacts/list/contacts", body));
    expect(res.status).toBe(400);
    expect(res.body.errors.length).toBeGreaterThanOrEqual(1);
    expect(res.body.errors.length).toBeLessThanOrEqual(2);
    expect(res.body.errorsNotShown).toBeUndefined();
    expect(slowestMs).toBeLessThan(3000);
  });

  it("still names every error of a small invalid body, each once", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const res = await a.api.post("/contacts/list/contacts", { listIds: [0], contactIds: ["x", randomUUID(), "y"], surprise: 1 });
    expect(res.status).toBe(400);
    const paths = res.body.errors.map((e: { path: string }) => e.path);
    expect(paths).toEqual(expect.arrayContaining(["listIds[0]", "contactIds[0]", "contactIds[2]", "surprise"]));
    expect(new Set(res.body.errors.map((e: object) => JSON.stringify(e))).size).toBe(res.body.errors.length);
    expect(res.body.errorsNotShown).toBeUndefined();
  });

  it("answers the ingress's largest array (1,000 malformed objects) with a bounded list, without stalling another account", async () => {
    const items = Array.from({ length: 1000 }, (_, i) => ({ companyId: "", channel: "FAX", customerMessageId: "", destination: `bad-${i}`, surprise: i }));
    const { res, slowestMs } = await whileMeasuring(() => t.ingress.post("/messages", items));
    expect(res.status).toBe(400);
    expect(res.body.errors.length).toBeLessThanOrEqual(100);
    expect(slowestMs).toBeLessThan(3000);
  });
});
