/**
 * An access token is never returned, never logged and never stored in clear: a recognisable token
 * goes through create, a refused duplicate, PUT token, idempotent replays and every kind of bad
 * request next to it (wrong types, too long, control characters, malformed JSON, another account),
 * with every log line of the brokers captured at debug level; none of the answers, log lines or
 * database rows (profiles and stored idempotent answers) holds it. A token no configured key can
 * open is an honest, logged error naming ids only, and the profile is still listed.
 */
import { randomBytes } from "node:crypto";
import { QueryTypes } from "sequelize";
import { ApiError, ERROR_TYPES } from "../../lib/errors";
import { loggerOptions } from "../../lib/observability/logger";
import { startTestApp, testConfig, type TestApp } from "../helpers/app";
import { expectProblem } from "../helpers/expect";
import type { Res } from "../helpers/http";
import { capturedLogs } from "../helpers/logs";

const { lines: logLines, stream: logStream } = capturedLogs();

let t: TestApp;
beforeAll(async () => {
  const config = testConfig({ logLevel: "debug" });
  t = await startTestApp({ services: ["gateway", "auth", "profiles"], config: { logLevel: "debug" }, broker: { logger: loggerOptions(config, logStream) } });
});
afterAll(() => t?.stop());

const secret = (label: string) => `SECRET${label}${randomBytes(12).toString("hex")}`;

