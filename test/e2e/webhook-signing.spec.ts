/**
 * Signed webhooks (contract section 8) end to end: registration with `signed`, the secret shown
 * once, deliveries to a real HTTPS receiver verified as a partner's receiver would, with the
 * `standardwebhooks` library (never with our own HMAC code); the same webhook-id on every attempt of
 * an event; rotation with an overlap (WEBHOOK_SECRET_OVERLAP_MS, short here) during which both
 * secrets verify; unsigned webhooks unchanged (spec part 5.8); and the secret in no log line and
 * nowhere in the database in clear.
 */
import { QueryTypes } from "sequelize";
import { Webhook, WebhookVerificationError } from "standardwebhooks";
import type { IncomingMessage } from "node:http";
import { loggerOptions } from "../../lib/observability/logger";
import { startTestApp, testConfig, uid, type Account, type TestApp } from "../helpers/app";
import { messageIn, smsReceiptIn } from "../helpers/builders";
import { expectProblem } from "../helpers/expect";
import { capturedLogs } from "../helpers/logs";
import { startReceiver, testCa, type Receiver } from "../helpers/receiver";

const OVERLAP_MS = 4000;
const SECRET_RE = /^whsec_[A-Za-z0-9+/]{43}=$/;
const { lines: logLines, stream: logStream } = capturedLogs();

let t: TestApp;
const receivers: Receiver[] = [];
/** Every secret an answer showed, to look for in the logs and the database at the end. */
const secrets: string[] = [];

beforeAll(async () => {
  const ca = await testCa();
  const config = {
    logLevel: "debug" as const,
    webhookAllowPrivateTargets: true,
    extraCaCerts: ca.file,
    notifierRetryDelaySmsMs: 300,
    notifierPollMs: 20,
    webhookSecretOverlapMs: OVERLAP_MS,
  };
  t = await startTestApp({
    services: ["gateway", "auth", "tracking", "notifier"],
    config,
    broker: { logger: loggerOptions(testConfig(config), logStream) },
  });
});
afterAll(async () => {
  await t?.stop();
  for (const r of receivers) await r.close();
});

/** A request as the receiver saw it, answered or not. */
interface Seen {
  body: string;
  headers: IncomingMessage["headers"];
}

/** A receiver that keeps every request (also those it fails) and answers `status(n)`. */
async function receiver(status: (n: number) => number = () => 200): Promise<Receiver & { requests: Seen[] }> {
  const r = await startReceiver();
  receivers.push(r);
  const all: Seen[] = [];
  r.behave((req, n, body) => {
    all.push({ body, headers: req.headers });
    return { status: status(n) };
  });
  return Object.assign(r, { requests: all });
}

/** The shown secret, checked for its form: whsec_ and 32 bytes in base64. */
function shown(secret: unknown): string {
  expect(secret).toMatch(SECRET_RE);
  expect(Buffer.from((secret as string).slice(6), "base64")).toHaveLength(32);
  secrets.push(secret as string);
  return secret as string;
}

async function signedAccount(r: Receiver): Promise<{ a: Account; secret: string }> {
  const a = await t.newAccount(["WEBHOOKS", "SMS"]);
  const res = await a.api.post("/webhooks/delivery-status", { callbackUrl: r.url(), signed: true });
  expect(res.status).toBe(201);
  expect(res.body).toMatchObject({ companyId: a.companyId, callbackUrl: r.url(), signed: true });
  return { a, secret: shown(res.body.signingSecret) };
}

async function delivered(companyId: string): Promise<string> {
  const m = messageIn(companyId, { customerMessageId: uid("m") });
  expect((await t.ingress.post("/messages", m)).status).toBe(202);
  expect((await t.ingress.post("/receipts/sms", smsReceiptIn(m, { DELIVERY_STATUS: 3 }))).status).toBe(202);
  return m.customerMessageId;
}

const headersOf = (s: { headers: IncomingMessage["headers"] }) => s.headers as Record<string, string>;

/** What a partner's receiver does: the library's verification, which throws unless a signature matches. */
const verify = (secret: string, s: { body: string; headers: IncomingMessage["headers"] }) => new Webhook(secret).verify(s.body, headersOf(s));

