/**
 * SECRETS_KEY rotation for webhook signing secrets (`npm run admin -- secrets:rotate`, beside the
 * profiles' tokens): re-seals every signing secret (current and replaced) not already under the
 * current key, in batches of `batchSize` webhooks, each batch in one transaction holding its rows
 * `FOR UPDATE`, so a concurrent registration or rotation either commits first (the row is read as
 * it now is) or waits. A secret no configured key opens is left as it is and named by account
 * (`onFailure`), never by content. Rows written under the old key behind a walk are caught by the
 * next walk (up to `maxPasses`); what is still not under the current key is `remaining`.
 */
import { QueryTypes, type Sequelize } from "sequelize";
import { packSealed, SecretUnreadableError, unpackSealed, type SecretBox } from "../../lib/secrets";
import { signingAad } from "./notifier.signing";

export interface WebhookRotateResult {
  /** Secrets re-sealed under the current key. */
  rotated: number;
  alreadyCurrent: number;
  /** Secrets no configured key opens, as the last walk found them. */
  failed: number;
  /** Secrets not under the current key when the rotation ended (the unreadable ones included). */
  remaining: number;
}

export interface WebhookRotateOptions {
  batchSize?: number;
  maxPasses?: number;
  /** Called once per unreadable secret as it is met (the account and the reason, never a secret). */
  onFailure?: (companyId: string, reason: string) => void;
}

interface Row {
  company_id: string;
  signing_key_id: string | null;
  signing_secret: Buffer | null;
  previous_signing_key_id: string | null;
  previous_signing_secret: Buffer | null;
}

const SLOTS = [
  { keyId: "signing_key_id", secret: "signing_secret" },
  { keyId: "previous_signing_key_id", secret: "previous_signing_secret" },
] as const;

async function count(sequelize: Sequelize, box: SecretBox, current: boolean): Promise<number> {
  const op = current ? "=" : "<>";
  const [row] = await sequelize.query<{ n: number }>(
    `SELECT (count(*) FILTER (WHERE signing_key_id ${op} $1) + count(*) FILTER (WHERE previous_signing_key_id ${op} $1))::int AS n FROM webhooks`,
    { bind: [box.currentKeyId], type: QueryTypes.SELECT },
  );
  return row!.n;
}

/** One walk over the webhooks with a secret not under the current key, in account order. */
async function walk(sequelize: Sequelize, box: SecretBox, batchSize: number, report: (companyId: string, reason: string) => void) {
  const counts = { rotated: 0, failed: 0 };
  let after = "";
  for (;;) {
    const last = await sequelize.transaction(async (transaction) => {
      const rows = await sequelize.query<Row>(
        `SELECT company_id, signing_key_id, signing_secret, previous_signing_key_id, previous_signing_secret FROM webhooks
          WHERE (signing_key_id <> $1 OR previous_signing_key_id <> $1) AND company_id > $2
          ORDER BY company_id LIMIT $3 FOR UPDATE`,
        { bind: [box.currentKeyId, after, batchSize], type: QueryTypes.SELECT, transaction },
      );
      for (const row of rows) {
        const aad = signingAad(row.company_id);
        const set: string[] = [];
        const bind: unknown[] = [row.company_id];
        for (const slot of SLOTS) {
          const keyId = row[slot.keyId];
          const sealed = row[slot.secret];
          if (keyId === null || sealed === null || box.isCurrent(keyId)) continue;
          try {
            const resealed = box.seal(box.open(unpackSealed(keyId, sealed), aad), aad);
            bind.push(resealed.keyId, packSealed(resealed));
            set.push(`${slot.keyId} = $${bind.length - 1}, ${slot.secret} = $${bind.length}`);
            counts.rotated++;
          } catch (err) {
            if (!(err instanceof SecretUnreadableError)) throw err;
            counts.failed++;
            report(row.company_id, `${slot.secret === "signing_secret" ? "signing secret" : "replaced signing secret"} ${err.message}`);
          }
        }
        if (set.length) await sequelize.query(`UPDATE webhooks SET ${set.join(", ")} WHERE company_id = $1`, { bind, transaction });
      }
      return rows.length ? rows[rows.length - 1]!.company_id : null;
    });
    if (last === null) return counts;
    after = last;
  }
}

export async function rotateWebhookSecrets(sequelize: Sequelize, box: SecretBox, opts: WebhookRotateOptions = {}): Promise<WebhookRotateResult> {
  const batchSize = opts.batchSize ?? 500;
  const maxPasses = opts.maxPasses ?? 3;
  const reported = new Set<string>();
  const report = (companyId: string, reason: string) => {
    const key = `${companyId}\n${reason}`;
    if (reported.has(key)) return;
    if (reported.size < 1000) reported.add(key);
    opts.onFailure?.(companyId, reason);
  };
  const result: WebhookRotateResult = { rotated: 0, alreadyCurrent: await count(sequelize, box, true), failed: 0, remaining: 0 };
  for (let pass = 1; ; pass++) {
    const counts = await walk(sequelize, box, batchSize, report);
    result.rotated += counts.rotated;
    result.failed = counts.failed;
    result.remaining = await count(sequelize, box, false);
    if (result.remaining <= counts.failed || pass >= maxPasses) return result;
  }
}
