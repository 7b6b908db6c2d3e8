import type { Sequelize } from "sequelize";

/**
 * Contact imports (issue 4): one row per uploaded file, its progress counters (updated in the same
 * transaction as each batch of contacts, so they count exactly what is written) and at most 1000
 * row errors. `heartbeat_at` is kept fresh by the node that holds the file; an import whose node
 * went away is ended FAILED by any contacts node.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE TABLE contact_imports (
      id              uuid PRIMARY KEY,
      company_id      text NOT NULL,
      kind            text NOT NULL CHECK (kind IN ('csv', 'xlsx', 'vcard')),
      file_name       text NOT NULL,
      file_size       bigint NOT NULL,
      file_sha256     text NOT NULL,
      list_id         bigint,
      mapping         jsonb,
      status          text NOT NULL DEFAULT 'QUEUED' CHECK (status IN ('QUEUED', 'PROCESSING', 'COMPLETED', 'FAILED')),
      total_rows      integer NOT NULL DEFAULT 0,
      created         integer NOT NULL DEFAULT 0,
      updated         integer NOT NULL DEFAULT 0,
      skipped         integer NOT NULL DEFAULT 0,
      errors          jsonb NOT NULL DEFAULT '[]'::jsonb,
      failure         text,
      node_id         text NOT NULL,
      created_at      timestamptz NOT NULL DEFAULT now(),
      started_at      timestamptz,
      finished_at     timestamptz,
      heartbeat_at    timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX contact_imports_company ON contact_imports (company_id, created_at DESC);
    CREATE INDEX contact_imports_active ON contact_imports (heartbeat_at) WHERE status IN ('QUEUED', 'PROCESSING');
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`DROP TABLE contact_imports;`);
}