describe("registration", () => {
  it("shows the secret once, in the registration's answer, never in GET; signed defaults to false", async () => {
    const r = await receiver();
    const { a } = await signedAccount(r);
    const got = await a.api.get("/webhooks/delivery-status");
    expect(got.status).toBe(200);
    expect(got.body).toEqual({ companyId: a.companyId, callbackUrl: r.url(), signed: true, createdAt: expect.any(String), updatedAt: expect.any(String) });

    const b = await t.newAccount(["WEBHOOKS"]);
    const plain = await b.api.post("/webhooks/delivery-status", { callbackUrl: r.url() });
    expect(plain.status).toBe(201);
    expect(plain.body.signed).toBe(false);
    expect(plain.body).not.toHaveProperty("signingSecret");
    expectProblem(await b.api.post("/webhooks/delivery-status", { callbackUrl: r.url(), signed: "yes" }), 400);
  });

  it("PUT signed:true keeps the secret of a signed webhook; signed:false drops it; signed:true again makes a new one", async () => {
    const r = await receiver();
    const { a, secret } = await signedAccount(r);
    const kept = await a.api.put("/webhooks/delivery-status", { callbackUrl: r.url("/other"), signed: true });
    expect(kept.status).toBe(200);
    expect(kept.body).toMatchObject({ callbackUrl: r.url("/other"), signed: true });
    expect(kept.body).not.toHaveProperty("signingSecret");
    await delivered(a.companyId);
    await r.waitFor(1);
    expect(verify(secret, r.requests[0]!)).toMatchObject({ eventType: "DELIVERY" });

    const off = await a.api.put("/webhooks/delivery-status", { callbackUrl: r.url(), signed: false });
    expect(off.body).toMatchObject({ signed: false });
    expect(off.body).not.toHaveProperty("signingSecret");
    await delivered(a.companyId);
    await r.waitFor(2);
    expect(r.requests[1]!.headers["webhook-signature"]).toBeUndefined();
    expectProblem(await a.api.post("/webhooks/delivery-status/secret"), 409);

    const on = await a.api.put("/webhooks/delivery-status", { callbackUrl: r.url(), signed: true });
    expect(on.body.signed).toBe(true);
    const again = shown(on.body.signingSecret);
    expect(again).not.toBe(secret);
    await delivered(a.companyId);
    await r.waitFor(3);
    expect(verify(again, r.requests[2]!)).toMatchObject({ eventType: "DELIVERY" });
    expect(() => verify(secret, r.requests[2]!)).toThrow(WebhookVerificationError);
  });
});

describe("delivery", () => {
  it("signs in the Standard Webhooks form: standardwebhooks verifies the body with the secret, and only with it", async () => {
    const r = await receiver();
    const { a, secret } = await signedAccount(r);
    const id = await delivered(a.companyId);
    const [got] = await r.waitFor(1);
    const h = headersOf(got!);
    expect(h["webhook-id"]).toMatch(/^msg_[A-Za-z0-9_-]{32}$/);
    expect(Math.abs(Number(h["webhook-timestamp"]) - Date.now() / 1000)).toBeLessThan(30);
    expect(h["webhook-signature"]).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
    expect(verify(secret, got!)).toEqual(got!.json);
    expect(got!.json).toMatchObject({ eventType: "DELIVERY", messageId: id });
    const other = `whsec_${Buffer.alloc(32, 7).toString("base64")}`;
    expect(() => verify(other, got!)).toThrow(WebhookVerificationError);
    expect(() => new Webhook(secret).verify(got!.body.replace(id, `${id}x`), h)).toThrow(WebhookVerificationError);
  });

  it("sends no signature headers for an unsigned webhook (spec part 5.8)", async () => {
    const r = await receiver();
    const a = await t.newAccount(["WEBHOOKS", "SMS"]);
    expect((await a.api.post("/webhooks/delivery-status", { callbackUrl: r.url(), signed: false })).status).toBe(201);
    await delivered(a.companyId);
    const [got] = await r.waitFor(1);
    for (const name of ["webhook-id", "webhook-timestamp", "webhook-signature"]) expect(got!.headers[name]).toBeUndefined();
  });

  it("keeps the webhook-id of an event on every attempt (a new timestamp and signature each), another event another id", async () => {
    const r = await receiver((n) => (n === 1 ? 500 : 200));
    const { a, secret } = await signedAccount(r);
    await delivered(a.companyId);
    await r.waitFor(1);
    expect(r.requests).toHaveLength(2);
    const [first, second] = r.requests.map((s) => headersOf(s));
    expect(verify(secret, r.requests[0]!)).toEqual(verify(secret, r.requests[1]!));
    expect(second!["webhook-id"]).toBe(first!["webhook-id"]);
    expect(Number(second!["webhook-timestamp"])).toBeGreaterThanOrEqual(Number(first!["webhook-timestamp"]));
    await delivered(a.companyId);
    await r.waitFor(2);
    expect(headersOf(r.requests[2]!)["webhook-id"]).not.toBe(first!["webhook-id"]);
  });
});

