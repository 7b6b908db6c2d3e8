/**
 * Social profiles through the gateway (contract section 4 "Social profile"): CRUD, the 409 naming the
 * existing profile (two concurrent creates on PostgreSQL), token replacement re-connecting a REVOKED
 * profile, paging and filters, every bad input (400, nothing stored), another account's ids (404,
 * data unchanged) and the SOCIAL_PROFILES operation.
 */
import { QueryTypes } from "sequelize";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { itWithPostgres } from "../helpers/db";
import { expectProblem } from "../helpers/expect";
import { NASTY } from "../helpers/nasty";

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ services: ["gateway", "auth", "profiles"] });
});
afterAll(() => t?.stop());

let seq = 0;
const profileIn = (over: Record<string, unknown> = {}) => ({
  network: "INSTAGRAM",
  externalId: `ext-${++seq}`,
  displayName: "Acme Coffee",
  accessToken: `tok-${seq}-x`,
  ...over,
});
const UUID = "5f0c6a1e-3b7d-4c2a-9e51-8d4f2b6a7c10";

async function rowCount(companyId: string): Promise<number> {
  const [r] = await t.db.sequelize.query<{ n: string }>("SELECT count(*) AS n FROM social_profiles WHERE company_id = $1", {
    bind: [companyId],
    type: QueryTypes.SELECT,
  });
  return Number(r!.n);
}
const tokenOf = async (companyId: string, id: string) => (await t.app.broker.call("profiles.accessToken", { companyId, id })) as { accessToken: string };

describe("CRUD", () => {
  it("creates (201, Location, no token), describes, lists and deletes a profile", async () => {
    const a = await t.newAccount(["SOCIAL_PROFILES"]);
    const created = await a.api.post("/social-profiles", { network: "FACEBOOK", externalId: "1001", displayName: "Acme", accessToken: "EAAB-secret-1" });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      network: "FACEBOOK",
      externalId: "1001",
      displayName: "Acme",
      status: "CONNECTED",
      createdAt: expect.any(String),
      updatedAt: created.body.createdAt,
      tokenUpdatedAt: created.body.createdAt,
    });
    expect(created.headers.get("location")).toBe(`/api/partner-gateway/v1/social-profiles/${created.body.id}`);
    expect(created.text).not.toContain("EAAB-secret-1");
    expect((await a.api.get(`/social-profiles/${created.body.id}`)).body).toEqual(created.body);
    expect((await a.api.get("/social-profiles")).body).toEqual({ data: [created.body], page: 0, limit: 10, total: 1, totalPages: 1 });
    expect(await tokenOf(a.companyId, created.body.id)).toEqual({ accessToken: "EAAB-secret-1" });

    const gone = await a.api.delete(`/social-profiles/${created.body.id}`);
    expect(gone.status).toBe(204);
    expect(gone.text).toBe("");
    expectProblem(await a.api.get(`/social-profiles/${created.body.id}`), 404);
    expectProblem(await a.api.delete(`/social-profiles/${created.body.id}`), 404);
    expectProblem(await a.api.put(`/social-profiles/${created.body.id}/token`, { accessToken: "x" }), 404);
    expect(await rowCount(a.companyId)).toBe(0);
  });

  it("takes displayName as optional (null) and keeps nasty text as given", async () => {
    const a = await t.newAccount(["SOCIAL_PROFILES"]);
    const bare = await a.api.post("/social-profiles", { network: "X", externalId: "x-1", accessToken: "t" });
    expect(bare.status).toBe(201);
    expect(bare.body.displayName).toBeNull();
    for (const text of NASTY.filter((s) => !/[\t\n\r]/.test(s))) {
      const res = await a.api.post("/social-profiles", profileIn({ externalId: text, displayName: text, accessToken: text }));
      expect({ text, status: res.status }).toEqual({ text, status: 201 });
      expect(res.body).toMatchObject({ externalId: text, displayName: text });
      expect(await tokenOf(a.companyId, res.body.id)).toEqual({ accessToken: text });
    }
  });

  it("answers 409 naming the existing profile for the same network and externalId; another network or account is fine", async () => {
    const a = await t.newAccount(["SOCIAL_PROFILES"]);
    const b = await t.newAccount(["SOCIAL_PROFILES"]);
    const firstIn = profileIn({ network: "TIKTOK", externalId: "same" });
    const first = await a.api.post("/social-profiles", firstIn);
    const again = await a.api.post("/social-profiles", profileIn({ network: "TIKTOK", externalId: "same", accessToken: "other" }));
    expectProblem(again, 409);
    expect(again.body.existingId).toBe(first.body.id);
    expect(await tokenOf(a.companyId, first.body.id)).toEqual({ accessToken: firstIn.accessToken });
    expect((await a.api.post("/social-profiles", profileIn({ network: "LINKEDIN", externalId: "same" }))).status).toBe(201);
    expect((await b.api.post("/social-profiles", profileIn({ network: "TIKTOK", externalId: "same" }))).status).toBe(201);
    expect(await rowCount(a.companyId)).toBe(2);
  });

  // On PGlite (one session) the two creates run one after the other: only PostgreSQL makes them race.
  itWithPostgres(
    "lets exactly one of two concurrent creates win; the other is a 409 naming it",
    async () => {
      const a = await t.newAccount(["SOCIAL_PROFILES"]);
      for (let round = 0; round < 5; round++) {
        const body = profileIn({ externalId: `race-${round}` });
        const results = await Promise.all([a.api.post("/social-profiles", body), a.api.post("/social-profiles", { ...body, accessToken: "second" })]);
        const statuses = results.map((r) => r.status).sort();
        expect(statuses).toEqual([201, 409]);
        const winner = results.find((r) => r.status === 201)!;
        expect(results.find((r) => r.status === 409)!.body.existingId).toBe(winner.body.id);
      }
      expect(await rowCount(a.companyId)).toBe(5);
    },
    60000,
  );
});

