/**
 * The key rotation's SQL on social_profiles (profiles.rotate.ts): counts by key, a batch of rows not
 * under the current key locked in id order, and one row's token written again. Rotation walks every
 * account, so these statements name none.
 */
import { QueryTypes, type Sequelize, type Transaction } from "sequelize";
import type { Sealed } from "../../lib/security/secrets";
import { TOKEN_COLUMNS, type TokenRow } from "./profiles.models";

/** How many tokens are sealed under the key `keyId`. */
export async function countUnderKey(sequelize: Sequelize, keyId: string): Promise<number> {
  const [counted] = await sequelize.query<{ n: string }>(`SELECT count(*) AS n FROM social_profiles WHERE token_key_id = $1`, {
    bind: [keyId],
    type: QueryTypes.SELECT,
  });
  return Number(counted!.n);
}

/** How many tokens are sealed under any key but `keyId`. */
export async function countNotUnderKey(sequelize: Sequelize, keyId: string): Promise<number> {
  const [counted] = await sequelize.query<{ n: string }>(`SELECT count(*) AS n FROM social_profiles WHERE token_key_id <> $1`, {
    bind: [keyId],
    type: QueryTypes.SELECT,
  });
  return Number(counted!.n);
}

/**
 * The next `limit` rows (by id, after `after`) whose token is not under `keyId`, with their sealed
 * token, locked FOR UPDATE until `transaction` ends.
 */
export function lockNotUnderKey(sequelize: Sequelize, b: { keyId: string; after: string; limit: number }, transaction: Transaction): Promise<TokenRow[]> {
  return sequelize.query<TokenRow>(
    `SELECT id, company_id, ${TOKEN_COLUMNS} FROM social_profiles
          WHERE token_key_id <> $1 AND id > $2
          ORDER BY id LIMIT $3 FOR UPDATE`,
    { bind: [b.keyId, b.after, b.limit], type: QueryTypes.SELECT, transaction },
  );
}

/** Writes row `id`'s token sealed again (`sealed`, under its key), in `transaction`. */
export async function writeToken(sequelize: Sequelize, id: string, sealed: Sealed, transaction: Transaction): Promise<void> {
  await sequelize.query(`UPDATE social_profiles SET token_key_id = $2, token_iv = $3, token_tag = $4, token_ciphertext = $5 WHERE id = $1`, {
    bind: [id, sealed.keyId, sealed.iv, sealed.tag, sealed.ciphertext],
    transaction,
  });
}