describe("rotation", () => {
  it("signs with both secrets during the overlap, then with the new one alone", async () => {
    const r = await receiver();
    const { a, secret: old } = await signedAccount(r);
    const rotated = await a.api.post("/webhooks/delivery-status/secret");
    const rotatedAt = Date.now();
    expect(rotated.status).toBe(200);
    expect(rotated.body).toMatchObject({ companyId: a.companyId, signed: true });
    const fresh = shown(rotated.body.signingSecret);
    expect(fresh).not.toBe(old);
    expect((await a.api.get("/webhooks/delivery-status")).body).not.toHaveProperty("signingSecret");

    await delivered(a.companyId);
    const [during] = await r.waitFor(1);
    // (Sent within the overlap: the test relies on a delivery taking well under OVERLAP_MS.)
    expect(Date.now() - rotatedAt).toBeLessThan(OVERLAP_MS);
    expect(headersOf(during!)["webhook-signature"]!.split(" ")).toHaveLength(2);
    expect(verify(fresh, during!)).toEqual(during!.json);
    expect(verify(old, during!)).toEqual(during!.json);

    await new Promise((res) => setTimeout(res, rotatedAt + OVERLAP_MS + 200 - Date.now()));
    await delivered(a.companyId);
    const after = (await r.waitFor(2))[1]!;
    expect(headersOf(after)["webhook-signature"]!.split(" ")).toHaveLength(1);
    expect(verify(fresh, after)).toEqual(after.json);
    expect(() => verify(old, after)).toThrow(WebhookVerificationError);

    // Housekeeping drops the replaced secret once its overlap is over.
    const replaced = `SELECT previous_signing_secret IS NOT NULL AS kept FROM webhooks WHERE company_id = $1`;
    expect(await t.db.sequelize.query(replaced, { bind: [a.companyId], plain: true })).toEqual({ kept: true });
    await t.app.broker.call("notifier.housekeep");
    expect(await t.db.sequelize.query(replaced, { bind: [a.companyId], plain: true })).toEqual({ kept: false });
  });

  it("answers 404 without a webhook and 409 for an unsigned one; another account cannot rotate yours", async () => {
    const r = await receiver();
    const { a, secret } = await signedAccount(r);
    const b = await t.newAccount(["WEBHOOKS"]);
    const none = await b.api.post("/webhooks/delivery-status/secret");
    expectProblem(none, 404);
    expect(none.body.type).toMatch(/webhook-not-found/);
    expect((await b.api.post("/webhooks/delivery-status", { callbackUrl: r.url() })).status).toBe(201);
    const unsigned = await b.api.post("/webhooks/delivery-status/secret");
    expectProblem(unsigned, 409);
    expect(unsigned.body.type).toMatch(/webhook-not-signed/);
    expectProblem(await t.newAccount(["SMS"]).then((c) => c.api.post("/webhooks/delivery-status/secret")), 401);
    expectProblem(await a.api.post("/webhooks/delivery-status/secret", { extra: 1 }), 400);

    // A's secret is untouched: its next delivery carries one signature, by that secret.
    await delivered(a.companyId);
    const [got] = await r.waitFor(1);
    expect(headersOf(got!)["webhook-signature"]!.split(" ")).toHaveLength(1);
    expect(verify(secret, got!)).toEqual(got!.json);
  });

  it("replays a rotation repeated with its Idempotency-Key (the same secret, rotated once)", async () => {
    const r = await receiver();
    const { a, secret: old } = await signedAccount(r);
    const key = { headers: { "idempotency-key": uid("rot") } };
    const first = await a.api.post("/webhooks/delivery-status/secret", undefined, key);
    const repeat = await a.api.post("/webhooks/delivery-status/secret", undefined, key);
    expect(repeat.status).toBe(200);
    expect(repeat.body.signingSecret).toBe(shown(first.body.signingSecret));
    await delivered(a.companyId);
    const [got] = await r.waitFor(1);
    expect(verify(first.body.signingSecret, got!)).toEqual(got!.json);
    expect(verify(old, got!)).toEqual(got!.json);
  });
});

describe("secrecy", () => {
  it("never logs a secret, nor stores one in clear (webhooks, stored idempotent answers)", async () => {
    expect(secrets.length).toBeGreaterThanOrEqual(6);
    // The debug-level lines of every request above were captured: the gateway's, the notifier's.
    expect(logLines.length).toBeGreaterThan(50);
    const logged = logLines.map((l) => JSON.stringify(l)).join("\n");
    const rows = await t.db.sequelize.query<{ dump: string }>(
      `SELECT row_to_json(w)::text || encode(coalesce(signing_secret, ''), 'escape') || encode(coalesce(previous_signing_secret, ''), 'escape') AS dump FROM webhooks w
       UNION ALL SELECT row_to_json(i)::text FROM idempotency_keys i`,
      { type: QueryTypes.SELECT },
    );
    const stored = rows.map((x) => x.dump).join("\n");
    for (const secret of secrets) {
      const bytes = Buffer.from(secret.slice(6), "base64");
      for (const form of [secret, secret.slice(6), bytes.toString("hex"), bytes.toString("base64url")]) {
        expect(logged.includes(form)).toBe(false);
        expect(stored.includes(form)).toBe(false);
      }
    }
  });
});
