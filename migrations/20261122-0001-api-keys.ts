import type { Sequelize } from "sequelize";

/** API keys: only the SHA-256 of a key's value is stored. */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE TABLE api_keys (
      id            uuid PRIMARY KEY,
      company_id    text NOT NULL,
      user_id       text,
      username      text,
      operations    text[] NOT NULL,
      traffic_type  text NOT NULL CHECK (traffic_type IN ('TRANSACTIONAL', 'MARKETING')),
      key_hash      bytea NOT NULL UNIQUE,
      created_by    uuid,
      created_at    timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX api_keys_company_created ON api_keys (company_id, created_at, id);
    CREATE INDEX api_keys_company_user ON api_keys (company_id, user_id);
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`DROP TABLE api_keys`);
}
