/** The profiles service's SQL on social_profiles; every statement names the account. */
import { QueryTypes, type Sequelize } from "sequelize";
import { ApiError } from "../../lib/errors";
import { queryPage, type Page } from "../../lib/http/paging";
import type { Sealed } from "../../lib/security/secrets";
import { PROFILE_COLUMNS, TOKEN_COLUMNS, toProfileOut, type ProfileRow, type TokenRow } from "./profiles.models";
import type { ListProfilesIn, Network, ProfileOut } from "./profiles.schemas";

async function one<T extends object>(sequelize: Sequelize, sql: string, bind: unknown[]): Promise<T | null> {
  return (await sequelize.query<T>(sql, { bind, type: QueryTypes.SELECT }))[0] ?? null;
}

export interface NewProfile {
  id: string;
  companyId: string;
  network: Network;
  externalId: string;
  displayName: string | null;
  token: Sealed;
}

/**
 * Inserts a profile; `{ existingId }` instead when the account has one with this network and
 * externalId. The unique index decides, so two concurrent creates cannot both succeed.
 */
export async function insertProfile(sequelize: Sequelize, p: NewProfile): Promise<{ row: ProfileRow } | { existingId: string }> {
  for (let attempt = 1; ; attempt++) {
    const row = await one<ProfileRow>(
      sequelize,
      `INSERT INTO social_profiles (id, company_id, network, external_id, display_name, ${TOKEN_COLUMNS})
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
       ON CONFLICT (company_id, network, external_id) DO NOTHING
       RETURNING ${PROFILE_COLUMNS}`,
      [p.id, p.companyId, p.network, p.externalId, p.displayName, p.token.keyId, p.token.iv, p.token.tag, p.token.ciphertext],
    );
    if (row) return { row };
    const holder = await one<{ id: string }>(sequelize, `SELECT id FROM social_profiles WHERE company_id = $1 AND network = $2 AND external_id = $3`, [
      p.companyId,
      p.network,
      p.externalId,
    ]);
    if (holder) return { existingId: holder.id };
    // Deleted between the two statements: try the insert again, a few times.
    if (attempt === 3) throw new ApiError("CONCURRENT_CHANGE", "The profile with this network and externalId changed while the request ran; try again.");
  }
}

export const findProfile = (sequelize: Sequelize, companyId: string, id: string) =>
  one<ProfileRow>(sequelize, `SELECT ${PROFILE_COLUMNS} FROM social_profiles WHERE company_id = $1 AND id = $2`, [companyId, id]);

export const findToken = (sequelize: Sequelize, companyId: string, id: string) =>
  one<TokenRow>(sequelize, `SELECT id, company_id, ${TOKEN_COLUMNS} FROM social_profiles WHERE company_id = $1 AND id = $2`, [companyId, id]);

/** The removed profile's id, or null when the account has no such profile. */
export const deleteProfile = (sequelize: Sequelize, companyId: string, id: string) =>
  one<{ id: string }>(sequelize, `DELETE FROM social_profiles WHERE company_id = $1 AND id = $2 RETURNING id`, [companyId, id]);

/**
 * Replaces the sealed token; the profile is CONNECTED again. Null when the account has no such profile.
 * The row is locked first and `seal` gets the account and id as the row holds them, so the token's
 * additional authenticated data is exactly what every later read builds from the row.
 */
export const replaceToken = (sequelize: Sequelize, companyId: string, id: string, seal: (companyId: string, id: string) => Sealed) =>
  sequelize.transaction(async (transaction) => {
    const [held] = await sequelize.query<{ id: string; company_id: string }>(
      `SELECT id, company_id FROM social_profiles WHERE company_id = $1 AND id = $2 FOR UPDATE`,
      {
        bind: [companyId, id],
        type: QueryTypes.SELECT,
        transaction,
      },
    );
    if (!held) return null;
    const token = seal(held.company_id, held.id);
    const [row] = await sequelize.query<ProfileRow>(
      `UPDATE social_profiles
          SET token_key_id = $3, token_iv = $4, token_tag = $5, token_ciphertext = $6,
              status = 'CONNECTED', token_updated_at = now(), updated_at = now()
        WHERE company_id = $1 AND id = $2
        RETURNING ${PROFILE_COLUMNS}`,
      { bind: [held.company_id, held.id, token.keyId, token.iv, token.tag, token.ciphertext], type: QueryTypes.SELECT, transaction },
    );
    return row ?? null;
  });

/** Marks a profile REVOKED (updatedAt moves only when the status changes). Null when there is no such profile. */
export const revokeProfile = (sequelize: Sequelize, companyId: string, id: string) =>
  one<ProfileRow>(
    sequelize,
    `UPDATE social_profiles
        SET status = 'REVOKED', updated_at = CASE WHEN status = 'REVOKED' THEN updated_at ELSE now() END
      WHERE company_id = $1 AND id = $2
      RETURNING ${PROFILE_COLUMNS}`,
    [companyId, id],
  );

/** A page of the account's profiles, newest first (ties by id), optionally of one network or status. */
export function profilesPage(sequelize: Sequelize, companyId: string, q: ListProfilesIn): Promise<Page<ProfileOut>> {
  const where = `company_id = :companyId${q.network ? " AND network = :network" : ""}${q.status ? " AND status = :status" : ""}`;
  const dir = q.sortOrder === "asc" ? "ASC" : "DESC";
  return queryPage<ProfileRow, ProfileOut>(sequelize, {
    select: `SELECT ${PROFILE_COLUMNS} FROM social_profiles WHERE ${where} ORDER BY created_at ${dir}, id ${dir} LIMIT :limit OFFSET :offset`,
    count: `SELECT count(*) AS total FROM social_profiles WHERE ${where}`,
    replacements: { companyId, network: q.network ?? null, status: q.status ?? null },
    page: q.page,
    limit: q.limit,
    map: toProfileOut,
  });
}