describe("token replacement", () => {
  it("replaces the token and connects a REVOKED profile again (status, tokenUpdatedAt, updatedAt)", async () => {
    const a = await t.newAccount(["SOCIAL_PROFILES"]);
    const created = (await a.api.post("/social-profiles", profileIn({ accessToken: "old-token" }))).body;
    const revoked = (await t.app.broker.call("profiles.markRevoked", { companyId: a.companyId, id: created.id })) as { status: string; updatedAt: string };
    expect(revoked.status).toBe("REVOKED");
    expect((await a.api.get(`/social-profiles/${created.id}`)).body).toMatchObject({ status: "REVOKED", tokenUpdatedAt: created.tokenUpdatedAt });
    expect((await a.api.get("/social-profiles?status=REVOKED")).body.data.map((p: { id: string }) => p.id)).toEqual([created.id]);

    const put = await a.api.put(`/social-profiles/${created.id}/token`, { accessToken: "new-token" });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({ id: created.id, status: "CONNECTED", createdAt: created.createdAt, externalId: created.externalId });
    expect(Date.parse(put.body.tokenUpdatedAt)).toBeGreaterThan(Date.parse(created.tokenUpdatedAt));
    expect(Date.parse(put.body.updatedAt)).toBeGreaterThanOrEqual(Date.parse(revoked.updatedAt));
    expect(put.text).not.toContain("new-token");
    expect(await tokenOf(a.companyId, created.id)).toEqual({ accessToken: "new-token" });
    expect((await a.api.get("/social-profiles?status=REVOKED")).body.total).toBe(0);
  });

  it("refuses markRevoked of another account's profile or an unknown one", async () => {
    const a = await t.newAccount(["SOCIAL_PROFILES"]);
    const b = await t.newAccount(["SOCIAL_PROFILES"]);
    const created = (await a.api.post("/social-profiles", profileIn())).body;
    await expect(t.app.broker.call("profiles.markRevoked", { companyId: b.companyId, id: created.id })).rejects.toMatchObject({ type: "PROFILE_NOT_FOUND" });
    await expect(t.app.broker.call("profiles.accessToken", { companyId: b.companyId, id: created.id })).rejects.toMatchObject({ type: "PROFILE_NOT_FOUND" });
    expect((await a.api.get(`/social-profiles/${created.id}`)).body.status).toBe("CONNECTED");
  });
});

