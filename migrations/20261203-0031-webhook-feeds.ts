import type { Sequelize } from "sequelize";

/**
 * The outbox gets one writer (issue 33 item 1). Until now tracking (DELIVERY, READ) and the inbox
 * (INBOUND) inserted rows into `outbox_events`, and the notifier claimed, rescheduled and deleted
 * them: three writers of one table, and the inbox wrote it in tracking's format.
 *
 * - `message_event_feed`, tracking's: the DELIVERY and READ events of its writes, in the writer's
 *   transaction (`tx` is that transaction's id), and RETRACT rows (a simulated message whose receipt
 *   came before its registration: its events must never go out). Published read-only as the view
 *   `message_webhook_events`.
 * - `inbound_event_feed`, the inbox's: the INBOUND event of each inbound message, in the ingest's
 *   transaction. Published read-only as the view `inbound_webhook_events`.
 * - A RETRACT may come before the events it takes back in feed order (the registration's
 *   transaction drew its id first and then waited for the receipt's): the follower looks each
 *   DELIVERY and READ up among the RETRACT rows (a partial index, as rare as they are).
 * - Both in daily partitions of `created_at`, written only for accounts with a webhook (the
 *   notifier's view `webhook_accounts`), insert-only, retired by dropping whole days once followed.
 * - `outbox_events` is now the notifier's own delivery schedule, written by it alone: it follows
 *   both feeds (`notifier_feed_cursors`, its cursor per feed, published read-only as
 *   `webhook_feed_positions` so that an owner drops only days the notifier has read) and copies each
 *   event into the schedule in its own transaction with the cursor. A follower reads past its
 *   cursor only rows whose transaction ended before the oldest one still running began
 *   (`tx < pg_snapshot_xmin(pg_current_snapshot())`), in `(tx, id)` order, so it never steps over a
 *   row that commits later (as the inbox follows the status feed, migration 0027).
 *
 * The inbox publishes its cursors likewise (`inbox_feed_positions`), so that tracking drops a day of
 * its status feed only once the inbox has read it whole.
 *
 * Rows already in `outbox_events` stay where they are and are delivered as before. The way down
 * copies what the notifier had not followed yet into `outbox_events` first, so no event is lost.
 */
const FEEDS = [
  { table: "message_event_feed", view: "message_webhook_events", types: "'DELIVERY', 'READ', 'RETRACT'", payload: "jsonb" },
  { table: "inbound_event_feed", view: "inbound_webhook_events", types: "'INBOUND'", payload: "jsonb NOT NULL" },
] as const;

export async function up(sequelize: Sequelize): Promise<void> {
  for (const f of FEEDS) {
    await sequelize.query(`
      CREATE SEQUENCE ${f.table}_id_seq;
      CREATE TABLE ${f.table} (
        company_id text NOT NULL,
        id bigint NOT NULL DEFAULT nextval('${f.table}_id_seq'),
        tx xid8 NOT NULL DEFAULT pg_current_xact_id(),
        channel text NOT NULL,
        event_type text NOT NULL CHECK (event_type IN (${f.types})),
        message_id text NOT NULL,
        num_part smallint,
        payload ${f.payload},
        message_sent_at timestamptz,
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (company_id, created_at, id)
      ) PARTITION BY RANGE (created_at);
      ALTER SEQUENCE ${f.table}_id_seq OWNED BY ${f.table}.id;
      CREATE INDEX ${f.table}_order ON ${f.table} (tx, id);
      ${f.table === "message_event_feed" ? `CREATE INDEX ${f.table}_retract ON ${f.table} (company_id, channel, message_id) WHERE event_type = 'RETRACT';` : ""}
      SELECT ensure_day_partitions('${f.table}', (now() AT TIME ZONE 'UTC')::date - 1, (now() AT TIME ZONE 'UTC')::date + 7);
      CREATE VIEW ${f.view} AS
        SELECT company_id, id, tx, channel, event_type, message_id, num_part, payload, message_sent_at, created_at FROM ${f.table};
    `);
  }
  await sequelize.query(`
    CREATE TABLE notifier_feed_cursors (
      feed text PRIMARY KEY,
      tx xid8 NOT NULL,
      id bigint NOT NULL
    );
    INSERT INTO notifier_feed_cursors (feed, tx, id) VALUES ${FEEDS.map((f) => `('${f.view}', '0', 0)`).join(", ")};
    CREATE VIEW webhook_feed_positions AS SELECT feed, tx, id FROM notifier_feed_cursors;
    CREATE VIEW inbox_feed_positions AS SELECT feed, tx, id FROM inbox_feed_cursors;
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  for (const f of FEEDS) {
    // What the notifier had not followed: back into the outbox, in feed order (RETRACT rows take their events with them).
    await sequelize.query(`
      WITH c AS (SELECT tx, id FROM notifier_feed_cursors WHERE feed = '${f.view}'),
      left_over AS (SELECT f.* FROM ${f.table} f, c WHERE (f.tx, f.id) > (c.tx, c.id)),
      gone AS (
        DELETE FROM outbox_events o USING left_over r
         WHERE r.event_type = 'RETRACT' AND o.company_id = r.company_id AND o.channel = r.channel AND o.message_id = r.message_id
           AND o.event_type IN ('DELIVERY', 'READ') AND o.created_at >= r.message_sent_at)
      INSERT INTO outbox_events (company_id, channel, event_type, message_id, num_part, payload, message_sent_at, created_at)
      SELECT e.company_id, e.channel, e.event_type, e.message_id, e.num_part, e.payload, e.message_sent_at, e.created_at
        FROM left_over e
       WHERE e.event_type <> 'RETRACT'
         AND NOT EXISTS (SELECT 1 FROM left_over r WHERE r.event_type = 'RETRACT' AND r.company_id = e.company_id AND r.channel = e.channel
                            AND r.message_id = e.message_id AND e.event_type IN ('DELIVERY', 'READ') AND e.created_at >= r.message_sent_at)
       ORDER BY e.tx, e.id;
    `);
  }
  await sequelize.query(`
    DROP VIEW inbox_feed_positions;
    DROP VIEW webhook_feed_positions;
    DROP TABLE notifier_feed_cursors;
    ${FEEDS.map((f) => `DROP VIEW ${f.view}; DROP TABLE ${f.table};`).join("\n")}
  `);
}
