/**
 * Idempotency-Key, once for every creating POST: the first answer (status and body) is stored per
 * account and key for 24 h and replayed to repeats; a repeat with another body is a 422, a repeat
 * while the first still runs a 409. A claim whose request died without an answer (a node lost, a
 * timeout whose handler may still be running) is taken over after `abandonAfterS`, which is longer
 * than any action may run.
 */
import { createCipheriv, createDecipheriv, createHash, hkdfSync, randomBytes } from "node:crypto";
import { ApiError } from "../../lib/errors";
import { QueryTypes, type Sequelize } from "sequelize";

export type Claim =
  { kind: "claimed" } | { kind: "replay"; status: number; body: unknown; headers: Record<string, string> } | { kind: "mismatch" } | { kind: "running" };

/** 1-255 printable ASCII characters. */
export const IDEMPOTENCY_KEY_RE = /^[\x20-\x7e]{1,255}$/;

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

/** The request's identity: who (the calling key), what (method and path) and with which params. */
export const requestHash = (keyId: string, method: string, path: string, params: unknown) =>
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

interface Row {
  request_hash: string;
  state: "RUNNING" | "DONE";
  response_status: number | null;
  response_body: string | null;
  response_headers: Record<string, string> | null;
}

export class IdempotencyStore {
  constructor(
    private readonly sequelize: Sequelize,
    private readonly ttlS = 24 * 3600,
    private readonly abandonAfterS = 90,
  ) {}

  /** `runForS`: how long the action may run; a claim is taken over only well after that. */
  async claim(companyId: string, key: string, hash: string, sealer: Sealer, runForS = 30): Promise<Claim> {
    const abandon = Math.max(this.abandonAfterS, Math.ceil(runForS) + 60);
    const claimed = await this.sequelize.query(
      `INSERT INTO idempotency_keys (company_id, key, request_hash, state, created_at)
       VALUES (:companyId, :key, :hash, 'RUNNING', now())
       ON CONFLICT (company_id, key) DO UPDATE
         SET request_hash = EXCLUDED.request_hash, state = 'RUNNING', response_status = NULL,
             response_body = NULL, response_headers = NULL, created_at = now()
         WHERE idempotency_keys.created_at < now() - make_interval(secs => :ttl)
            OR (idempotency_keys.state = 'RUNNING' AND idempotency_keys.created_at < now() - make_interval(secs => :abandon))
       RETURNING key`,
      { replacements: { companyId, key, hash, ttl: this.ttlS, abandon }, type: QueryTypes.SELECT },
    );
    if (claimed.length > 0) return { kind: "claimed" };
    const [row] = await this.sequelize.query<Row>(
      `SELECT request_hash, state, response_status, response_body, response_headers
         FROM idempotency_keys WHERE company_id = :companyId AND key = :key`,
      { replacements: { companyId, key }, type: QueryTypes.SELECT },
    );
    if (!row) return this.claim(companyId, key, hash, sealer, runForS); // expired and removed in between
    if (row.request_hash !== hash) return { kind: "mismatch" };
    if (row.state === "RUNNING") return { kind: "running" };
    const body = row.response_body == null ? null : sealer.open(row.response_body);
    if (body === undefined) return { kind: "mismatch" };
    return { kind: "replay", status: row.response_status ?? 200, body, headers: row.response_headers ?? {} };
  }

  async complete(companyId: string, key: string, status: number, body: unknown, headers: Record<string, string>, sealer: Sealer): Promise<void> {
    await this.sequelize.query(
      `UPDATE idempotency_keys
          SET state = 'DONE', response_status = :status, response_body = :body, response_headers = CAST(:headers AS jsonb)
        WHERE company_id = :companyId AND key = :key`,
      { replacements: { companyId, key, status, body: sealer.seal(body), headers: JSON.stringify(headers) } },
    );
  }

  /** Forgets a claim whose request failed on our side, so that the partner can simply retry. */
  async release(companyId: string, key: string): Promise<void> {
    await this.sequelize.query(`DELETE FROM idempotency_keys WHERE company_id = :companyId AND key = :key AND state = 'RUNNING'`, {
      replacements: { companyId, key },
    });
  }

  async purgeExpired(): Promise<number> {
    const [, meta] = await this.sequelize.query(`DELETE FROM idempotency_keys WHERE created_at < now() - make_interval(secs => :ttl)`, {
      replacements: { ttl: this.ttlS },
    });
    return (meta as { rowCount?: number })?.rowCount ?? 0;
  }
}
