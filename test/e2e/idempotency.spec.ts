import { createHash } from "node:crypto";
import { Errors, type Context } from "moleculer";
import { requestHash } from "../../services/gateway/gateway.idempotency";
import { startTestApp, type TestApp } from "../helpers/app";
import { deferred, eventually, type Deferred } from "../helpers/eventually";

type Meta = { $statusCode?: number; $location?: string };

/**
 * A hold the test places on the next run of a probe action: the run says it has started, then waits
 * until the test lets it go, and says when it has finished. Tests decide races with it, not with
 * head starts measured in milliseconds.
 */
interface Hold {
  started: Deferred;
  release: Deferred;
  finished: Deferred;
}
let nextHold: Hold | null = null;
function holdNextRun(): Hold {
  nextHold = { started: deferred(), release: deferred(), finished: deferred() };
  return nextHold;
}
async function honourHold(): Promise<Hold | null> {
  const h = nextHold;
  if (!h) return null;
  nextHold = null;
  h.started.resolve();
  await h.release.promise;
  return h;
}

/** A creating action that counts how often it really runs, can be slow or held, and can fail. */
let runs = 0;
/** Calls of `fails` that ended in a 500 (the next one succeeds). */
let failures = 0;
let failNext = false;
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
      async handler(ctx: Context<{ delayMs?: number; label?: string }, Meta>) {
        const held = await honourHold();
        if (ctx.params.delayMs) await new Promise((r) => setTimeout(r, ctx.params.delayMs));
        runs += 1;
        ctx.meta.$statusCode = 201;
        ctx.meta.$location = `/api/partner-gateway/v1/probe/counters/${runs}`;
        held?.finished.resolve();
        return { run: runs, label: ctx.params.label ?? null };
      },
    },
    /** Ends in a 500 when the test armed `failNext`, else acts like create. */
    fails: {
      rest: "POST /probe/failing-counters",
      operation: "AUTHENTICATION",
      params: { $id: "ProbeFailingIn", type: "object", additionalProperties: false, properties: { label: { type: "string" } } },
      responses: { 201: { type: "object" } },
      async handler(ctx: Context<{ label?: string }, Meta>) {
        if (failNext) {
          failNext = false;
          failures += 1;
          throw new Errors.MoleculerError("the probe broke", 500, "PROBE_BROKE");
        }
        runs += 1;
        ctx.meta.$statusCode = 201;
        ctx.meta.$location = `/api/partner-gateway/v1/probe/counters/${runs}`;
        return { run: runs, label: ctx.params.label ?? null };
      },
    },
    /** Declares a 300 ms timeout, shorter than a held run. */
    slow: {
      rest: "POST /probe/slow-counters",
      operation: "AUTHENTICATION",
      timeout: 300,
      params: { $id: "ProbeSlowIn", type: "object", additionalProperties: false, properties: { label: { type: "string" } } },
      responses: { 201: { type: "object" } },
      async handler(ctx: Context<{ label?: string }, Meta>) {
        const held = await honourHold();
        runs += 1;
        ctx.meta.$statusCode = 201;
        ctx.meta.$location = `/api/partner-gateway/v1/probe/counters/${runs}`;
        held?.finished.resolve();
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
    const hold = holdNextRun();
    const slow = a.api.post("/probe/counters", { delayMs: 0 }, { headers: { "idempotency-key": "slow-1" } });
    await hold.started.promise; // the first is inside the action now
    const during = await a.api.post("/probe/counters", { delayMs: 0 }, { headers: { "idempotency-key": "slow-1" } });
    expect(during.status).toBe(409);
    expect(during.headers.get("content-type")).toMatch(/problem\+json/);
    hold.release.resolve();
    const first = await slow;
    expect(first.status).toBe(201);
    const after = await a.api.post("/probe/counters", { delayMs: 0 }, { headers: { "idempotency-key": "slow-1" } });
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

  it("stores the request's hash keyed by the caller's API key: guessed params cannot be tested against it", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    const body = { operations: ["AUTHENTICATION"] };
    expect((await a.api.post("/authentication", body, { headers: { "idempotency-key": "hmac-1" } })).status).toBe(201);
    const [row] = await t.db.sequelize.query<{ request_hash: string }>("SELECT request_hash FROM idempotency_keys WHERE company_id = :c AND key = 'hmac-1'", {
      replacements: { c: a.companyId },
      type: "SELECT" as never,
    });
    const keyId = a.key.id;
    const canon = '{"operations":["AUTHENTICATION"]}';
    for (const path of ["/api/partner-gateway/v1/authentication", "/authentication"]) {
      expect(row!.request_hash).not.toBe(createHash("sha256").update(`${keyId}\nPOST ${path}\n${canon}`).digest("hex"));
    }
    const args = ["acme", "k1", "POST", "/authentication", { accessToken: "guess" }] as const;
    expect(requestHash("api-key-1", ...args)).toBe(requestHash("api-key-1", ...args));
    expect(requestHash("api-key-2", ...args)).not.toBe(requestHash("api-key-1", ...args));
    expect(requestHash("api-key-1", "acme", "k1", "POST", "/authentication", { accessToken: "other" })).not.toBe(requestHash("api-key-1", ...args));
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

describe("Idempotency-Key when things go wrong", () => {
  it("releases the claim after a 5xx: a retry with the same key acts again, and is then replayed", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    const before = { runs, failures };
    failNext = true;
    const failed = await a.api.post("/probe/failing-counters", { label: "x" }, { headers: { "idempotency-key": "fails-1" } });
    expect(failed.status).toBe(500);
    expect(failed.headers.get("content-type")).toMatch(/problem\+json/);
    expect(failures).toBe(before.failures + 1);
    const retry = await a.api.post("/probe/failing-counters", { label: "x" }, { headers: { "idempotency-key": "fails-1" } });
    expect(retry.status).toBe(201);
    expect(retry.headers.get("idempotent-replayed")).toBeNull();
    expect(runs).toBe(before.runs + 1);
    const again = await a.api.post("/probe/failing-counters", { label: "x" }, { headers: { "idempotency-key": "fails-1" } });
    expect(again.status).toBe(201);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body).toEqual(retry.body);
    expect(runs).toBe(before.runs + 1);
  });

  it("keeps a timed-out request's claim (409 meanwhile), and lets a repeat take it over once it is abandoned", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    const before = runs;
    const hold = holdNextRun();
    const timedOut = await a.api.post("/probe/slow-counters", { label: "t" }, { headers: { "idempotency-key": "slow-claim" } });
    expect(timedOut.status).toBe(503);
    await hold.started.promise;
    // The handler may still be at work: no second run while the claim is fresh.
    const meanwhile = await a.api.post("/probe/slow-counters", { label: "t" }, { headers: { "idempotency-key": "slow-claim" } });
    expect(meanwhile.status).toBe(409);
    // The held run ends unanswered (its caller is gone); its claim is still RUNNING, and ages past the abandon time.
    hold.release.resolve();
    await hold.finished.promise;
    expect(runs).toBe(before + 1);
    const [claim] = await t.db.sequelize.query<{ state: string }>("SELECT state FROM idempotency_keys WHERE company_id = :c AND key = 'slow-claim'", {
      replacements: { c: a.companyId },
      type: "SELECT" as never,
    });
    expect(claim).toEqual({ state: "RUNNING" });
    await t.db.sequelize.query("UPDATE idempotency_keys SET created_at = now() - interval '10 minutes' WHERE company_id = :c AND key = 'slow-claim'", {
      replacements: { c: a.companyId },
    });
    const takeover = await a.api.post("/probe/slow-counters", { label: "t" }, { headers: { "idempotency-key": "slow-claim" } });
    expect(takeover.status).toBe(201);
    expect(takeover.headers.get("idempotent-replayed")).toBeNull();
    expect(takeover.body).toEqual({ run: before + 2, label: "t" });
    const replay = await a.api.post("/probe/slow-counters", { label: "t" }, { headers: { "idempotency-key": "slow-claim" } });
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(replay.body).toEqual(takeover.body);
    expect(runs).toBe(before + 2);
  });

  it("acts once for simultaneous duplicates held in the action: the others answer 409", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    const before = runs;
    const hold = holdNextRun();
    const all = Array.from({ length: 8 }, () => a.api.post("/probe/counters", { label: "dup" }, { headers: { "idempotency-key": "dup-held" } }));
    await hold.started.promise;
    // Every duplicate is answered while the one that acts is still held.
    const settled = await eventually(
      async () => {
        const done = await Promise.all(all.map((p) => Promise.race([p, new Promise<null>((r) => setTimeout(() => r(null), 10))])));
        expect(done.filter((r) => r !== null)).toHaveLength(7);
        return done;
      },
      { timeoutMs: 20_000 },
    );
    expect(settled.filter((r) => r !== null).map((r) => r!.status)).toEqual(Array(7).fill(409));
    hold.release.resolve();
    const answers = await Promise.all(all);
    expect(answers.filter((r) => r.status === 201)).toHaveLength(1);
    expect(runs).toBe(before + 1);
  });

  it("creates the resource once for simultaneous duplicates: one acts, the others answer 409 or the replay", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "SMS"]);
    const answers = await Promise.all(
      Array.from({ length: 10 }, () => a.api.post("/authentication", { operations: ["SMS"] }, { headers: { "idempotency-key": "dup-key" } })),
    );
    const acted = answers.filter((r) => r.status === 201 && r.headers.get("idempotent-replayed") === null);
    expect(acted).toHaveLength(1);
    for (const r of answers) {
      if (r === acted[0]) continue;
      if (r.status === 409) expect(r.headers.get("content-type")).toMatch(/problem\+json/);
      else {
        expect(r.status).toBe(201);
        expect(r.headers.get("idempotent-replayed")).toBe("true");
        expect(r.body).toEqual(acted[0]!.body);
      }
    }
    const keys = (await a.api.get("/authentication")).body;
    expect(keys.total).toBe(2); // the caller's own key and exactly one new one
    expect(keys.data.map((k: { id: string }) => k.id)).toContain(acted[0]!.body.id);
  });
});
