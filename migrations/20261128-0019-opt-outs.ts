import type { Sequelize } from "sequelize";

/**
 * Opt-outs (contract section 7), owned by the contacts service: one row per (account, channel,
 * number in E.164), whatever contact holds the number, or none. `opted_out` is the state now; a row
 * whose number said START again stays, with `opted_out` false, so that a change reported late (an
 * upstream's `at` before the row's `changed_at`) cannot undo a newer one. `created_at` is when the
 * current opt-out began. The primary key is what every send checks (one index probe per batch).
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE TABLE opt_outs (
      company_id    text NOT NULL,
      channel       text NOT NULL CHECK (channel IN ('SMS', 'RCS', 'WHATSAPP')),
      phone_number  text NOT NULL,
      opted_out     boolean NOT NULL DEFAULT true,
      source        text NOT NULL CHECK (source IN ('KEYWORD', 'UPSTREAM', 'API', 'IMPORT')),
      created_at    timestamptz NOT NULL DEFAULT now(),
      changed_at    timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (company_id, channel, phone_number)
    );
    CREATE INDEX opt_outs_newest ON opt_outs (company_id, created_at DESC, channel, phone_number) WHERE opted_out;
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`DROP TABLE opt_outs`);
}
