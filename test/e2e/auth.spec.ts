import { createHash } from "node:crypto";
import { QueryTypes } from "sequelize";
import { createKeyAsAdmin } from "../../services/auth/auth.contract";
import { startTestApp, uid, type TestApp } from "../helpers/app";
import { expectProblem } from "../helpers/expect";

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(() => t?.stop());

describe("POST /authentication", () => {
  it("creates a key within the caller's operations and shows its value once", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "SMS", "RCS"], { userId: "user-1", trafficType: "MARKETING" });
    const res = await a.api.post("/authentication", { operations: ["SMS", "AUTHENTICATION"] });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      companyId: a.companyId,
      userId: "user-1",
      username: null,
      operations: ["SMS", "AUTHENTICATION"],
      trafficType: "MARKETING",
      createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/),
      createdByKeyId: a.key.id,
      apiKey: expect.stringMatching(/^pgw_[A-Za-z0-9_-]{43}$/),
    });
    expect(res.headers.get("location")).toBe(`/api/partner-gateway/v1/authentication/${res.body.id}`);
    // The new key works at once, with exactly its own operations.
    const me = await t.api.get("/authentication/me", { headers: { "x-api-key": res.body.apiKey } });
    expect(me.status).toBe(200);
    expect(me.body).toEqual({ ...res.body, apiKey: undefined });
    expect(me.body.apiKey).toBeUndefined();
  });

  it("stores only a hash of the key", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    const res = await a.api.post("/authentication", { operations: ["AUTHENTICATION"] });
    const rows = await t.db.sequelize.query<Record<string, unknown>>("SELECT * FROM api_keys WHERE id = :id", {
      replacements: { id: res.body.id },
      type: QueryTypes.SELECT,
    });
    expect(rows).toHaveLength(1);
    const stored = JSON.stringify(rows[0], (_k, v) => (v && v.type === "Buffer" ? Buffer.from(v.data).toString("latin1") : v));
    expect(stored).not.toContain(res.body.apiKey);
    expect(stored).not.toContain(res.body.apiKey.slice(4));
    expect(Buffer.from(rows[0]!.key_hash as Buffer).equals(createHash("sha256").update(res.body.apiKey).digest())).toBe(true);
  });

  it("answers 403 when the requested operations exceed the caller's", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "SMS"]);
    const res = await a.api.post("/authentication", { operations: ["SMS", "WHATSAPP"] });
    expectProblem(res, 403);
    expect(res.body.detail).toContain("WHATSAPP");
    const list = await a.api.get("/authentication");
    expect(list.body.total).toBe(1); // nothing was written
  });

  it.each([
    ["a missing operations", {}],
    ["an empty operations", { operations: [] }],
    ["an unknown operation", { operations: ["FAX"] }],
    ["a repeated operation", { operations: ["SMS", "SMS"] }],
    ["operations of the wrong type", { operations: "SMS" }],
    ["an unknown field", { operations: ["SMS"], admin: true }],
    ["a null body field", { operations: null }],
    ["a __proto__ field", JSON.parse('{"operations":["SMS"],"__proto__":{"admin":true}}')],
  ])("answers 400 for %s", async (_name, body) => {
    const a = await t.newAccount(["AUTHENTICATION", "SMS"]);
    const res = await a.api.post("/authentication", body);
    expectProblem(res, 400);
    expect(res.body.errors?.length).toBeGreaterThan(0);
    expect((await a.api.get("/authentication")).body.total).toBe(1);
  });

  it("answers 400 for a body that is not an object", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "SMS"]);
    expectProblem(await a.api.request("POST", "/authentication", { raw: '["SMS"]', headers: { "content-type": "application/json" } }), 400);
    expectProblem(await a.api.request("POST", "/authentication", { raw: '"SMS"', headers: { "content-type": "application/json" } }), 400);
  });

  it("refuses a field named in both the query and the body", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "SMS"]);
    const res = await a.api.post("/authentication?operations=AUTHENTICATION", { operations: ["SMS"] });
    expectProblem(res, 400);
    expect(res.body.errors[0].path).toBe("operations");
  });
});

