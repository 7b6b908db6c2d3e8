import type { Sequelize } from "sequelize";

/**
 * `messages` in daily partitions (issue 33): retention drops a whole day instead of deleting 50 M
 * rows and leaving them to vacuum. Native declarative partitioning, which PGlite runs as well.
 *
 * **The id tells the day.** A message's id is `ms << 22 | n`: the milliseconds since 2020-01-01
 * (UTC) of the moment it was first stored (the database's clock) and 22 bits of a sequence; 41 bits
 * of milliseconds last until 2089. Ids stay unique (two
 * ids of one millisecond differ in the sequence's low bits unless 4 M messages share it), stay in
 * time order (the history's tie-break), and the table is partitioned by RANGE (id): day D holds the
 * ids from `message_id_floor(D)` to `message_id_floor(D + 1)`. A lookup by id is pruned to its one
 * partition when the planner sees the ids (a bound parameter of a custom plan).
 *
 * **Uniqueness across partitions.** PostgreSQL enforces a unique index of a partitioned table only
 * when it contains the partition key; `(company_id, channel, customer_message_id)` does not. So the
 * key lives in its own table, `message_keys` (account, channel, customerMessageId -> id), whose
 * primary key enforces "a message id is unique per account and channel" over every day; every
 * writer inserts the key first (INSERT ... ON CONFLICT) and the message row under the id it got.
 * Polling and receipts find a message through it: one probe of its primary key, then one probe of
 * the day's `(company_id, id)` key. What it costs: one more narrow row (about 100 bytes with its
 * index) per message, and its retention is a batched DELETE (walking the retired day's own rows)
 * before the day is dropped; docs/scaling.md has the figures.
 *
 * (`messages.id` defaults to a fresh id only for bulk loads of history that no poll reads, such as
 * benchmarks' fixtures; tracking's writers always take it from `message_keys`.)
 *
 * The primary key is `(company_id, id)`, so that the schema can be distributed by account (Citus).
 * The history indexes stay, now one per partition. Partitions are made ahead by tracking's job
 * (`ensure_message_partitions`, idempotent, serialized by an advisory lock); this migration makes
 * one for every day that holds rows, and yesterday to a week ahead.
 *
 * Existing rows move: each keeps its data and gets an id of its own creation time (`created_at`), in
 * (created_at, old id) order. The move is a copy under the migration's lock: it needs the table's
 * size again in free disk, and a large table moves in a maintenance window. History cursors given out before this migration point at the old
 * ids: a client resuming one starts over from the newest message.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE SEQUENCE message_id_seq;
    CREATE FUNCTION message_id_floor(at timestamptz) RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE
      AS $$ SELECT (floor(extract(epoch FROM at) * 1000)::bigint - 1577836800000) << 22 $$;
    CREATE FUNCTION next_message_id() RETURNS bigint LANGUAGE sql VOLATILE
      AS $$ SELECT message_id_floor(clock_timestamp()) | (nextval('message_id_seq') & 4194303) $$;

    ALTER TABLE messages RENAME TO messages_unpartitioned;
    ALTER INDEX messages_pkey RENAME TO messages_unpartitioned_pkey;
    ALTER INDEX messages_key RENAME TO messages_unpartitioned_key;
    ALTER INDEX messages_history RENAME TO messages_unpartitioned_history;
    ALTER INDEX messages_history_destination RENAME TO messages_unpartitioned_history_destination;
    ALTER INDEX messages_history_campaign RENAME TO messages_unpartitioned_history_campaign;
    ALTER INDEX messages_created RENAME TO messages_unpartitioned_created;

    CREATE TABLE message_keys (
      company_id          text NOT NULL,
      channel             text NOT NULL,
      customer_message_id text NOT NULL,
      id                  bigint NOT NULL DEFAULT next_message_id(),
      PRIMARY KEY (company_id, channel, customer_message_id) INCLUDE (id)
    );

    CREATE TABLE messages (
      id                  bigint NOT NULL DEFAULT next_message_id(),
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
      updated_at          timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (company_id, id)
    ) PARTITION BY RANGE (id);
    CREATE INDEX messages_history ON messages (company_id, sent_at, id) WHERE sent_at IS NOT NULL;
    CREATE INDEX messages_history_destination ON messages (company_id, destination, sent_at, id) WHERE sent_at IS NOT NULL;
    CREATE INDEX messages_history_campaign ON messages (company_id, campaign_id, sent_at, id) WHERE sent_at IS NOT NULL AND campaign_id IS NOT NULL;

    -- The day's partition, made when missing (days in UTC), serialized across nodes by an advisory
    -- lock. Made apart and then attached: ATTACH takes only a SHARE UPDATE EXCLUSIVE lock on
    -- messages (writes and reads go on; CREATE ... PARTITION OF would take an exclusive one and queue
    -- every statement behind a long export), and gives up after lock_timeout rather than wait.
    CREATE FUNCTION ensure_message_partitions(first_day date, last_day date) RETURNS integer LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
    DECLARE
      d date;
      made integer := 0;
      part text;
    BEGIN
      PERFORM pg_advisory_xact_lock(hashtext('messages partitions'));
      FOR d IN SELECT generate_series(first_day, last_day, interval '1 day')::date LOOP
        part := 'messages_p' || to_char(d, 'YYYYMMDD');
        IF to_regclass(part) IS NULL THEN
          EXECUTE format('CREATE TABLE %I (LIKE messages INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH (fillfactor = 90)', part);
          EXECUTE format('ALTER TABLE messages ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', part,
                         message_id_floor(d::timestamp AT TIME ZONE 'UTC'), message_id_floor((d + 1)::timestamp AT TIME ZONE 'UTC'));
          made := made + 1;
        END IF;
      END LOOP;
      RETURN made;
    END $$;

    SELECT ensure_message_partitions(d, d)
      FROM (SELECT DISTINCT (created_at AT TIME ZONE 'UTC')::date AS d FROM messages_unpartitioned) days;
    SELECT ensure_message_partitions((now() AT TIME ZONE 'UTC')::date - 1, (now() AT TIME ZONE 'UTC')::date + 7);

    -- New ids in (created_at, old id) order, each at least its millisecond's first id and above the one
    -- before: unique whatever the number of rows of one millisecond (a running maximum).
    CREATE TEMPORARY TABLE message_ids AS
      SELECT old_id, max(message_id_floor(created_at) - k) OVER (ORDER BY created_at, old_id ROWS UNBOUNDED PRECEDING) + k AS id
        FROM (SELECT id AS old_id, created_at, row_number() OVER (ORDER BY created_at, id) AS k FROM messages_unpartitioned) o;
    SELECT ensure_message_partitions(d, d)
      FROM (SELECT DISTINCT (to_timestamp(((id >> 22) + 1577836800000) / 1000.0) AT TIME ZONE 'UTC')::date AS d FROM message_ids) days;
    INSERT INTO message_keys (company_id, channel, customer_message_id, id)
    SELECT m.company_id, m.channel, m.customer_message_id, i.id FROM messages_unpartitioned m JOIN message_ids i ON i.old_id = m.id;
    INSERT INTO messages (id, company_id, channel, customer_message_id, destination, sent_at, total_parts, text, campaign_id, simulation,
                          status_code, delivery_date, read_at, price, part_codes, last_part_date, created_at, updated_at)
    SELECT i.id, company_id, channel, customer_message_id, destination, sent_at, total_parts, text,
           campaign_id, simulation, status_code, delivery_date, read_at, price, part_codes, last_part_date, created_at, updated_at
      FROM messages_unpartitioned m JOIN message_ids i ON i.old_id = m.id;
    DROP TABLE message_ids;
    DROP TABLE messages_unpartitioned;
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE TABLE messages_unpartitioned (
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
    INSERT INTO messages_unpartitioned (company_id, channel, customer_message_id, destination, sent_at, total_parts, text, campaign_id, simulation,
                                        status_code, delivery_date, read_at, price, part_codes, last_part_date, created_at, updated_at)
    SELECT company_id, channel, customer_message_id, destination, sent_at, total_parts, text, campaign_id, simulation,
           status_code, delivery_date, read_at, price, part_codes, last_part_date, created_at, updated_at
      FROM messages ORDER BY id;
    DROP TABLE messages;
    DROP TABLE message_keys;
    DROP FUNCTION ensure_message_partitions(date, date);
    DROP FUNCTION next_message_id();
    DROP FUNCTION message_id_floor(timestamptz);
    DROP SEQUENCE message_id_seq;
    ALTER TABLE messages_unpartitioned RENAME TO messages;
    ALTER SEQUENCE messages_unpartitioned_id_seq RENAME TO messages_id_seq;
    ALTER INDEX messages_unpartitioned_pkey RENAME TO messages_pkey;
    CREATE UNIQUE INDEX messages_key ON messages (company_id, channel, customer_message_id);
    CREATE INDEX messages_history ON messages (company_id, sent_at, id) WHERE sent_at IS NOT NULL;
    CREATE INDEX messages_history_destination ON messages (company_id, destination, sent_at, id) WHERE sent_at IS NOT NULL;
    CREATE INDEX messages_history_campaign ON messages (company_id, campaign_id, sent_at, id) WHERE sent_at IS NOT NULL AND campaign_id IS NOT NULL;
    CREATE INDEX messages_created ON messages USING brin (created_at);
  `);
}
