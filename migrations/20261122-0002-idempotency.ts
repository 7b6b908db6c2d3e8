import type { Sequelize } from "sequelize";

/**
 * Stored answers of creating POSTs, keyed by account and Idempotency-Key, kept 24 h. The body is
 * sealed (AES-256-GCM) with a key derived from the calling API key's value, which is not stored:
 * a stored answer (a new key's value, say) cannot be read from the database.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE TABLE idempotency_keys (
      company_id       text NOT NULL,
      key              text NOT NULL,
      request_hash     text NOT NULL,
      state            text NOT NULL CHECK (state IN ('RUNNING', 'DONE')),
      response_status  integer,
      response_body    text,
      response_headers jsonb,
      created_at       timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (company_id, key)
    );
    CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`DROP TABLE idempotency_keys`);
}
