/**
 * Idempotency-Key, once for every creating POST: the first answer (status and body) is stored per
 * account and key for 24 h and replayed to repeats; a repeat with another body is a 422, a repeat
 * while the first still runs a 409. A claim whose request died without an answer (a node lost, a
 * timeout whose handler may still be running) is taken over after `abandonAfterS`, which is longer
 * than any action may run. The statements are in gateway.idempotency.queries.ts.
 */
import { createCipheriv, createDecipheriv, createHash, createHmac, hkdfSync, randomBytes } from "node:crypto";
import type { ServerResponse } from "node:http";
import type { Service } from "moleculer";
import type { Sequelize } from "sequelize";
import { ApiError } from "../../lib/errors";
import { writeProblem } from "../../lib/http/http";
import { writeAnswer, type AnswerMeta } from "../../lib/http/moleculer-web";
import { toProblem } from "../../lib/http/problem";
import { claimKey, completeKey, purgeExpiredKeys, releaseKey, storedKey } from "./gateway.idempotency.queries";
import type { GwRequest } from "./gateway.request";

export type Claim =
  { kind: "claimed" } | { kind: "replay"; status: number; body: unknown; headers: Record<string, string> } | { kind: "mismatch" } | { kind: "running" };

/** 1-255 printable ASCII characters. */
export const IDEMPOTENCY_KEY_RE = /^[\x20-\x7e]{1,255}$/;

/** The Idempotency-Key header's value; 400 when it is not 1-255 printable ASCII characters (or given twice). */
export function checkIdempotencyKey(key: string | string[]): string {
  if (typeof key !== "string" || !IDEMPOTENCY_KEY_RE.test(key)) {
    throw new ApiError("INVALID_HEADER", "Idempotency-Key must be 1-255 printable ASCII characters.", {
      errors: [{ path: "Idempotency-Key", message: "must be 1-255 printable characters" }],
    });
  }
  return key;
}

const MAX_DEPTH = 32;

