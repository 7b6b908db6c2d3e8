import type { Context } from "moleculer";
import { startTestApp, type TestApp } from "../helpers/app";

/** A creating action that counts how often it really runs, and can be slow. */
let runs = 0;
const counter = {
  name: "counter",
  settings: { rest: "/" },
  actions: {
    create: {
      rest: "POST /probe/counters",
      operation: "AUTHENTICATION",
      params: {
        $id: "ProbeCounterIn",
        type: "object",
        additionalProperties: false,
        properties: { delayMs: { type: "integer", minimum: 0, maximum: 2000 }, label: { type: "string" } },
      },
      responses: { 201: { type: "object" } },
      async handler(ctx: Context<{ delayMs?: number; label?: string }, { $statusCode?: number; $location?: string }>) {
        if (ctx.params.delayMs) await new Promise((r) => setTimeout(r, ctx.params.delayMs));
        runs += 1;
        ctx.meta.$statusCode = 201;
        ctx.meta.$location = `/api/partner-gateway/v1/probe/counters/${runs}`;
        return { run: runs, label: ctx.params.label ?? null };
      },
    },
  },
};

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ extraServices: [counter as never] });
});
afterAll(() => t?.stop());

describe("Idempotency-Key on creating POSTs", () => {
  it("answers a repeat with the first answer, without creating a second key", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "SMS"]);
    const first = await a.api.post("/authentication", { operations: ["SMS"] }, { headers: { "idempotency-key": "create-sms-key-1" } });
    expect(first.status).toBe(201);
    const again = await a.api.post("/authentication", { operations: ["SMS"] }, { headers: { "idempotency-key": "create-sms-key-1" } });
    expect(again.status).toBe(201);
    expect(again.body).toEqual(first.body);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.headers.get("location")).toBe(first.headers.get("location"));
    expect((await a.api.get("/authentication")).body.total).toBe(2); // the caller's own key and one new one
  });

  it("treats the same body with fields in another order as the same request", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    const before = runs;
    const one = await a.api.request("POST", "/probe/counters", {
      raw: '{"label":"x","delayMs":0}',
      headers: { "content-type": "application/json", "idempotency-key": "k-order" },
    });
    const two = await a.api.request("POST", "/probe/counters", {
      raw: '{"delayMs":0,"label":"x"}',
      headers: { "content-type": "application/json", "idempotency-key": "k-order" },
    });
    expect(two.body).toEqual(one.body);
    expect(runs).toBe(before + 1);
  });

  it("answers 422 for the same key with a different body", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "SMS", "RCS"]);
    expect((await a.api.post("/authentication", { operations: ["SMS"] }, { headers: { "idempotency-key": "k1" } })).status).toBe(201);
    const res = await a.api.post("/authentication", { operations: ["RCS"] }, { headers: { "idempotency-key": "k1" } });
    expect(res.status).toBe(422);
    expect(res.headers.get("content-type")).toMatch(/problem\+json/);
    expect(res.body.requestId).toBe(res.headers.get("x-request-id"));
    expect((await a.api.get("/authentication")).body.total).toBe(2);
  });

  it("answers 409 for a repeat while the first is still running, then the first answer", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    const before = runs;
    const slow = a.api.post("/probe/counters", { delayMs: 700 }, { headers: { "idempotency-key": "slow-1" } });
    await new Promise((r) => setTimeout(r, 200));
    const during = await a.api.post("/probe/counters", { delayMs: 700 }, { headers: { "idempotency-key": "slow-1" } });
    expect(during.status).toBe(409);
    expect(during.headers.get("content-type")).toMatch(/problem\+json/);
    const first = await slow;
    expect(first.status).toBe(201);
    const after = await a.api.post("/probe/counters", { delayMs: 700 }, { headers: { "idempotency-key": "slow-1" } });
    expect(after.body).toEqual(first.body);
    expect(runs).toBe(before + 1);
  });

  it("keeps keys apart per account", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    const b = await t.newAccount(["AUTHENTICATION"]);
    const ra = await a.api.post("/probe/counters", { label: "a" }, { headers: { "idempotency-key": "shared" } });
    const rb = await b.api.post("/probe/counters", { label: "b" }, { headers: { "idempotency-key": "shared" } });
    expect(ra.status).toBe(201);
    expect(rb.status).toBe(201);
    expect(rb.body.label).toBe("b");
  });

  it("replays a client error too, with this request's own id", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "SMS"]);
    const first = await a.api.post("/authentication", { operations: ["WHATSAPP"] }, { headers: { "idempotency-key": "err-1" } });
    expect(first.status).toBe(403);
    const again = await a.api.post("/authentication", { operations: ["WHATSAPP"] }, { headers: { "idempotency-key": "err-1" } });
    expect(again.status).toBe(403);
    expect(again.body).toEqual({ ...first.body, requestId: again.headers.get("x-request-id") });
    expect(again.body.requestId).not.toBe(first.body.requestId);
  });

  it("acts again once the stored answer is older than 24 hours", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    const before = runs;
    await a.api.post("/probe/counters", {}, { headers: { "idempotency-key": "old" } });
    await t.db.sequelize.query("UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE company_id = :c AND key = 'old'", {
      replacements: { c: a.companyId },
    });
    const again = await a.api.post("/probe/counters", {}, { headers: { "idempotency-key": "old" } });
    expect(again.status).toBe(201);
    expect(again.headers.get("idempotent-replayed")).toBeNull();
    expect(runs).toBe(before + 2);
  });

  it("answers 400 for a malformed Idempotency-Key and acts not at all", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    const before = runs;
    const res = await a.api.post("/probe/counters", {}, { headers: { "idempotency-key": "x".repeat(256) } });
    expect(res.status).toBe(400);
    expect(res.body.errors[0].path).toBe("Idempotency-Key");
    expect(runs).toBe(before);
  });

  it("never hands a stored answer to another key of the account, nor keeps it readable", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "SMS"]);
    const narrow = (await a.api.post("/authentication", { operations: ["AUTHENTICATION"] })).body.apiKey as string;
    const first = await a.api.post("/authentication", { operations: ["SMS", "AUTHENTICATION"] }, { headers: { "idempotency-key": "order-1" } });
    expect(first.status).toBe(201);
    // The same Idempotency-Key from a key that may not create SMS keys: not the first answer.
    const other = await t.api.post(
      "/authentication",
      { operations: ["SMS", "AUTHENTICATION"] },
      { headers: { "idempotency-key": "order-1", "x-api-key": narrow } },
    );
    expect(other.status).toBe(422);
    expect(other.text).not.toContain(first.body.apiKey);
    const rows = await t.db.sequelize.query<{ response_body: string }>("SELECT response_body FROM idempotency_keys WHERE company_id = :c", {
      replacements: { c: a.companyId },
      type: "SELECT" as never,
    });
    expect(rows.length).toBeGreaterThan(0);
    for (const r of rows) {
      expect(r.response_body).not.toContain(first.body.apiKey);
      expect(r.response_body).not.toContain(first.body.apiKey.slice(4, 20));
    }
  });

  it("answers 400, not 500, for a body nested absurdly deep", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    const deep = '{"label":' + "[".repeat(5000) + "]".repeat(5000) + "}";
    const res = await a.api.request("POST", "/probe/counters", { raw: deep, headers: { "content-type": "application/json", "idempotency-key": "deep-1" } });
    expect(res.status).toBe(400);
  });

  it("acts normally without the header", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    const before = runs;
    await a.api.post("/probe/counters", {});
    await a.api.post("/probe/counters", {});
    expect(runs).toBe(before + 2);
  });
});