describe("ids in upper case", () => {
  it("treats an upper-case id as the same profile in every action; a token PUT under it stays readable", async () => {
    const a = await t.newAccount(["SOCIAL_PROFILES"]);
    const created = (await a.api.post("/social-profiles", profileIn({ accessToken: "first-token" }))).body;
    const ID = created.id.toUpperCase();
    expect(ID).not.toBe(created.id);
    const got = await a.api.get(`/social-profiles/${ID}`);
    expect(got.status).toBe(200);
    expect(got.body.id).toBe(created.id);
    const revoked = (await t.app.broker.call("profiles.markRevoked", { companyId: a.companyId, id: ID })) as { id: string; status: string };
    expect(revoked).toMatchObject({ id: created.id, status: "REVOKED" });

    const put = await a.api.put(`/social-profiles/${ID}/token`, { accessToken: "upper-case-token" });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({ id: created.id, status: "CONNECTED" });
    expect(await tokenOf(a.companyId, created.id)).toEqual({ accessToken: "upper-case-token" });
    expect(await tokenOf(a.companyId, ID)).toEqual({ accessToken: "upper-case-token" });

    expect((await a.api.delete(`/social-profiles/${ID}`)).status).toBe(204);
    expect(await rowCount(a.companyId)).toBe(0);
  });
});

describe("paging and filters", () => {
  it("lists newest first with ties broken by id, filters by network and status, and pages", async () => {
    const a = await t.newAccount(["SOCIAL_PROFILES"]);
    const ids: string[] = [];
    for (const network of ["FACEBOOK", "INSTAGRAM", "FACEBOOK", "X", "FACEBOOK"])
      ids.push((await a.api.post("/social-profiles", profileIn({ network }))).body.id);
    // Same creation time for two rows: the tie is broken by id.
    await t.db.sequelize.query("UPDATE social_profiles SET created_at = '2026-01-01T00:00:00Z' WHERE id IN ($1, $2)", { bind: [ids[0], ids[1]] });
    const all = (await a.api.get("/social-profiles?limit=1000")).body;
    const tied = [ids[0], ids[1]].sort().reverse();
    expect(all.data.map((p: { id: string }) => p.id)).toEqual([ids[4], ids[3], ids[2], ...tied]);
    expect((await a.api.get("/social-profiles?sortOrder=asc&limit=2")).body.data.map((p: { id: string }) => p.id)).toEqual([...tied].reverse());
    const fb = (await a.api.get("/social-profiles?network=FACEBOOK&limit=2&page=1")).body;
    expect(fb).toMatchObject({ page: 1, limit: 2, total: 3, totalPages: 2 });
    expect(fb.data.map((p: { id: string }) => p.id)).toEqual([ids[0]]);
    expect((await a.api.get("/social-profiles?status=CONNECTED&network=X")).body.data.map((p: { id: string }) => p.id)).toEqual([ids[3]]);
  });

  it.each([["limit=1001"], ["limit=0"], ["page=-1"], ["sortBy=network"], ["sortOrder=random"], ["network=MYSPACE"], ["status=ACTIVE"], ["colour=red"]])(
    "answers 400 for %s",
    async (query) => {
      const a = await t.newAccount(["SOCIAL_PROFILES"]);
      expectProblem(await a.api.get(`/social-profiles?${query}`), 400);
    },
  );
});

