import type { Sequelize } from "sequelize";

/**
 * Social profiles (issue 16): the accounts a partner connected on a social network, one per
 * (account, network, externalId) — the unique index makes a concurrent second create fail, which
 * the service answers as a 409 naming the existing id.
 *
 * The access token is never stored in clear: `token_ciphertext` is its AES-256-GCM encryption under
 * the key whose id is `token_key_id` (lib/security/secrets.ts), with `token_iv` and
 * `token_tag`; the account and profile id are its additional authenticated data. The
 * `(token_key_id, id)` index lets `secrets:rotate` find the rows not yet under the current key.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE TABLE social_profiles (
      id                uuid PRIMARY KEY,
      company_id        text NOT NULL,
      network           text NOT NULL CHECK (network IN ('FACEBOOK', 'INSTAGRAM', 'X', 'LINKEDIN', 'TIKTOK')),
      external_id       text NOT NULL,
      display_name      text,
      status            text NOT NULL DEFAULT 'CONNECTED' CHECK (status IN ('CONNECTED', 'REVOKED')),
      token_key_id      text NOT NULL,
      token_iv          bytea NOT NULL,
      token_tag         bytea NOT NULL,
      token_ciphertext  bytea NOT NULL,
      created_at        timestamptz NOT NULL DEFAULT now(),
      updated_at        timestamptz NOT NULL DEFAULT now(),
      token_updated_at  timestamptz NOT NULL DEFAULT now()
    );
    CREATE UNIQUE INDEX social_profiles_identity ON social_profiles (company_id, network, external_id);
    CREATE INDEX social_profiles_company ON social_profiles (company_id, created_at DESC, id DESC);
    CREATE INDEX social_profiles_token_key ON social_profiles (token_key_id, id);
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`DROP TABLE social_profiles;`);
}
