/**
 * The notifier service's SQL: the account's webhook, its attempts log, delivery's claim, outcomes and
 * housekeeping (notifier.delivery.ts), the outbox as operators watch it (notifier.metrics.ts, the
 * REPL's `outbox`), and SECRETS_KEY rotation of the signing secrets (notifier.rotate.ts).
 */
import { QueryTypes, type Sequelize, type Transaction } from "sequelize";
import { queryPage, type Page } from "../../lib/http/paging";
import type { ClaimSpec, JobTable } from "../../lib/jobs/jobs";
import {
  ATTEMPT_COLUMNS,
  toAttemptOut,
  WEBHOOK_COLUMNS,
  type AttemptRow,
  type SealedSecretsRow,
  type SecretSlot,
  type SigningKeysRow,
  type WebhookRow,
} from "./notifier.models";
import type { AttemptOut, AttemptsIn } from "./notifier.schemas";
import type { SealedSecret } from "./notifier.signing";

export type { SigningKeysRow };

/** Attempts are kept (and listed) this many days. */
export const ATTEMPTS_KEPT_DAYS = 7;

async function one(sequelize: Sequelize, sql: string, bind: unknown[], transaction?: Transaction): Promise<WebhookRow | null> {
  return (await sequelize.query<WebhookRow>(sql, { bind, type: QueryTypes.SELECT, transaction }))[0] ?? null;
}

export const findWebhook = (sequelize: Sequelize, companyId: string) =>
  one(sequelize, `SELECT ${WEBHOOK_COLUMNS} FROM webhooks WHERE company_id = $1`, [companyId]);

/** The new webhook (signed when `secret` is given), or null when the account has one already (left unchanged). */
export const insertWebhook = (sequelize: Sequelize, companyId: string, url: string, secret: SealedSecret | null) =>
  one(
    sequelize,
    `INSERT INTO webhooks (company_id, callback_url, signing_key_id, signing_secret, signing_version) VALUES ($1, $2, $3, $4, CASE WHEN $4::bytea IS NULL THEN 0 ELSE nextval('webhook_signing_versions') END)
     ON CONFLICT (company_id) DO NOTHING RETURNING ${WEBHOOK_COLUMNS}`,
    [companyId, url, secret?.keyId ?? null, secret?.sealed ?? null],
  );

const UNSIGN = `signing_key_id = NULL, signing_secret = NULL, previous_signing_key_id = NULL, previous_signing_secret = NULL, previous_signing_until = NULL`;

/**
 * Replaces the webhook's URL and whether it signs, or null when the account has none. `seal` (given
 * when it is to sign) makes a secret only when it did not sign yet (`fresh`); an unsigned one loses
 * its secrets. The row is locked meanwhile, so concurrent changes apply one after the other.
 */
export function updateWebhook(
  sequelize: Sequelize,
  companyId: string,
  url: string,
  seal: (() => SealedSecret) | null,
): Promise<{ row: WebhookRow; fresh: boolean } | null> {
  return sequelize.transaction(async (transaction) => {
    const [now] = await sequelize.query<{ signed: boolean }>(`SELECT signing_secret IS NOT NULL AS signed FROM webhooks WHERE company_id = $1 FOR UPDATE`, {
      bind: [companyId],
      type: QueryTypes.SELECT,
      transaction,
    });
    if (!now) return null;
    const bind: unknown[] = [companyId, url];
    let set = "";
    const fresh = seal !== null && !now.signed;
    if (fresh) {
      const s = seal();
      bind.push(s.keyId, s.sealed);
      set = `, signing_key_id = $3, signing_secret = $4, signing_version = nextval('webhook_signing_versions')`;
    } else if (seal === null && now.signed) set = `, ${UNSIGN}, signing_version = nextval('webhook_signing_versions')`;
    const row = await one(
      sequelize,
      `UPDATE webhooks SET callback_url = $2, updated_at = now()${set} WHERE company_id = $1 RETURNING ${WEBHOOK_COLUMNS}`,
      bind,
      transaction,
    );
    return { row: row!, fresh };
  });
}

/**
 * Rotation: `secret` becomes the signing secret, the one it replaces stays in force for `overlapMs`
 * (a previous one still in force is dropped). Null when the account's webhook does not sign (or there is none).
 */
export const rotateSigningSecret = (sequelize: Sequelize, companyId: string, secret: SealedSecret, overlapMs: number) =>
  one(
    sequelize,
    `UPDATE webhooks SET previous_signing_key_id = signing_key_id, previous_signing_secret = signing_secret,
            previous_signing_until = now() + make_interval(secs => $4::float8 / 1000),
            signing_key_id = $2, signing_secret = $3, signing_version = nextval('webhook_signing_versions'), updated_at = now()
      WHERE company_id = $1 AND signing_secret IS NOT NULL RETURNING ${WEBHOOK_COLUMNS}`,
    [companyId, secret.keyId, secret.sealed, overlapMs],
  );