describe("bad input", () => {
  const long = (n: number) => "a".repeat(n);
  it.each<[string, unknown]>([
    ["an unknown network", { network: "MYSPACE", externalId: "1", accessToken: "t" }],
    ["a lower-case network", { network: "facebook", externalId: "1", accessToken: "t" }],
    ["a missing network", { externalId: "1", accessToken: "t" }],
    ["a missing externalId", { network: "X", accessToken: "t" }],
    ["a missing accessToken", { network: "X", externalId: "1" }],
    ["an empty externalId", { network: "X", externalId: "", accessToken: "t" }],
    ["an empty accessToken", { network: "X", externalId: "1", accessToken: "" }],
    ["a numeric externalId", { network: "X", externalId: 1, accessToken: "t" }],
    ["a numeric accessToken", { network: "X", externalId: "1", accessToken: 12345 }],
    ["a null network", { network: null, externalId: "1", accessToken: "t" }],
    ["a null externalId", { network: "X", externalId: null, accessToken: "t" }],
    ["a null accessToken", { network: "X", externalId: "1", accessToken: null }],
    ["a numeric displayName", { network: "X", externalId: "1", accessToken: "t", displayName: 7 }],
    ["a null displayName", { network: "X", externalId: "1", accessToken: "t", displayName: null }],
    ["an empty displayName", { network: "X", externalId: "1", accessToken: "t", displayName: "" }],
    ["an object accessToken", { network: "X", externalId: "1", accessToken: { value: "t" } }],
    ["an externalId over 256", { network: "X", externalId: long(257), accessToken: "t" }],
    ["a displayName over 256", { network: "X", externalId: "1", accessToken: "t", displayName: long(257) }],
    ["an accessToken over 8192", { network: "X", externalId: "1", accessToken: long(8193) }],
    ["a control character in externalId", { network: "X", externalId: "a\u0007b", accessToken: "t" }],
    ["a newline in accessToken", { network: "X", externalId: "1", accessToken: "a\nb" }],
    ["a NUL in displayName", { network: "X", externalId: "1", accessToken: "t", displayName: "a\u0000" }],
    ["an unknown field", { network: "X", externalId: "1", accessToken: "t", status: "REVOKED" }],
    ["an id given", { network: "X", externalId: "1", accessToken: "t", id: UUID }],
    ["an array body", [{ network: "X", externalId: "1", accessToken: "t" }]],
    ["a string body", "token"],
  ])("refuses %s on create with 400, storing nothing", async (_name, body) => {
    const a = await t.newAccount(["SOCIAL_PROFILES"]);
    expectProblem(await a.api.post("/social-profiles", body), 400);
    expect(await rowCount(a.companyId)).toBe(0);
  });

  it("refuses an access token in the query string (URLs are logged), storing nothing", async () => {
    const a = await t.newAccount(["SOCIAL_PROFILES"]);
    const res = await a.api.post("/social-profiles?accessToken=in-the-url", { network: "X", externalId: "1" });
    expectProblem(res, 400);
    expect(res.body.errors).toEqual([{ path: "accessToken", message: "must be sent in the body, not in the query string" }]);
    expect(await rowCount(a.companyId)).toBe(0);
    const created = (await a.api.post("/social-profiles", profileIn({ accessToken: "kept" }))).body;
    expectProblem(
      await a.api.request("PUT", `/social-profiles/${created.id}/token?accessToken=in-the-url`, { raw: "{}", headers: { "content-type": "application/json" } }),
      400,
    );
    expect(await tokenOf(a.companyId, created.id)).toEqual({ accessToken: "kept" });
  });

  it("takes the longest allowed values", async () => {
    const a = await t.newAccount(["SOCIAL_PROFILES"]);
    const res = await a.api.post("/social-profiles", { network: "X", externalId: long(256), displayName: long(256), accessToken: long(8192) });
    expect(res.status).toBe(201);
    expect((await tokenOf(a.companyId, res.body.id)).accessToken).toHaveLength(8192);
  });

  it.each<[string, unknown]>([
    ["a missing accessToken", {}],
    ["a null accessToken", { accessToken: null }],
    ["a numeric accessToken", { accessToken: 42 }],
    ["an empty accessToken", { accessToken: "" }],
    ["an over-long accessToken", { accessToken: "a".repeat(8193) }],
    ["an extra field", { accessToken: "t", status: "CONNECTED" }],
  ])("refuses %s on PUT token with 400, the stored token unchanged", async (_name, body) => {
    const a = await t.newAccount(["SOCIAL_PROFILES"]);
    const created = (await a.api.post("/social-profiles", profileIn({ accessToken: "kept" }))).body;
    expectProblem(await a.api.put(`/social-profiles/${created.id}/token`, body), 400);
    expect(await tokenOf(a.companyId, created.id)).toEqual({ accessToken: "kept" });
    expect((await a.api.get(`/social-profiles/${created.id}`)).body).toEqual(created);
  });

  it("refuses ids that are not UUIDs with 400 on every route", async () => {
    const a = await t.newAccount(["SOCIAL_PROFILES"]);
    for (const id of ["1", "not-a-uuid", `${UUID}0`]) {
      expectProblem(await a.api.get(`/social-profiles/${id}`), 400);
      expectProblem(await a.api.delete(`/social-profiles/${id}`), 400);
      expectProblem(await a.api.put(`/social-profiles/${id}/token`, { accessToken: "t" }), 400);
    }
  });
});

