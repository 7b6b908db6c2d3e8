import type { Sequelize } from "sequelize";

/**
 * Export jobs (issue 7).
 *
 * `export_jobs`: one row per export, what GET /exports lists (newest first per account). `filters`
 * is the validated request body, so a regeneration (`run` + 1) runs the same export again. A job is
 * QUEUED until an exports node claims it: PROCESSING, `node_id` the claimant, `leased_until` kept
 * ahead by the node's heartbeat; a job whose lease ran out (its node died) is claimed again, at most
 * `attempts` 3 times in all. COMPLETED jobs name the node whose EXPORT_DIR holds the file
 * (`file_name`, `<id>.<run>.<attempt token>.csv.gz`: every attempt writes a file of its own) and `expires_at`, when the sweeper deletes it and the job reads EXPIRED.
 *
 * `csv_cell(text)`: the formula-injection rule of the contract, applied by PostgreSQL inside the
 * export's COPY: a cell beginning with =, +, -, @, tab or carriage return gets a leading '.
 * IMMUTABLE SQL, so the planner inlines it.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE TABLE export_jobs (
      id            uuid PRIMARY KEY,
      company_id    text NOT NULL,
      type          text NOT NULL CHECK (type IN ('CONTACTS', 'DELIVERY_REPORTS', 'MESSAGE_HISTORY')),
      filters       jsonb NOT NULL,
      status        text NOT NULL CHECK (status IN ('QUEUED', 'PROCESSING', 'COMPLETED', 'FAILED', 'EXPIRED')),
      run           integer NOT NULL DEFAULT 1,
      attempts      smallint NOT NULL DEFAULT 0,
      node_id       text,
      leased_until  timestamptz,
      row_count     bigint,
      file_name     text,
      error         text,
      created_at    timestamptz NOT NULL DEFAULT now(),
      started_at    timestamptz,
      completed_at  timestamptz,
      expires_at    timestamptz
    );
    CREATE INDEX export_jobs_company ON export_jobs (company_id, created_at DESC, id DESC);
    CREATE INDEX export_jobs_waiting ON export_jobs (created_at, id) WHERE status IN ('QUEUED', 'PROCESSING');
    CREATE INDEX export_jobs_expiring ON export_jobs (expires_at) WHERE status = 'COMPLETED';

    CREATE FUNCTION csv_cell(value text) RETURNS text
      LANGUAGE sql IMMUTABLE PARALLEL SAFE
      AS $$ SELECT CASE WHEN left(value, 1) IN ('=', '+', '-', '@', E'\\t', E'\\r') THEN '''' || value ELSE value END $$;
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`DROP FUNCTION csv_cell(text); DROP TABLE export_jobs;`);
}
