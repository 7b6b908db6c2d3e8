/**
 * Idempotency-Key, once for every creating POST: the first answer (status and body) is stored per
 * account and key for 24 h and replayed to repeats; a repeat with another body is a 422, a repeat
 * while the first still runs a 409. A claim whose request died without an answer is taken over
 * after `abandonAfterS`.
 */
import { createHash } from "node:crypto";
import { QueryTypes, type Sequelize } from "sequelize";

export type Claim =
  | { kind: "claimed" }
  | { kind: "replay"; status: number; body: unknown; headers: Record<string, string> }
  | { kind: "mismatch" }
  | { kind: "running" };

/** 1-255 printable ASCII characters. */
export const IDEMPOTENCY_KEY_RE = /^[\x20-\x7e]{1,255}$/;

/** A canonical JSON text: object keys sorted, so that field order does not change the hash. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

export const requestHash = (method: string, path: string, params: unknown) =>
  createHash("sha256").update(`${method} ${path}\n${canonical(params)}`).digest("hex");

interface Row {
  request_hash: string;
  state: "RUNNING" | "DONE";
  response_status: number | null;
  response_body: unknown;
  response_headers: Record<string, string> | null;
}

export class IdempotencyStore {
  constructor(
    private readonly sequelize: Sequelize,
    private readonly ttlS = 24 * 3600,
    private readonly abandonAfterS = 300,
  ) {}

  async claim(companyId: string, key: string, hash: string): Promise<Claim> {
    const claimed = await this.sequelize.query(
      `INSERT INTO idempotency_keys (company_id, key, request_hash, state, created_at)
       VALUES (:companyId, :key, :hash, 'RUNNING', now())
       ON CONFLICT (company_id, key) DO UPDATE
         SET request_hash = EXCLUDED.request_hash, state = 'RUNNING', response_status = NULL,
             response_body = NULL, response_headers = NULL, created_at = now()
         WHERE idempotency_keys.created_at < now() - make_interval(secs => :ttl)
            OR (idempotency_keys.state = 'RUNNING' AND idempotency_keys.created_at < now() - make_interval(secs => :abandon))
       RETURNING key`,
      { replacements: { companyId, key, hash, ttl: this.ttlS, abandon: this.abandonAfterS }, type: QueryTypes.SELECT },
    );
    if (claimed.length > 0) return { kind: "claimed" };
    const [row] = await this.sequelize.query<Row>(
      `SELECT request_hash, state, response_status, response_body, response_headers
         FROM idempotency_keys WHERE company_id = :companyId AND key = :key`,
      { replacements: { companyId, key }, type: QueryTypes.SELECT },
    );
    if (!row) return this.claim(companyId, key, hash); // expired and removed in between
    if (row.request_hash !== hash) return { kind: "mismatch" };
    if (row.state === "RUNNING") return { kind: "running" };
    return { kind: "replay", status: row.response_status ?? 200, body: row.response_body, headers: row.response_headers ?? {} };
  }

  async complete(companyId: string, key: string, status: number, body: unknown, headers: Record<string, string>): Promise<void> {
    await this.sequelize.query(
      `UPDATE idempotency_keys
          SET state = 'DONE', response_status = :status, response_body = CAST(:body AS jsonb), response_headers = CAST(:headers AS jsonb)
        WHERE company_id = :companyId AND key = :key`,
      { replacements: { companyId, key, status, body: JSON.stringify(body ?? null), headers: JSON.stringify(headers) } },
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