describe("accounts and operations", () => {
  it("answers 404 for another account's profile on every route and leaves it unchanged", async () => {
    const a = await t.newAccount(["SOCIAL_PROFILES"]);
    const b: Account = await t.newAccount(["SOCIAL_PROFILES"]);
    const created = (await a.api.post("/social-profiles", profileIn({ accessToken: "a-token" }))).body;
    expectProblem(await b.api.get(`/social-profiles/${created.id}`), 404);
    expectProblem(await b.api.put(`/social-profiles/${created.id}/token`, { accessToken: "b-token" }), 404);
    expectProblem(await b.api.delete(`/social-profiles/${created.id}`), 404);
    expect((await b.api.get("/social-profiles")).body.total).toBe(0);
    expect((await a.api.get(`/social-profiles/${created.id}`)).body).toEqual(created);
    expect(await tokenOf(a.companyId, created.id)).toEqual({ accessToken: "a-token" });
  });

  it("answers 401 to a key without SOCIAL_PROFILES on every route", async () => {
    const a = await t.newAccount(["SOCIAL_PROFILES"]);
    const created = (await a.api.post("/social-profiles", profileIn())).body;
    for (const ops of [["MEDIA"], ["SMS", "CONTACTS", "WEBHOOKS"]] as const) {
      const other = await t.newAccount([...ops], { companyId: a.companyId });
      expectProblem(await other.api.get("/social-profiles"), 401);
      expectProblem(await other.api.post("/social-profiles", profileIn()), 401);
      expectProblem(await other.api.get(`/social-profiles/${created.id}`), 401);
      expectProblem(await other.api.put(`/social-profiles/${created.id}/token`, { accessToken: "t" }), 401);
      expectProblem(await other.api.delete(`/social-profiles/${created.id}`), 401);
    }
    expectProblem(await t.api.get("/social-profiles"), 401);
    expect(await rowCount(a.companyId)).toBe(1);
    expect(await tokenOf(a.companyId, created.id)).toEqual({ accessToken: expect.stringMatching(/^tok-/) });
  });

  it("answers an Idempotency-Key repeat with the first answer, connecting once", async () => {
    const a = await t.newAccount(["SOCIAL_PROFILES"]);
    const body = profileIn();
    const first = await a.api.post("/social-profiles", body, { headers: { "idempotency-key": "p-1" } });
    const again = await a.api.post("/social-profiles", body, { headers: { "idempotency-key": "p-1" } });
    expect(first.status).toBe(201);
    expect(again.status).toBe(201);
    expect(again.body).toEqual(first.body);
    expect(await rowCount(a.companyId)).toBe(1);
  });
});
