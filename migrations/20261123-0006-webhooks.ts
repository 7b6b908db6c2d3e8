import type { Sequelize } from "sequelize";

/** Webhook registrations (issue 6): at most one delivery-status callback URL per account. */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE TABLE webhooks (
      company_id    text PRIMARY KEY,
      callback_url  text NOT NULL,
      created_at    timestamptz NOT NULL DEFAULT now(),
      updated_at    timestamptz NOT NULL DEFAULT now()
    );
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`DROP TABLE webhooks;`);
}
