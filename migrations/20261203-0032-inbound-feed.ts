import { QueryTypes, type Sequelize } from "sequelize";

/**
 * Tracking stops calling the inbox (issue 33 item 1: the tracking <-> inbox cycle). Until now the
 * internal ingress handed each inbound message to `inbox.ingest` and answered 202 once the inbox had
 * stored it; now the ingress stores it in a feed of tracking's, in its own transaction, and the inbox
 * follows the feed (inbox.inbound.ts), as it follows the status feed (migration 0027).
 *
 * - `inbound_message_feed`, tracking's, in daily partitions of `created_at`: one row per inbound
 *   message as the upstream posted it (validated; `received_date` as written, which the opt-out
 *   keywords and the INBOUND event take as the ingress took it), with `tx`, the writer's transaction id. Published
 *   read-only as the view `inbound_messages_received`. A day is dropped past 2 days once the inbox
 *   has read all of it (its view `inbox_feed_positions`, migration 0031).
 * - The inbox's cursor over it is a row of `inbox_feed_cursors`.
 *
 * Nothing moves: inbound messages were stored by the inbox at once. The way down refuses while the
 * inbox has not followed every row (those messages would be lost).
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE SEQUENCE inbound_message_feed_id_seq;
    CREATE TABLE inbound_message_feed (
      company_id text NOT NULL,
      id bigint NOT NULL DEFAULT nextval('inbound_message_feed_id_seq'),
      tx xid8 NOT NULL DEFAULT pg_current_xact_id(),
      channel text NOT NULL CHECK (channel IN ('RCS', 'WHATSAPP')),
      message_id text NOT NULL,
      source text NOT NULL,
      destination text NOT NULL,
      received_date text NOT NULL,
      message_type text NOT NULL,
      text text,
      media_key text,
      created_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (company_id, created_at, id)
    ) PARTITION BY RANGE (created_at);
    ALTER SEQUENCE inbound_message_feed_id_seq OWNED BY inbound_message_feed.id;
    CREATE INDEX inbound_message_feed_order ON inbound_message_feed (tx, id);
    SELECT ensure_day_partitions('inbound_message_feed', (now() AT TIME ZONE 'UTC')::date - 1, (now() AT TIME ZONE 'UTC')::date + 7);
    CREATE VIEW inbound_messages_received AS
      SELECT company_id, id, tx, channel, message_id, source, destination, received_date, message_type, text, media_key, created_at FROM inbound_message_feed;
    INSERT INTO inbox_feed_cursors (feed, tx, id) VALUES ('inbound_messages_received', '0', 0);
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  const [row] = await sequelize.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM inbound_message_feed f, inbox_feed_cursors c WHERE c.feed = 'inbound_messages_received' AND (f.tx, f.id) > (c.tx, c.id)`,
    { type: QueryTypes.SELECT },
  );
  const left = row?.n ?? 0;
  if (left > 0) throw new Error(`${left} inbound messages are not followed by the inbox yet; start the inbox, let it follow them, then migrate down`);
  await sequelize.query(`
    DELETE FROM inbox_feed_cursors WHERE feed = 'inbound_messages_received';
    DROP VIEW inbound_messages_received;
    DROP TABLE inbound_message_feed;
  `);
}