it("never answers, logs or stores a token in clear, on any path", async () => {
  const a = await t.newAccount(["SOCIAL_PROFILES"]);
  const b = await t.newAccount(["SOCIAL_PROFILES"]);
  const tokens = { created: secret("C"), replaced: secret("R"), refused: secret("X"), idem: secret("I") };
  const answers: Res[] = [];
  const send = async (res: Promise<Res>, status: number) => {
    const r = await res;
    answers.push(r);
    expect({ status: r.status, body: r.body }).toEqual({ status, body: expect.anything() });
    return r;
  };

  const created = await send(a.api.post("/social-profiles", { network: "FACEBOOK", externalId: "p1", accessToken: tokens.created }), 201);
  const id = created.body.id as string;
  await send(a.api.post("/social-profiles", { network: "FACEBOOK", externalId: "p1", accessToken: tokens.refused }), 409);
  await send(a.api.put(`/social-profiles/${id}/token`, { accessToken: tokens.replaced }), 200);
  await send(a.api.post("/social-profiles", { network: "X", externalId: "p2", accessToken: tokens.idem }, { headers: { "idempotency-key": "k1" } }), 201);
  await send(a.api.post("/social-profiles", { network: "X", externalId: "p2", accessToken: tokens.idem }, { headers: { "idempotency-key": "k1" } }), 201);
  await send(a.api.post("/social-profiles", { network: "X", externalId: "p3", accessToken: tokens.refused }, { headers: { "idempotency-key": "k1" } }), 422);

  const refused = tokens.refused;
  for (const body of [
    { network: 5, externalId: "p9", accessToken: refused },
    { network: "MYSPACE", externalId: "p9", accessToken: refused },
    { network: "X", externalId: null, accessToken: refused },
    { network: "X", externalId: ["p9"], accessToken: refused, displayName: 3 },
    { network: "X", externalId: "p9", accessToken: refused, extra: true },
    { network: "X", externalId: "p9", accessToken: `${refused}\n` },
    { network: "X", externalId: "p9", accessToken: `${refused}\u0000` },
    { network: "X", externalId: "p9", accessToken: refused.repeat(300) },
    { network: "X", externalId: "p9", accessToken: [refused] },
    { network: "X", externalId: "p9", accessToken: { value: refused } },
  ]) {
    expectProblem(await send(a.api.post("/social-profiles", body), 400), 400);
  }
  await send(
    a.api.request("POST", "/social-profiles", {
      raw: `{"network":"X","externalId":"p9","accessToken":"${refused}" x}`,
      headers: { "content-type": "application/json" },
    }),
    400,
  );
  await send(a.api.request("POST", "/social-profiles", { raw: `accessToken=${refused}`, headers: { "content-type": "text/plain" } }), 415);
  await send(a.api.post(`/social-profiles?accessToken=${refused}`, { network: "X", externalId: "p9" }), 400);
  await send(a.api.put(`/social-profiles/${id}/token?accessToken=${refused}`, {}), 400);
  await send(a.api.put(`/social-profiles/${id}/token`, { accessToken: `${refused}\t` }), 400);
  await send(a.api.put(`/social-profiles/${id}/token`, { accessToken: refused, status: "CONNECTED" }), 400);
  await send(a.api.put(`/social-profiles/not-an-id/token`, { accessToken: refused }), 400);
  await send(b.api.put(`/social-profiles/${id}/token`, { accessToken: refused }), 404);
  await send(t.api.put(`/social-profiles/${id}/token`, { accessToken: refused }), 401);
  await send(a.api.get(`/social-profiles/${id}`), 200);
  await send(a.api.get("/social-profiles"), 200);

  // A token whose key id matches no configured key: a logged 500 naming ids, the profile still listed.
  await t.db.sequelize.query("UPDATE social_profiles SET token_key_id = 'ffffffffffffffff' WHERE id = $1", { bind: [id] });
  const err = await t.app.broker.call("profiles.accessToken", { companyId: a.companyId, id }).catch((e: unknown) => e);
  expect(err).toMatchObject({ code: 500, type: "PROFILE_TOKEN_UNREADABLE", data: { id, keyId: "ffffffffffffffff" } });
  expect(err).toBeInstanceOf(ApiError);
  expect(ERROR_TYPES.PROFILE_TOKEN_UNREADABLE.status).toBe(500);
  expect(logLines.some((l) => l.profileId === id && l.keyId === "ffffffffffffffff" && l.level === 50)).toBe(true);
  const listed = await send(a.api.get("/social-profiles"), 200);
  expect(listed.body.data.map((p: { id: string }) => p.id)).toContain(id);

  // Nothing in clear: answers, every log line, the profile rows and the stored idempotent answers.
  await new Promise((r) => setTimeout(r, 200));
  expect(logLines.length).toBeGreaterThan(50);
  const logged = JSON.stringify(logLines);
  const answered = answers.map((r) => r.text + JSON.stringify([...r.headers])).join("\n");
  const profiles = await t.db.sequelize.query<Record<string, unknown>>("SELECT * FROM social_profiles", { type: QueryTypes.SELECT });
  const stored = JSON.stringify(profiles.map((r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, Buffer.isBuffer(v) ? v.toString("latin1") : v]))));
  const idem = JSON.stringify(await t.db.sequelize.query("SELECT * FROM idempotency_keys", { type: QueryTypes.SELECT }));
  expect(profiles.length).toBe(2);
  for (const token of Object.values(tokens)) {
    for (const [where, text] of Object.entries({ logged, answered, stored, idem })) {
      expect({ where, leaks: text.includes(token) || text.includes(token.slice(6)) }).toEqual({ where, leaks: false });
    }
  }
});

it("documents accessToken as write-only with no example anywhere in the OpenAPI document", async () => {
  const res = await t.root.get("/api/partner-gateway/v1/openapi.json");
  expect(res.status).toBe(200);
  const doc = res.body as { components: { schemas: Record<string, { properties?: Record<string, Record<string, unknown>> }> } };
  const holders = Object.entries(doc.components.schemas).filter(([, s]) => s.properties?.accessToken);
  expect(holders.map(([name]) => name).sort()).toEqual(["CreateSocialProfileIn", "SocialProfileTokenInBody"]);
  for (const [, s] of holders) {
    expect(s.properties!.accessToken).toMatchObject({ type: "string", writeOnly: true, maxLength: 8192 });
    expect(s.properties!.accessToken).not.toHaveProperty("examples");
    expect(s.properties!.accessToken).not.toHaveProperty("example");
  }
  expect(JSON.stringify(doc.components.schemas.SocialProfile)).not.toContain("accessToken");
  // The request examples the generator builds show only its type placeholder, never a token-like value.
  const shown = [...res.text.matchAll(/"accessToken"\s*:\s*("(?:[^"\\]|\\.)*")/g)].map((m) => JSON.parse(m[1]!));
  expect(shown.length).toBeGreaterThan(0);
  expect(new Set(shown)).toEqual(new Set(["string"]));
});