describe("GET /authentication", () => {
  it("lists the account's keys in the page envelope, filtered by userId, without values", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "SMS"], { userId: "alice" });
    const other = await t.newAccount(["AUTHENTICATION", "SMS"], { userId: "alice" });
    for (let i = 0; i < 3; i++) expect((await a.api.post("/authentication", { operations: ["SMS"] })).status).toBe(201);
    const all = await a.api.get("/authentication?limit=2");
    expect(all.status).toBe(200);
    expect(all.body).toMatchObject({ page: 0, limit: 2, total: 4, totalPages: 2 });
    expect(all.body.data).toHaveLength(2);
    const page1 = await a.api.get("/authentication?limit=2&page=1");
    expect(page1.body.data).toHaveLength(2);
    const ids = [...all.body.data, ...page1.body.data].map((k: { id: string }) => k.id);
    expect(new Set(ids).size).toBe(4);
    for (const k of [...all.body.data, ...page1.body.data]) {
      expect(k.companyId).toBe(a.companyId);
      expect(k.apiKey).toBeUndefined();
    }
    expect(ids).not.toContain(other.key.id);
    expect((await a.api.get("/authentication?userId=alice")).body.total).toBe(4);
    expect((await a.api.get("/authentication?userId=bob")).body).toMatchObject({ total: 0, data: [], totalPages: 0 });
    const asc = await a.api.get("/authentication?sortOrder=asc&limit=1");
    expect(asc.body.data[0].id).toBe(a.key.id);
  });

  it.each([
    ["limit over 1000", "limit=1001"],
    ["a negative page", "page=-1"],
    ["a non-numeric limit", "limit=ten"],
    ["an unknown sortBy", "sortBy=secret"],
    ["a bad sortOrder", "sortOrder=up"],
    ["an unknown filter", "companyId=other"],
  ])("answers 400 for %s", async (_name, qs) => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    expectProblem(await a.api.get(`/authentication?${qs}`), 400);
  });
});

describe("createdByKeyId", () => {
  it("names the key that made a key, in its 201 and in every answer about it; null for a key made by the admin command", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "SMS"]);
    const admin = await createKeyAsAdmin(t.db.sequelize, {
      companyId: a.companyId,
      userId: null,
      operations: ["AUTHENTICATION", "SMS"],
      trafficType: "TRANSACTIONAL",
      createdBy: null,
    });
    expect(admin.createdByKeyId).toBeNull();
    expect(a.key.createdByKeyId).toBeNull();

    const child = await a.api.post("/authentication", { operations: ["AUTHENTICATION", "SMS"] });
    expect(child.status).toBe(201);
    expect(child.body.createdByKeyId).toBe(a.key.id);
    // A key made by that key names its own maker, not the first one.
    const grandchild = await t.api.post("/authentication", { operations: ["SMS"] }, { headers: { "x-api-key": child.body.apiKey } });
    expect(grandchild.status).toBe(201);
    expect(grandchild.body.createdByKeyId).toBe(child.body.id);

    const listed = await a.api.get("/authentication?limit=1000");
    expect(listed.status).toBe(200);
    const makers = Object.fromEntries(listed.body.data.map((k: { id: string; createdByKeyId: string | null }) => [k.id, k.createdByKeyId]));
    expect(makers).toEqual({ [a.key.id]: null, [admin.id]: null, [child.body.id]: a.key.id, [grandchild.body.id]: child.body.id });
    expect((await a.api.get(`/authentication/${child.body.id}`)).body.createdByKeyId).toBe(a.key.id);
    expect((await t.api.get("/authentication/me", { headers: { "x-api-key": child.body.apiKey } })).body.createdByKeyId).toBe(a.key.id);

    // The maker deleted (a stolen key revoked): what it made still names it, so the owner can find and revoke it too.
    expect((await a.api.delete(`/authentication/${child.body.id}`)).status).toBe(204);
    expect((await a.api.get(`/authentication/${grandchild.body.id}`)).body.createdByKeyId).toBe(child.body.id);
  });
});

describe("GET /authentication/me", () => {
  it("describes the calling key", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "WHATSAPP"], { userId: "u-me" });
    const res = await a.api.get("/authentication/me");
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      id: a.key.id,
      companyId: a.companyId,
      userId: "u-me",
      username: null,
      operations: ["AUTHENTICATION", "WHATSAPP"],
      trafficType: "TRANSACTIONAL",
      createdAt: a.key.createdAt,
      createdByKeyId: null,
    });
  });

  it("answers 401 without a key, with an unknown or malformed key, and for a key lacking AUTHENTICATION", async () => {
    expectProblem(await t.api.get("/authentication/me"), 401);
    expectProblem(await t.api.get("/authentication/me", { headers: { "x-api-key": "pgw_" + "A".repeat(43) } }), 401);
    expectProblem(await t.api.get("/authentication/me", { headers: { "x-api-key": "not-a-key" } }), 401);
    const sms = await t.newAccount(["SMS"]);
    const res = await sms.api.get("/authentication/me");
    expectProblem(res, 401);
    expect(res.body.detail).toContain("AUTHENTICATION");
  });
});