/** A canonical JSON text: object keys sorted, so that field order does not change the hash. */
function canonical(value: unknown, depth = 0): string {
  if (depth > MAX_DEPTH) throw new ApiError("VALIDATION_ERROR", `The request body is nested more than ${MAX_DEPTH} levels deep.`);
  if (Array.isArray(value)) return `[${value.map((v) => canonical(v, depth + 1)).join(",")}]`;
  if (value && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v, depth + 1)}`).join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

/**
 * The request's identity: who (the calling key), what (method and path) and with which params, as an
 * HMAC keyed with a secret derived from the caller's API key (which the database does not hold), so
 * a stored hash cannot be tested against guessed params (an access token in the body, say).
 */
export function requestHash(apiKey: string, companyId: string, keyId: string, method: string, path: string, params: unknown): string {
  const key = Buffer.from(hkdfSync("sha256", apiKey, "pgw-idempotency-request", companyId, 32));
  return createHmac("sha256", key)
    .update(`${keyId}\n${method} ${path}\n${canonical(params)}`)
    .digest("hex");
}

/**
 * The unkeyed hash stored before requestHash became an HMAC: still accepted (never stored) for a
 * repeat of a request answered before the upgrade, until those rows expire (24 h). Remove after that.
 */
const legacyRequestHash = (keyId: string, method: string, path: string, params: unknown) =>
  createHash("sha256")
    .update(`${keyId}\n${method} ${path}\n${canonical(params)}`)
    .digest("hex");

/** Seals stored answers with a key only the caller holds (derived from its API key's value). */
export class Sealer {
  private readonly key: Buffer;
  constructor(apiKey: string, companyId: string, idempotencyKey: string) {
    this.key = Buffer.from(hkdfSync("sha256", apiKey, "pgw-idempotency", `${companyId}\n${idempotencyKey}`, 32));
  }
  seal(value: unknown): string {
    const iv = randomBytes(12);
    const c = createCipheriv("aes-256-gcm", this.key, iv);
    const ct = Buffer.concat([c.update(JSON.stringify(value ?? null), "utf8"), c.final()]);
    return Buffer.concat([iv, c.getAuthTag(), ct]).toString("base64");
  }
  /** The stored value, or `undefined` when it was not sealed for this caller. */
  open(sealed: string): unknown {
    try {
      const buf = Buffer.from(sealed, "base64");
      const d = createDecipheriv("aes-256-gcm", this.key, buf.subarray(0, 12));
      d.setAuthTag(buf.subarray(12, 28));
      return JSON.parse(Buffer.concat([d.update(buf.subarray(28)), d.final()]).toString("utf8"));
    } catch {
      return undefined;
    }
  }
}

export class IdempotencyStore {
  constructor(
    private readonly sequelize: Sequelize,
    private readonly ttlS = 24 * 3600,
    private readonly abandonAfterS = 90,
  ) {}

  /** `runForS`: how long the action may run; a claim is taken over only well after that. */
  /** `legacyHash`: also taken as this request's hash when met in a stored row, never stored. */
  async claim(companyId: string, key: string, hash: string, sealer: Sealer, runForS = 30, legacyHash?: string): Promise<Claim> {
    const abandon = Math.max(this.abandonAfterS, Math.ceil(runForS) + 60);
    if (await claimKey(this.sequelize, { companyId, key, hash, ttlS: this.ttlS, abandonS: abandon })) return { kind: "claimed" };
    const row = await storedKey(this.sequelize, companyId, key);
    if (!row) return this.claim(companyId, key, hash, sealer, runForS, legacyHash); // expired and removed in between
    if (row.request_hash !== hash && (legacyHash === undefined || row.request_hash !== legacyHash)) return { kind: "mismatch" };
    if (row.state === "RUNNING") return { kind: "running" };
    const body = row.response_body == null ? null : sealer.open(row.response_body);
    if (body === undefined) return { kind: "mismatch" };
    return { kind: "replay", status: row.response_status ?? 200, body, headers: row.response_headers ?? {} };
  }

  async complete(companyId: string, key: string, status: number, body: unknown, headers: Record<string, string>, sealer: Sealer): Promise<void> {
    await completeKey(this.sequelize, { companyId, key, status, sealedBody: sealer.seal(body), headers });
  }

  /** Forgets a claim whose request failed on our side, so that the partner can simply retry. */
  async release(companyId: string, key: string): Promise<void> {
    await releaseKey(this.sequelize, companyId, key);
  }

  purgeExpired(): Promise<number> {
    return purgeExpiredKeys(this.sequelize, this.ttlS);
  }
}

/** What the idempotent call needs of the gateway service. */
export interface IdempotentHost {
  idempotency: IdempotencyStore;
  logger: Pick<Service["logger"], "error" | "warn">;
  checkResponse(req: GwRequest, status: number, data: unknown): void;
}

/** Answers a repeat with the stored answer (marked Idempotent-Replayed); a stored problem gets this request's id. */
function writeReplay(res: ServerResponse, claim: Extract<Claim, { kind: "replay" }>, requestId: string): void {
  res.setHeader("Idempotent-Replayed", "true");
  for (const [k, v] of Object.entries(claim.headers)) res.setHeader(k, v);
  if (claim.status >= 400) {
    writeProblem(res, { ...(claim.body as object), requestId } as never);
  } else {
    res.statusCode = claim.status;
    if (claim.status === 204 || claim.body == null) res.end();
    else {
      res.setHeader("Content-Type", "application/json; charset=utf-8");
      res.end(JSON.stringify(claim.body));
    }
  }
}

/** Stores an answer; if that fails the caller still gets the answer, and the claim stays until abandoned. */
async function storeAnswer(
  host: IdempotentHost,
  companyId: string,
  key: string,
  status: number,
  body: unknown,
  headers: Record<string, string>,
  sealer: Sealer,
): Promise<void> {
  try {
    await host.idempotency.complete(companyId, key, status, body, headers, sealer);
  } catch (err) {
    host.logger.error({ err: { name: (err as Error).name, message: (err as Error).message } }, "could not store an idempotent answer");
  }
}

/**
 * A POST with Idempotency-Key: claims the key, then replays the stored answer, refuses (another
 * request, or the first still running), or calls the action and stores its answer. Always answers
 * the request itself (true: moleculer-web must not go on to a 404).
 */
export async function callIdempotent(
  host: IdempotentHost,
  callOptions: { timeout?: number },
  actionName: string,
  req: GwRequest,
  res: ServerResponse,
  params: Record<string, unknown>,
  key: string,
  defaultTimeoutMs: number,
): Promise<true> {
  const ctx = req.$ctx;
  const companyId = ctx.meta.companyId;
  const apiKey = req.headers["x-api-key"] as string;
  const sealer = new Sealer(apiKey, companyId, key);
  const timeout = callOptions.timeout ?? defaultTimeoutMs;
  const [method, path] = [req.method!, req.parsedUrl ?? ""];
  const hash = requestHash(apiKey, companyId, ctx.meta.keyId, method, path, params);
  const claim = await host.idempotency.claim(companyId, key, hash, sealer, timeout / 1000, legacyRequestHash(ctx.meta.keyId, method, path, params));
  if (claim.kind === "mismatch")
    throw new ApiError("IDEMPOTENCY_KEY_REUSED", "This Idempotency-Key was used for a different request (or by another key) in the last 24 hours.");
  if (claim.kind === "running") throw new ApiError("IDEMPOTENCY_IN_PROGRESS", "A request with this Idempotency-Key is still being processed; retry shortly.");
  if (claim.kind === "replay") {
    writeReplay(res, claim, req.$requestId);
    return true;
  }
  let data: unknown;
  try {
    data = await ctx.call(actionName, params, callOptions);
  } catch (err) {
    const problem = toProblem(err, req.$requestId);
    const type = (err as { type?: string }).type ?? "";
    if (problem.status < 500) {
      const { requestId: _drop, ...stored } = problem;
      await storeAnswer(host, companyId, key, problem.status, stored, {}, sealer);
    } else if (type !== "REQUEST_TIMEOUT") {
      // Nothing ran (no service), or the action ended with an error: it is over, retry freely.
      await host.idempotency.release(companyId, key).catch(() => undefined);
    }
    // A timeout leaves the claim RUNNING: the handler may still be at work, so repeats get 409
    // until the claim is abandoned (IdempotencyStore.abandonAfterS) rather than acting twice.
    throw err;
  }
  const status = ctx.meta.$statusCode ?? 200;
  host.checkResponse(req, status, data);
  const location = (ctx.meta as { $location?: string }).$location;
  await storeAnswer(host, companyId, key, status, data, location ? { Location: location } : {}, sealer);
  if (location && status === 202) res.setHeader("Location", location);
  writeAnswer(req, res, ctx.meta as AnswerMeta, data, host.logger);
  return true;
}
