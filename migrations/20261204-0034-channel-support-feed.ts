import type { Sequelize } from "sequelize";

/**
 * A contact's channels from receipts become exact (docs/scaling.md, "Still to build", item 5). Until
 * now tracking emitted `tracking.channelSupportChanged` after its commit, best effort: a lost event
 * (a contacts node down, a transport error) left a refused number in campaign audiences, or a
 * reachable one out of them, until that number's next receipt.
 *
 * - Tracking's status feed (`message_status_feed`, migration 0027), written in the ingest's
 *   transaction, now carries what each change says of the number: `destination`, and `reach`: true
 *   (DELIVERED: reachable on the channel), false (DISABLED or UNSUPPORTED: refused), null (nothing).
 *   The view `message_status_changes` publishes both. Rows written before this migration have
 *   neither and say nothing.
 * - Contacts follows the feed (`contacts_feed_cursors`, its cursor, in its own transaction with the
 *   contacts it changes: contacts.support.ts) as the inbox does, and publishes its position
 *   (`contacts_feed_positions`) so that tracking drops a day of the feed only once contacts, like
 *   the inbox, has read it whole.
 * - The cursor starts at the beginning: what the kept days already say is replayed in feed order
 *   (rows without `reach` are passed over).
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    ALTER TABLE message_status_feed ADD COLUMN destination text, ADD COLUMN reach boolean;
    CREATE OR REPLACE VIEW message_status_changes AS
      SELECT company_id, id, tx, channel, customer_message_id, status_code, delivery_date, read_at, created_at, destination, reach
        FROM message_status_feed;
    CREATE TABLE contacts_feed_cursors (
      feed text PRIMARY KEY,
      tx xid8 NOT NULL,
      id bigint NOT NULL
    );
    INSERT INTO contacts_feed_cursors (feed, tx, id) VALUES ('message_status_changes', '0', 0);
    CREATE VIEW contacts_feed_positions AS SELECT feed, tx, id FROM contacts_feed_cursors;
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    DROP VIEW contacts_feed_positions;
    DROP TABLE contacts_feed_cursors;
    DROP VIEW message_status_changes;
    CREATE VIEW message_status_changes AS
      SELECT company_id, id, tx, channel, customer_message_id, status_code, delivery_date, read_at, created_at FROM message_status_feed;
    ALTER TABLE message_status_feed DROP COLUMN destination, DROP COLUMN reach;
  `);
}
