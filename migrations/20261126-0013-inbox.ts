import type { Sequelize } from "sequelize";

/**
 * The two-way inbox (issue 18).
 *
 * `conversations`: one per (account, channel, sender id, end user's number); `chatId` is its id.
 * `last_inbound_at` opens WhatsApp's 24-hour service window.
 *
 * `conversation_messages`: what the end user wrote (INBOUND, `message_id` is the upstream's id) and
 * the replies (OUTBOUND, `message_id` is the customerMessageId tracked in `messages`, whose status is
 * the reply's deliveryStatus). A thread reads in (created_at, seq) order.
 *
 * `inbox_events`: what the live view streams (Server-Sent Events), written in the same transaction
 * as the change it tells; its id is the SSE event id, so `Last-Event-ID` resumes from the database.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE TABLE conversations (
      id                    uuid PRIMARY KEY,
      company_id            text NOT NULL,
      channel               text NOT NULL CHECK (channel IN ('RCS', 'WHATSAPP')),
      sender_id             text NOT NULL,
      contact_number        text NOT NULL,
      status                text NOT NULL DEFAULT 'ACTIVE' CHECK (status IN ('ACTIVE', 'ARCHIVED')),
      unread_count          integer NOT NULL DEFAULT 0,
      last_message_at       timestamptz NOT NULL,
      last_message_preview  text,
      last_inbound_at       timestamptz,
      created_at            timestamptz NOT NULL DEFAULT now(),
      updated_at            timestamptz NOT NULL DEFAULT now()
    );
    CREATE UNIQUE INDEX conversations_key ON conversations (company_id, channel, sender_id, contact_number);
    CREATE INDEX conversations_by_status ON conversations (company_id, status, last_message_at DESC, id DESC);
    CREATE INDEX conversations_by_activity ON conversations (company_id, last_message_at DESC, id DESC);

    CREATE TABLE conversation_messages (
      id               uuid PRIMARY KEY,
      seq              bigserial NOT NULL,
      company_id       text NOT NULL,
      conversation_id  uuid NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
      channel          text NOT NULL CHECK (channel IN ('RCS', 'WHATSAPP')),
      direction        text NOT NULL CHECK (direction IN ('INBOUND', 'OUTBOUND')),
      message_id       text NOT NULL,
      message_type     text NOT NULL,
      text             text,
      media_key        text,
      created_at       timestamptz NOT NULL DEFAULT now()
    );
    CREATE UNIQUE INDEX conversation_messages_key ON conversation_messages (company_id, channel, direction, message_id);
    CREATE INDEX conversation_messages_thread ON conversation_messages (conversation_id, created_at, seq);

    CREATE TABLE inbox_events (
      id               bigserial PRIMARY KEY,
      company_id       text NOT NULL,
      conversation_id  uuid NOT NULL,
      type             text NOT NULL,
      data             jsonb NOT NULL,
      created_at       timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX inbox_events_account ON inbox_events (company_id, id);
    CREATE INDEX inbox_events_conversation ON inbox_events (conversation_id, id);
    CREATE INDEX inbox_events_created ON inbox_events USING brin (created_at);
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`DROP TABLE inbox_events; DROP TABLE conversation_messages; DROP TABLE conversations;`);
}