/** The removed webhook, or null when the account had none (its secrets go with it). */
export const deleteWebhook = (sequelize: Sequelize, companyId: string) =>
  one(sequelize, `DELETE FROM webhooks WHERE company_id = $1 RETURNING ${WEBHOOK_COLUMNS}`, [companyId]);

/** The account's sealed signing secrets, as a notifier opens them to sign (null: no webhook). */
export async function signingKeys(sequelize: Sequelize, companyId: string): Promise<SigningKeysRow | null> {
  const rows = await sequelize.query<SigningKeysRow>(
    `SELECT signing_version, signing_key_id, signing_secret, previous_signing_key_id, previous_signing_secret,
            EXTRACT(EPOCH FROM previous_signing_until)::float8 * 1000 AS previous_until
       FROM webhooks WHERE company_id = $1`,
    { bind: [companyId], type: QueryTypes.SELECT },
  );
  return rows[0] ?? null;
}

/** A page of the account's attempts of the last ATTEMPTS_KEPT_DAYS days, newest first. */
export function attemptsPage(sequelize: Sequelize, companyId: string, { page, limit, messageId, outcome }: AttemptsIn): Promise<Page<AttemptOut>> {
  const where = `company_id = :companyId AND attempted_at >= now() - interval '${ATTEMPTS_KEPT_DAYS} days'${messageId ? " AND message_id = :messageId" : ""}${outcome ? " AND outcome = :outcome" : ""}`;
  return queryPage<AttemptRow, AttemptOut>(sequelize, {
    select: `SELECT ${ATTEMPT_COLUMNS}
               FROM webhook_attempts WHERE ${where} ORDER BY attempted_at DESC, id DESC LIMIT :limit OFFSET :offset`,
    count: `SELECT count(*) AS total FROM webhook_attempts WHERE ${where}`,
    replacements: { companyId, messageId: messageId ?? null, outcome: outcome ?? null },
    page,
    limit,
    map: toAttemptOut,
  });
}

/** The outbox as a job table: a claim is held by its token until its lease ends. */
export const OUTBOX: JobTable = { table: "outbox_events", alias: "o", key: "id", keyType: "bigint", owner: "claim_token", lease: { until: "leased_until" } };

/**
 * Per account with a webhook (in random order), its due events up to its free slots ($1: account ->
 * slots, $2: slots of an account not held here), $3 in all; $4: the lease (ms), $5: the claim's token.
 * A signed webhook's events also carry its signing_version and their identity (notifier.signing.ts).
 */
export const OUTBOX_CLAIM: ClaimSpec = {
  as: "c",
  matchAlso: "company_id",
  candidates: `
    SELECT e.id, w.company_id, w.callback_url, w.signing
      FROM (SELECT company_id, callback_url, CASE WHEN signing_secret IS NOT NULL THEN signing_version END AS signing FROM webhooks ORDER BY random()) w
      CROSS JOIN LATERAL (
        SELECT o.id FROM outbox_events o
         WHERE o.company_id = w.company_id AND o.due_at <= now() AND (o.leased_until IS NULL OR o.leased_until <= now())
         ORDER BY o.due_at, o.id
         LIMIT COALESCE(($1::jsonb ->> w.company_id)::int, $2)
           FOR UPDATE SKIP LOCKED) e
     LIMIT $3`,
  leaseMs: "$4",
  owner: "$5",
  returning: `o.id, o.company_id, o.channel, o.payload::text AS payload, o.attempts,
            EXTRACT(EPOCH FROM COALESCE(o.message_sent_at, o.created_at))::float8 * 1000 AS sent_at_ms,
            EXTRACT(EPOCH FROM o.created_at)::float8 * 1000 AS created_at_ms, c.callback_url, c.signing,
            CASE WHEN c.signing IS NOT NULL THEN jsonb_build_array(o.channel, o.event_type, o.message_id, o.num_part)::text END AS identity`,
};

/**
 * The outcomes of a group of attempts, in one statement. The event's own fields of the log row come
 * from its outbox row (every part of the statement sees the rows as they were before it), which
 * keeps what crosses to the database small. Only attempts whose claim still holds are written: one
 * whose lease ran out (so another replica has the event now) changes nothing, in the log neither.
 */
export const RECORD = `
  WITH r AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS r(id bigint, c text, token text, n smallint, at timestamptz, hs smallint, ms integer, err text, delay float8, outcome text)),
  d AS (
    SELECT r.*, now() + make_interval(secs => r.delay / 1000) AS next FROM r),
  e AS (
    SELECT d.*, o.company_id, o.channel, o.event_type, o.message_id, o.num_part FROM d JOIN outbox_events o ON o.id = d.id AND o.company_id = d.c AND o.claim_token = d.token),
  gone AS (
    DELETE FROM outbox_events o USING r WHERE o.id = r.id AND o.company_id = r.c AND o.claim_token = r.token AND r.outcome <> 'RETRYING' RETURNING 1),
  later AS (
    UPDATE outbox_events o SET due_at = d.next, attempts = d.n, claim_token = NULL, leased_until = NULL
      FROM d WHERE o.id = d.id AND o.company_id = d.c AND o.claim_token = d.token AND d.outcome = 'RETRYING' RETURNING 1)
  INSERT INTO webhook_attempts (company_id, channel, event_type, message_id, num_part, attempt, attempted_at, http_status, duration_ms, error, next_attempt_at, outcome)
  SELECT company_id, channel, event_type, message_id, num_part, n, at, hs, ms, err, next, outcome FROM e`;

