import type { Sequelize } from "sequelize";

/**
 * `campaign_messages`: the read-only view tracking publishes of "a campaign's messages". These are
 * messages sent for a campaign and not simulated (issue 33 item 1: others read a table through the
 * owner's actions, events or named views, never through SQL strings in a contract).
 *
 * The inbox counts the recipients who wrote back (`inbox.campaignResponded`) over it, against its own
 * conversations. Its condition implies the partial index `messages_history_campaign`, so a
 * reader's `company_id` and `campaign_id` (or `sent_at` range) still reach that index through the
 * view.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE VIEW campaign_messages AS
      SELECT company_id, campaign_id, channel, destination, sent_at
        FROM messages
       WHERE campaign_id IS NOT NULL AND sent_at IS NOT NULL AND NOT simulation;
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`DROP VIEW campaign_messages`);
}
