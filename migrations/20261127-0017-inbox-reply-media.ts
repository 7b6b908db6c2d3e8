import type { Sequelize } from "sequelize";

/**
 * Media of inbox replies is held while the upstream may still fetch it: a reply with a media refers
 * to it (`media.reference`, owner `reply:<customerMessageId>`) from before it is sent until its
 * status is final, and `media_released` says that reference was dropped. Rows written before this
 * migration never held one, hence the default.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    ALTER TABLE conversation_messages ADD COLUMN media_released boolean NOT NULL DEFAULT true;
    CREATE INDEX conversation_messages_media_held ON conversation_messages (created_at) WHERE NOT media_released;
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    DROP INDEX conversation_messages_media_held;
    ALTER TABLE conversation_messages DROP COLUMN media_released;
  `);
}
