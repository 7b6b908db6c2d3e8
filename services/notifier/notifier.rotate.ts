/**
 * SECRETS_KEY rotation for webhook signing secrets (`npm run admin -- secrets:rotate`, beside the
 * profiles' tokens): re-seals every signing secret (current and replaced) not already under the
 * current key, in batches of `batchSize` webhooks, each batch in one transaction holding its rows
 * `FOR UPDATE`, so a concurrent registration or rotation either commits first (the row is read as
 * it now is) or waits. A secret no configured key opens is left as it is and named by account
 * (`onFailure`), never by content. Rows written under the old key behind a walk are caught by the
 * next walk (up to `maxPasses`); what is still not under the current key is `remaining`. The
 * statements are in notifier.queries.ts.
 */
import type { Sequelize } from "sequelize";
import { packSealed, SecretUnreadableError, unpackSealed, type SecretBox } from "../../lib/security/secrets";
import { SECRET_SLOTS } from "./notifier.models";
import { countSecretsByKey, lockSecretsToReseal, writeResealedSecrets, type ResealedSecret } from "./notifier.queries";
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

/** One walk over the webhooks with a secret not under the current key, in account order. */
async function walk(sequelize: Sequelize, box: SecretBox, batchSize: number, report: (companyId: string, reason: string) => void) {
  const counts = { rotated: 0, failed: 0 };
  let after = "";
  for (;;) {
    const last = await sequelize.transaction(async (transaction) => {
      const rows = await lockSecretsToReseal(sequelize, box.currentKeyId, after, batchSize, transaction);
      for (const row of rows) {
        const aad = signingAad(row.company_id);
        const resealed: ResealedSecret[] = [];
        for (const slot of SECRET_SLOTS) {
          const keyId = row[slot.keyId];
          const sealed = row[slot.secret];
          if (keyId === null || sealed === null || box.isCurrent(keyId)) continue;
          try {
            const again = box.seal(box.open(unpackSealed(keyId, sealed), aad), aad);
            resealed.push({ slot, keyId: again.keyId, sealed: packSealed(again) });
            counts.rotated++;
          } catch (err) {
            if (!(err instanceof SecretUnreadableError)) throw err;
            counts.failed++;
            report(row.company_id, `${slot.secret === "signing_secret" ? "signing secret" : "replaced signing secret"} ${err.message}`);
          }
        }
        await writeResealedSecrets(sequelize, row.company_id, resealed, transaction);
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
  const result: WebhookRotateResult = { rotated: 0, alreadyCurrent: await countSecretsByKey(sequelize, box.currentKeyId, true), failed: 0, remaining: 0 };
  for (let pass = 1; ; pass++) {
    const counts = await walk(sequelize, box, batchSize, report);
    result.rotated += counts.rotated;
    result.failed = counts.failed;
    result.remaining = await countSecretsByKey(sequelize, box.currentKeyId, false);
    if (result.remaining <= counts.failed || pass >= maxPasses) return result;
  }
}
