import type { Sequelize } from "sequelize";

/**
 * The inbox's `message.status` events leave tracking's transaction (issue 33 item 1: one writer per
 * table). Until now tracking ran inbox's SQL to write them into `inbox_events` as it ingested.
 *
 * - `message_status_feed`, tracking's, in daily partitions of `created_at`: one row per RCS or
 *   WhatsApp message whose status or read a tracking write changed, with the status that write left.
 *   It is written in the ingest transaction, and `tx` is that transaction's id.
 * - `message_status_changes`: the read-only view tracking publishes over it. It is what another
 *   service may read.
 * - `inbox_feed_cursors`, the inbox's: how far it has followed a feed. A follower reads past its
 *   cursor only rows whose transaction ended before the oldest one still running began
 *   (`tx < pg_snapshot_xmin(pg_current_snapshot())`). It reads in `(tx, id)` order, so it never steps
 *   over a row that commits later. The inbox then writes the events of its own replies in its own
 *   transaction, with the cursor.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE SEQUENCE message_status_feed_id_seq;
    CREATE TABLE message_status_feed (
      company_id text NOT NULL,
      id bigint NOT NULL DEFAULT nextval('message_status_feed_id_seq'),
      tx xid8 NOT NULL DEFAULT pg_current_xact_id(),
      channel text NOT NULL CHECK (channel IN ('RCS', 'WHATSAPP')),
      customer_message_id text NOT NULL,
      status_code smallint NOT NULL,
      delivery_date timestamptz,
      read_at timestamptz,
      created_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (company_id, created_at, id)
    ) PARTITION BY RANGE (created_at);
    ALTER SEQUENCE message_status_feed_id_seq OWNED BY message_status_feed.id;
    CREATE INDEX message_status_feed_order ON message_status_feed (tx, id);
    SELECT ensure_day_partitions('message_status_feed', (now() AT TIME ZONE 'UTC')::date - 1, (now() AT TIME ZONE 'UTC')::date + 7);
    CREATE VIEW message_status_changes AS
      SELECT company_id, id, tx, channel, customer_message_id, status_code, delivery_date, read_at, created_at FROM message_status_feed;
    CREATE TABLE inbox_feed_cursors (
      feed text PRIMARY KEY,
      tx xid8 NOT NULL,
      id bigint NOT NULL
    );
    INSERT INTO inbox_feed_cursors (feed, tx, id) VALUES ('message_status_changes', '0', 0);
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    DROP TABLE inbox_feed_cursors;
    DROP VIEW message_status_changes;
    DROP TABLE message_status_feed;
  `);
}
