import type { Sequelize } from "sequelize";

/**
 * The inbox's live view (issue 18 item 5). `conversations.window_closed_for`: the `last_inbound_at`
 * whose WhatsApp window-closed event was written (one event per window; a new inbound message opens
 * a new window), with a partial index of the conversations still owing one.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    ALTER TABLE conversations ADD COLUMN window_closed_for timestamptz;
    CREATE INDEX conversations_window_open ON conversations (last_inbound_at)
      WHERE channel = 'WHATSAPP' AND last_inbound_at IS NOT NULL AND window_closed_for IS DISTINCT FROM last_inbound_at;
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`DROP INDEX conversations_window_open; ALTER TABLE conversations DROP COLUMN window_closed_for;`);
}
