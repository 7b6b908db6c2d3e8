/**
 * The idempotency keys' SQL (gateway.idempotency.ts): one row per account and Idempotency-Key,
 * claimed RUNNING, then DONE with the answer sealed for the caller; every statement but the
 * expiry sweep names the account.
 */
import { QueryTypes, type Sequelize } from "sequelize";

/** A stored key: the request it was claimed for, and once DONE its answer (the body sealed). */
export interface IdempotencyRow {
  request_hash: string;
  state: "RUNNING" | "DONE";
  response_status: number | null;
  response_body: string | null;
  response_headers: Record<string, string> | null;
}

/**
 * Claims the account's key for the request `hash` (RUNNING): a new key, one stored more than `ttlS`
 * ago, or one RUNNING for more than `abandonS` (its request died) is taken; false when the key is
 * held (the stored row says by what).
 */
export async function claimKey(sequelize: Sequelize, k: { companyId: string; key: string; hash: string; ttlS: number; abandonS: number }): Promise<boolean> {
  const claimed = await sequelize.query(
    `INSERT INTO idempotency_keys (company_id, key, request_hash, state, created_at)
       VALUES (:companyId, :key, :hash, 'RUNNING', now())
       ON CONFLICT (company_id, key) DO UPDATE
         SET request_hash = EXCLUDED.request_hash, state = 'RUNNING', response_status = NULL,
             response_body = NULL, response_headers = NULL, created_at = now()
         WHERE idempotency_keys.created_at < now() - make_interval(secs => :ttl)
            OR (idempotency_keys.state = 'RUNNING' AND idempotency_keys.created_at < now() - make_interval(secs => :abandon))
       RETURNING key`,
    { replacements: { companyId: k.companyId, key: k.key, hash: k.hash, ttl: k.ttlS, abandon: k.abandonS }, type: QueryTypes.SELECT },
  );
  return claimed.length > 0;
}

/** The account's stored key, or undefined (none, or expired and removed). */
export async function storedKey(sequelize: Sequelize, companyId: string, key: string): Promise<IdempotencyRow | undefined> {
  const [row] = await sequelize.query<IdempotencyRow>(
    `SELECT request_hash, state, response_status, response_body, response_headers
         FROM idempotency_keys WHERE company_id = :companyId AND key = :key`,
    { replacements: { companyId, key }, type: QueryTypes.SELECT },
  );
  return row;
}

/** Stores the answer of the account's key (DONE): its status, `sealedBody` and headers. */
export async function completeKey(
  sequelize: Sequelize,
  a: { companyId: string; key: string; status: number; sealedBody: string; headers: Record<string, string> },
): Promise<void> {
  await sequelize.query(
    `UPDATE idempotency_keys
          SET state = 'DONE', response_status = :status, response_body = :body, response_headers = CAST(:headers AS jsonb)
        WHERE company_id = :companyId AND key = :key`,
    { replacements: { companyId: a.companyId, key: a.key, status: a.status, body: a.sealedBody, headers: JSON.stringify(a.headers) } },
  );
}

/** Forgets the account's key while it is RUNNING (its request failed on our side). */
export async function releaseKey(sequelize: Sequelize, companyId: string, key: string): Promise<void> {
  await sequelize.query(`DELETE FROM idempotency_keys WHERE company_id = :companyId AND key = :key AND state = 'RUNNING'`, {
    replacements: { companyId, key },
  });
}

/** Deletes the keys of every account stored more than `ttlS` ago; answers how many. */
export async function purgeExpiredKeys(sequelize: Sequelize, ttlS: number): Promise<number> {
  const [, meta] = await sequelize.query(`DELETE FROM idempotency_keys WHERE created_at < now() - make_interval(secs => :ttl)`, {
    replacements: { ttl: ttlS },
  });
  return (meta as { rowCount?: number })?.rowCount ?? 0;
}
