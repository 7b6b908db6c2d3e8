import type { Sequelize } from "sequelize";

/**
 * Delivery tracking (issue 5).
 *
 * `messages`: one row per (account, channel, customerMessageId), created by the upstream's
 * registration or, when a receipt wins the race, by that receipt (then `sent_at` is NULL until the
 * registration arrives). The row holds the polled status itself, so that polling is one index
 * lookup: `status_code` (1 ACCEPTED / 0 UNKNOWN in flight, else final), `delivery_date` (set when
 * final), `read_at`; a multi-part SMS keeps each part's code in `part_codes[numPart]` and the
 * latest part date in `last_part_date` until every part has a receipt. `status_code` is in no
 * index, so a receipt's UPDATE can stay on its page (HOT, fillfactor 90) without touching indexes.
 *
 * Indexes, one per query: the unique key serves registration, receipts, reads and polling; history
 * pages by (company_id, sent_at, id) with optional destination or campaign prefixes; retention
 * finds old rows through a BRIN index on created_at (rows arrive in time order: tiny and cheap).
 *
 * `inbound_messages`: what end users wrote (RCS, WhatsApp), once per (account, channel, messageId).
 *
 * `outbox_events`: one row per event the spec says a status change produces, written in the same
 * transaction as that change; the notifier (issue 6) delivers from it.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE TABLE messages (
      id                  bigserial PRIMARY KEY,
      company_id          text NOT NULL,
      channel             text NOT NULL CHECK (channel IN ('SMS', 'RCS', 'WHATSAPP')),
      customer_message_id text NOT NULL,
      destination         text NOT NULL,
      sent_at             timestamptz,
      total_parts         smallint NOT NULL DEFAULT 1,
      text                text,
      campaign_id         text,
      simulation          boolean NOT NULL DEFAULT false,
      status_code         smallint NOT NULL,
      delivery_date       timestamptz,
      read_at             timestamptz,
      price               numeric(18, 6),
      part_codes          smallint[],
      last_part_date      timestamptz,
      created_at          timestamptz NOT NULL DEFAULT now(),
      updated_at          timestamptz NOT NULL DEFAULT now()
    ) WITH (fillfactor = 90);
    CREATE UNIQUE INDEX messages_key ON messages (company_id, channel, customer_message_id);
    CREATE INDEX messages_history ON messages (company_id, sent_at, id) WHERE sent_at IS NOT NULL;
    CREATE INDEX messages_history_destination ON messages (company_id, destination, sent_at, id) WHERE sent_at IS NOT NULL;
    CREATE INDEX messages_history_campaign ON messages (company_id, campaign_id, sent_at, id) WHERE sent_at IS NOT NULL AND campaign_id IS NOT NULL;
    CREATE INDEX messages_created ON messages USING brin (created_at);

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

    CREATE TABLE outbox_events (
      id              bigserial PRIMARY KEY,
      company_id      text NOT NULL,
      channel         text NOT NULL,
      event_type      text NOT NULL CHECK (event_type IN ('DELIVERY', 'READ', 'INBOUND')),
      message_id      text NOT NULL,
      num_part        smallint,
      payload         jsonb NOT NULL,
      message_sent_at timestamptz,
      created_at      timestamptz NOT NULL DEFAULT now(),
      due_at          timestamptz NOT NULL DEFAULT now(),
      attempts        smallint NOT NULL DEFAULT 0
    );
    CREATE INDEX outbox_events_due ON outbox_events (due_at, id);
    CREATE INDEX outbox_events_created ON outbox_events USING brin (created_at);
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`DROP TABLE outbox_events; DROP TABLE inbound_messages; DROP TABLE messages;`);
}
