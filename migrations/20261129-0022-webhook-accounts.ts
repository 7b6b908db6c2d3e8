import type { Sequelize } from "sequelize";

/**
 * Events only where somebody listens (issue 33): the accounts that have a registered webhook, as a
 * named read-only view the notifier (the owner of `webhooks`) publishes. The writers of events
 * (tracking's status changes, the inbox's inbound messages) insert an outbox row only for an account
 * in it, in the same statement and transaction as before, so an event is written exactly when its
 * account has a callback URL to send it to. Until now every status change of every account wrote
 * an outbox row, and the notifier's housekeeping deleted those of accounts without a webhook a
 * minute later: a polling partner's 50 M messages a day were 50 M inserts and deletes for nobody.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE VIEW webhook_accounts AS SELECT company_id FROM webhooks;
    COMMENT ON VIEW webhook_accounts IS 'Published by the notifier: the accounts with a registered webhook (read-only for other services).';
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`DROP VIEW webhook_accounts`);
}
