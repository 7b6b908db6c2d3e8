/**
 * Key rotation: re-seals every token not already under the current SECRETS_KEY, in batches of
 * `batchSize` rows (never the whole table in memory). Each batch runs in one transaction that holds
 * its rows `FOR UPDATE`: a concurrent PUT token either commits first (the row is read again as it
 * now is, and left alone when already under the current key) or waits for the batch, so a token
 * given meanwhile is never overwritten with an older one. Rows that cannot be opened (their key is
 * neither SECRETS_KEY nor SECRETS_KEY_PREVIOUS, or they do not authenticate) are left as they are
 * and named by id, never by content.
 */
import { QueryTypes, type Sequelize } from "sequelize";
import { profileAad, SecretUnreadableError, type SecretBox } from "./profiles.crypto";
import { TOKEN_COLUMNS, toSealed, type TokenRow } from "./profiles.models";

export interface RotateResult {
  rotated: number;
  alreadyCurrent: number;
  failed: number;
  /** Ids of the profiles whose token could not be opened, with why. */
  failures: Array<{ id: string; reason: string }>;
}

const FIRST_UUID = "00000000-0000-0000-0000-000000000000";

export async function rotateTokens(sequelize: Sequelize, box: SecretBox, opts: { batchSize?: number } = {}): Promise<RotateResult> {
  const batchSize = opts.batchSize ?? 500;
  const [counted] = await sequelize.query<{ n: string }>(`SELECT count(*) AS n FROM social_profiles WHERE token_key_id = $1`, {
    bind: [box.currentKeyId],
    type: QueryTypes.SELECT,
  });
  const result: RotateResult = { rotated: 0, alreadyCurrent: Number(counted!.n), failed: 0, failures: [] };
  let after = FIRST_UUID;
  for (;;) {
    const seen = await sequelize.transaction(async (transaction) => {
      const rows = await sequelize.query<TokenRow>(
        `SELECT id, company_id, ${TOKEN_COLUMNS} FROM social_profiles
          WHERE token_key_id <> $1 AND id > $2
          ORDER BY id LIMIT $3 FOR UPDATE`,
        { bind: [box.currentKeyId, after, batchSize], type: QueryTypes.SELECT, transaction },
      );
      for (const row of rows) {
        const aad = profileAad(row.company_id, row.id);
        let plain: string;
        try {
          plain = box.open(toSealed(row), aad);
        } catch (err) {
          if (!(err instanceof SecretUnreadableError)) throw err;
          result.failed++;
          result.failures.push({ id: row.id, reason: err.message });
          continue;
        }
        const sealed = box.seal(plain, aad);
        await sequelize.query(`UPDATE social_profiles SET token_key_id = $2, token_iv = $3, token_tag = $4, token_ciphertext = $5 WHERE id = $1`, {
          bind: [row.id, sealed.keyId, sealed.iv, sealed.tag, sealed.ciphertext],
          transaction,
        });
        result.rotated++;
      }
      return rows.length ? rows[rows.length - 1]!.id : null;
    });
    // A batch may come back short when rows changed under its lock; only an empty one ends the walk.
    if (seen === null) return result;
    after = seen;
  }
}
