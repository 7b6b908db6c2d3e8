import type { Sequelize } from "sequelize";

/**
 * `outbox_events`, the notifier's delivery schedule (migration 0031), is keyed `(id, company_id)`
 * like every other table a job addresses by id (migration 0026), the last key without the account
 * (issue 33 item 3: the schema runs on Citus with `company_id` as the distribution column). Its
 * own index still serves a lookup by id (the leading column).
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_pkey, ADD PRIMARY KEY (id, company_id)`);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_pkey, ADD PRIMARY KEY (id)`);
}