describe("DELETE /authentication/{id}", () => {
  it("deletes a key: 204, and the key is refused on the very next request", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "SMS"]);
    const created = await a.api.post("/authentication", { operations: ["AUTHENTICATION"] });
    const victim = t.api.with({ "x-api-key": created.body.apiKey });
    expect((await victim.get("/authentication/me")).status).toBe(200); // now cached by the gateway
    const del = await a.api.delete(`/authentication/${created.body.id}`);
    expect(del.status).toBe(204);
    expect(del.text).toBe("");
    expectProblem(await victim.get("/authentication/me"), 401);
    expectProblem(await a.api.delete(`/authentication/${created.body.id}`), 404);
  });

  it("lets a key delete itself", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    expect((await a.api.delete(`/authentication/${a.key.id}`)).status).toBe(204);
    expectProblem(await a.api.get("/authentication/me"), 401);
  });

  it("answers 404 for another account's key and leaves it alone", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    const b = await t.newAccount(["AUTHENTICATION"]);
    expectProblem(await a.api.delete(`/authentication/${b.key.id}`), 404);
    expectProblem(await a.api.get(`/authentication/${b.key.id}`), 404);
    expect((await b.api.get("/authentication/me")).status).toBe(200);
  });

  it("answers 400 for an id that is not a key id, and 404 for an unknown one", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    expectProblem(await a.api.delete("/authentication/12345"), 400);
    expectProblem(await a.api.delete("/authentication/%E0%A4%A"), 400);
    expectProblem(await a.api.get("/authentication/urn:uuid:00000000-0000-0000-0000-000000000000"), 400);
    expectProblem(await a.api.delete("/authentication/00000000-0000-4000-8000-000000000000"), 404);
  });
});

describe("GET /authentication/{id}", () => {
  it("describes a key of the account", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "SMS"]);
    const created = await a.api.post("/authentication", { operations: ["SMS"] });
    const res = await a.api.get(`/authentication/${created.body.id}`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ...created.body, apiKey: undefined });
  });
});

it("keeps accounts apart in every listing", async () => {
  const a = await t.newAccount(["AUTHENTICATION"], { companyId: uid("iso") });
  const b = await t.newAccount(["AUTHENTICATION"], { companyId: uid("iso") });
  const la = await a.api.get("/authentication");
  expect(la.body.data.map((k: { id: string }) => k.id)).toEqual([a.key.id]);
  const lb = await b.api.get("/authentication");
  expect(lb.body.data.map((k: { id: string }) => k.id)).toEqual([b.key.id]);
});

describe("MAX_KEYS_PER_ACCOUNT", () => {
  const MAX = 4;
  let c: TestApp;
  beforeAll(async () => {
    c = await startTestApp({ config: { maxKeysPerAccount: MAX } });
  });
  afterAll(() => c?.stop());

  it("refuses the key past the cap with a 409 problem, and allows another once one is deleted", async () => {
    const a = await c.newAccount(["AUTHENTICATION"]);
    const made = [];
    for (let i = 1; i < MAX; i++) made.push(await a.api.post("/authentication", { operations: ["AUTHENTICATION"] }));
    expect(made.map((r) => r.status)).toEqual(Array(MAX - 1).fill(201));
    const refused = await a.api.post("/authentication", { operations: ["AUTHENTICATION"] });
    expectProblem(refused, 409);
    expect(refused.body.type).toBe("/docs#problem-key-limit-reached");
    // Another account is not concerned.
    const b = await c.newAccount(["AUTHENTICATION"]);
    expect((await b.api.post("/authentication", { operations: ["AUTHENTICATION"] })).status).toBe(201);
    expect((await a.api.delete(`/authentication/${made[0]!.body.id}`)).status).toBe(204);
    expect((await a.api.post("/authentication", { operations: ["AUTHENTICATION"] })).status).toBe(201);
    expectProblem(await a.api.post("/authentication", { operations: ["AUTHENTICATION"] }), 409);
  });

  it("never lets concurrent creations pass the cap", async () => {
    const a = await c.newAccount(["AUTHENTICATION"]);
    const results = await Promise.all(Array.from({ length: 12 }, () => a.api.post("/authentication", { operations: ["AUTHENTICATION"] })));
    expect(results.filter((r) => r.status === 201)).toHaveLength(MAX - 1);
    expect(results.filter((r) => r.status === 409)).toHaveLength(12 - (MAX - 1));
    const [{ n }] = await c.db.sequelize.query<{ n: number }>("SELECT count(*)::int AS n FROM api_keys WHERE company_id = :id", {
      replacements: { id: a.companyId },
      type: QueryTypes.SELECT,
    });
    expect(n).toBe(MAX);
  });
});
