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
 *
 * `conversations_contact` serves the campaign statistics' `responded` (inbox.contract.ts): from a
 * campaign message's (account, number, channel) to the conversations it may have started.
 *
 * Inbound messages move from tracking's `inbound_messages` (dropped here) into conversations: an
 * inbound's `destination` is our sender id, its `source` the end user's number; a message's
 * `created_at` is when it was received (the thread reads in that order).
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
    CREATE INDEX conversations_contact ON conversations (company_id, contact_number, channel);

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

    INSERT INTO conversations (id, company_id, channel, sender_id, contact_number, unread_count, last_message_at, last_message_preview, last_inbound_at, created_at)
    SELECT gen_random_uuid(), g.company_id, g.channel, g.destination, g.source, g.n, g.last_at,
           (SELECT left(i.text, ${PREVIEW_LENGTH}) FROM inbound_messages i
             WHERE i.company_id = g.company_id AND i.channel = g.channel AND i.destination = g.destination AND i.source = g.source
             ORDER BY i.received_at DESC, i.id DESC LIMIT 1),
           g.last_at, g.first_at
      FROM (SELECT company_id, channel, destination, source, count(*)::int AS n, max(received_at) AS last_at, min(created_at) AS first_at
              FROM inbound_messages GROUP BY company_id, channel, destination, source) g;

    INSERT INTO conversation_messages (id, company_id, conversation_id, channel, direction, message_id, message_type, text, media_key, created_at)
    SELECT gen_random_uuid(), i.company_id, c.id, i.channel, 'INBOUND', i.message_id, i.message_type, i.text, i.media_key, i.received_at
      FROM inbound_messages i
      JOIN conversations c ON c.company_id = i.company_id AND c.channel = i.channel AND c.sender_id = i.destination AND c.contact_number = i.source
     ORDER BY i.id;

    DROP TABLE inbound_messages;
  `);
}

/** The longest lastMessagePreview, in characters (inbox.models.ts uses the same). */
const PREVIEW_LENGTH = 140;

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE TABLE inbound_messages (
      id            bigserial PRIMARY KEY,
      company_id    text NOT NULL,
      channel       text NOT NULL CHECK (channel IN ('RCS', 'WHATSAPP')),
      message_id    text NOT NULL,
      source        text NOT NULL,
      destination   text NOT NULL,
      received_at   timestamptz NOT NULL,
      message_type  text NOT NULL,
      text          text,
      media_key     text,
      created_at    timestamptz NOT NULL DEFAULT now()
    );
    CREATE UNIQUE INDEX inbound_messages_key ON inbound_messages (company_id, channel, message_id);
    CREATE INDEX inbound_messages_created ON inbound_messages USING brin (created_at);
    INSERT INTO inbound_messages (company_id, channel, message_id, source, destination, received_at, message_type, text, media_key)
    SELECT m.company_id, m.channel, m.message_id, c.contact_number, c.sender_id, m.created_at, m.message_type, m.text, m.media_key
      FROM conversation_messages m JOIN conversations c ON c.id = m.conversation_id
     WHERE m.direction = 'INBOUND' ORDER BY m.created_at, m.seq;
    DROP TABLE inbox_events; DROP TABLE conversation_messages; DROP TABLE conversations;`);
}