/** Housekeeping: events of accounts that have no webhook any more (deleted while events waited; nobody to send them to). */
export const PURGE_ORPHAN_EVENTS = `DELETE FROM outbox_events WHERE (id, company_id) IN (
         SELECT o.id, o.company_id FROM outbox_events o WHERE NOT EXISTS (SELECT 1 FROM webhooks w WHERE w.company_id = o.company_id) LIMIT $1 FOR UPDATE SKIP LOCKED)`;

/** Housekeeping: secrets a rotation replaced, once their overlap is over (deliveries stopped using them then). */
export const PURGE_REPLACED_SECRETS = `UPDATE webhooks SET previous_signing_key_id = NULL, previous_signing_secret = NULL, previous_signing_until = NULL
  WHERE previous_signing_until < now()`;

// --- the outbox as operators watch it

/** The outbox's depth and how long its oldest due, unclaimed event has been due (seconds, null when none), all replicas (one statement). */
export async function outboxGauges(sequelize: Sequelize): Promise<{ depth: string; oldest: number | null }> {
  return sequelize
    .query<{ depth: string; oldest: number | null }>(
      `SELECT count(*) AS depth, EXTRACT(EPOCH FROM now() - min(due_at) FILTER (WHERE due_at <= now() AND (leased_until IS NULL OR leased_until <= now())))::float8 AS oldest FROM outbox_events`,
      { type: QueryTypes.SELECT },
    )
    .then((r) => r[0]!);
}

/** Per channel: events waiting, claimed by a notifier now, and how long the oldest due one has waited (seconds, null when none). */
export function outboxByChannel(sequelize: Sequelize): Promise<Array<{ channel: string; depth: number; claimed: number; oldest: number | null }>> {
  return sequelize.query<{ channel: string; depth: number; claimed: number; oldest: number | null }>(
    `SELECT channel, count(*)::int AS depth,
            count(*) FILTER (WHERE leased_until > now())::int AS claimed,
            EXTRACT(EPOCH FROM now() - min(due_at) FILTER (WHERE due_at <= now() AND (leased_until IS NULL OR leased_until <= now())))::float8 AS oldest
       FROM outbox_events GROUP BY channel ORDER BY channel`,
    { type: QueryTypes.SELECT },
  );
}

// --- SECRETS_KEY rotation of the signing secrets (notifier.rotate.ts)

/** How many sealed secrets (current and replaced) are under the key `keyId` (`current`), or under another key. */
export async function countSecretsByKey(sequelize: Sequelize, keyId: string, current: boolean): Promise<number> {
  const op = current ? "=" : "<>";
  const [row] = await sequelize.query<{ n: number }>(
    `SELECT (count(*) FILTER (WHERE signing_key_id ${op} $1) + count(*) FILTER (WHERE previous_signing_key_id ${op} $1))::int AS n FROM webhooks`,
    { bind: [keyId], type: QueryTypes.SELECT },
  );
  return row!.n;
}

/** The next `limit` webhooks after the account `after` with a secret not under `keyId`, in account order, held FOR UPDATE until `transaction` ends. */
export function lockSecretsToReseal(sequelize: Sequelize, keyId: string, after: string, limit: number, transaction: Transaction): Promise<SealedSecretsRow[]> {
  return sequelize.query<SealedSecretsRow>(
    `SELECT company_id, signing_key_id, signing_secret, previous_signing_key_id, previous_signing_secret FROM webhooks
      WHERE (signing_key_id <> $1 OR previous_signing_key_id <> $1) AND company_id > $2
      ORDER BY company_id LIMIT $3 FOR UPDATE`,
    { bind: [keyId, after, limit], type: QueryTypes.SELECT, transaction },
  );
}

/** A secret sealed again: its slot, the key that sealed it, and the sealed bytes as stored (packSealed). */
export interface ResealedSecret {
  slot: SecretSlot;
  keyId: string;
  sealed: Buffer;
}

/** Writes the account's secrets sealed again, in `transaction` (one statement; none when there is nothing to write). */
export async function writeResealedSecrets(
  sequelize: Sequelize,
  companyId: string,
  resealed: readonly ResealedSecret[],
  transaction: Transaction,
): Promise<void> {
  const set: string[] = [];
  const bind: unknown[] = [companyId];
  for (const r of resealed) {
    bind.push(r.keyId, r.sealed);
    set.push(`${r.slot.keyId} = $${bind.length - 1}, ${r.slot.secret} = $${bind.length}`);
  }
  if (set.length) await sequelize.query(`UPDATE webhooks SET ${set.join(", ")} WHERE company_id = $1`, { bind, transaction });
}
