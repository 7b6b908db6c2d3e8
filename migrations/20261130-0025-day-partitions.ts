import type { Sequelize } from "sequelize";

/**
 * The attempts log and the live-view events in daily partitions (issue 33), as `messages` (0023):
 * retention drops whole days instead of deleting rows in batches.
 *
 * `ensure_day_partitions(parent, first, last)` makes the missing days of a table partitioned by
 * RANGE of a timestamp: `<parent>_pYYYYMMDD` holds that UTC day. Idempotent, serialized across nodes
 * by an advisory lock, made apart and then attached (a SHARE UPDATE EXCLUSIVE lock on the parent, as
 * 0023's), giving up after lock_timeout; each owner runs it at start and from its housekeeping
 * (lib/db/partitions.ts).
 *
 * - `webhook_attempts` (notifier) by `attempted_at`; its key becomes (company_id, attempted_at, id)
 *   (the partition key must be in it; the id still comes from its sequence, unique by itself).
 *   The list reads only the last 7 days, as before; a day is dropped once wholly older.
 * - `inbox_events` (inbox) by `created_at`; its key becomes (company_id, id, created_at): an
 *   account's ids are drawn from its counter, unique by themselves. Readers ask for the events of
 *   the last INBOX_EVENT_RETENTION_HOURS, as the retention promised; a day is dropped once wholly
 *   older.
 *
 * Existing rows move into their days' partitions (a day is made for each day that holds rows, and
 * yesterday to a week ahead): every event (its retention is a setting, and the batched purge kept
 * it), and the attempts of the last 8 days (the list shows 7; older ones are left behind).
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE FUNCTION ensure_day_partitions(parent text, first_day date, last_day date) RETURNS integer LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
    DECLARE
      d date;
      made integer := 0;
      part text;
    BEGIN
      PERFORM pg_advisory_xact_lock(hashtext(parent || ' partitions'));
      FOR d IN SELECT generate_series(first_day, last_day, interval '1 day')::date LOOP
        part := parent || '_p' || to_char(d, 'YYYYMMDD');
        IF to_regclass(part) IS NULL THEN
          EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part, parent);
          EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', parent, part,
                         d::timestamp AT TIME ZONE 'UTC', (d + 1)::timestamp AT TIME ZONE 'UTC');
          made := made + 1;
        END IF;
      END LOOP;
      RETURN made;
    END $$;

    ALTER TABLE webhook_attempts RENAME TO webhook_attempts_unpartitioned;
    ALTER INDEX webhook_attempts_pkey RENAME TO webhook_attempts_unpartitioned_pkey;
    ALTER INDEX webhook_attempts_company RENAME TO webhook_attempts_unpartitioned_company;
    ALTER INDEX webhook_attempts_attempted RENAME TO webhook_attempts_unpartitioned_attempted;
    CREATE SEQUENCE webhook_attempts_partitioned_id_seq;
    SELECT setval('webhook_attempts_partitioned_id_seq', coalesce(max(id), 0) + 1, false) FROM webhook_attempts_unpartitioned;
    CREATE TABLE webhook_attempts (
      id              bigint NOT NULL DEFAULT nextval('webhook_attempts_partitioned_id_seq'),
      company_id      text NOT NULL,
      channel         text NOT NULL,
      event_type      text NOT NULL,
      message_id      text NOT NULL,
      num_part        smallint,
      attempt         smallint NOT NULL,
      attempted_at    timestamptz NOT NULL,
      http_status     smallint,
      duration_ms     integer,
      error           text,
      next_attempt_at timestamptz,
      outcome         text NOT NULL CHECK (outcome IN ('DELIVERED', 'RETRYING', 'FAILED', 'EXPIRED')),
      PRIMARY KEY (company_id, attempted_at, id)
    ) PARTITION BY RANGE (attempted_at);
    ALTER SEQUENCE webhook_attempts_partitioned_id_seq OWNED BY webhook_attempts.id;
    CREATE INDEX webhook_attempts_company ON webhook_attempts (company_id, attempted_at DESC, id DESC);
    CREATE TEMPORARY TABLE attempts_kept AS
      SELECT * FROM webhook_attempts_unpartitioned
       WHERE attempted_at >= ((now() AT TIME ZONE 'UTC')::date - 8)::timestamp AT TIME ZONE 'UTC' AND attempted_at < ((now() AT TIME ZONE 'UTC')::date + 8)::timestamp AT TIME ZONE 'UTC';
    SELECT ensure_day_partitions('webhook_attempts', d, d) FROM (SELECT DISTINCT (attempted_at AT TIME ZONE 'UTC')::date AS d FROM attempts_kept) days;
    SELECT ensure_day_partitions('webhook_attempts', (now() AT TIME ZONE 'UTC')::date - 1, (now() AT TIME ZONE 'UTC')::date + 7);
    INSERT INTO webhook_attempts (id, company_id, channel, event_type, message_id, num_part, attempt, attempted_at, http_status, duration_ms, error, next_attempt_at, outcome)
    SELECT id, company_id, channel, event_type, message_id, num_part, attempt, attempted_at, http_status, duration_ms, error, next_attempt_at, outcome FROM attempts_kept;
    DROP TABLE attempts_kept;
    DROP TABLE webhook_attempts_unpartitioned;

    ALTER TABLE inbox_events RENAME TO inbox_events_unpartitioned;
    ALTER INDEX inbox_events_pkey RENAME TO inbox_events_unpartitioned_pkey;
    ALTER INDEX inbox_events_conversation RENAME TO inbox_events_unpartitioned_conversation;
    ALTER INDEX inbox_events_created RENAME TO inbox_events_unpartitioned_created;
    CREATE TABLE inbox_events (
      id               bigint NOT NULL,
      company_id       text NOT NULL,
      conversation_id  uuid NOT NULL,
      type             text NOT NULL,
      data             jsonb NOT NULL,
      created_at       timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (company_id, id, created_at)
    ) PARTITION BY RANGE (created_at);
    CREATE INDEX inbox_events_conversation ON inbox_events (conversation_id, id);
    CREATE TEMPORARY TABLE events_kept AS
      SELECT id, company_id, conversation_id, type, data, created_at FROM inbox_events_unpartitioned
       WHERE created_at < ((now() AT TIME ZONE 'UTC')::date + 8)::timestamp AT TIME ZONE 'UTC';
    SELECT ensure_day_partitions('inbox_events', d, d) FROM (SELECT DISTINCT (created_at AT TIME ZONE 'UTC')::date AS d FROM events_kept) days;
    SELECT ensure_day_partitions('inbox_events', (now() AT TIME ZONE 'UTC')::date - 1, (now() AT TIME ZONE 'UTC')::date + 7);
    INSERT INTO inbox_events (id, company_id, conversation_id, type, data, created_at) SELECT * FROM events_kept;
    DROP TABLE events_kept;
    DROP TABLE inbox_events_unpartitioned;
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    ALTER TABLE inbox_events RENAME TO inbox_events_partitioned;
    ALTER INDEX inbox_events_pkey RENAME TO inbox_events_partitioned_pkey;
    ALTER INDEX inbox_events_conversation RENAME TO inbox_events_partitioned_conversation;
    CREATE TABLE inbox_events (
      id               bigint NOT NULL,
      company_id       text NOT NULL,
      conversation_id  uuid NOT NULL,
      type             text NOT NULL,
      data             jsonb NOT NULL,
      created_at       timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (company_id, id)
    );
    CREATE INDEX inbox_events_conversation ON inbox_events (conversation_id, id);
    CREATE INDEX inbox_events_created ON inbox_events USING brin (created_at);
    INSERT INTO inbox_events SELECT id, company_id, conversation_id, type, data, created_at FROM inbox_events_partitioned ORDER BY created_at, id;
    DROP TABLE inbox_events_partitioned;

    ALTER TABLE webhook_attempts RENAME TO webhook_attempts_partitioned;
    ALTER INDEX webhook_attempts_pkey RENAME TO webhook_attempts_partitioned_pkey;
    ALTER INDEX webhook_attempts_company RENAME TO webhook_attempts_partitioned_company;
    CREATE TABLE webhook_attempts (
      id              bigserial PRIMARY KEY,
      company_id      text NOT NULL,
      channel         text NOT NULL,
      event_type      text NOT NULL,
      message_id      text NOT NULL,
      num_part        smallint,
      attempt         smallint NOT NULL,
      attempted_at    timestamptz NOT NULL,
      http_status     smallint,
      duration_ms     integer,
      error           text,
      next_attempt_at timestamptz,
      outcome         text NOT NULL CHECK (outcome IN ('DELIVERED', 'RETRYING', 'FAILED', 'EXPIRED'))
    );
    CREATE INDEX webhook_attempts_company ON webhook_attempts (company_id, attempted_at DESC, id DESC);
    CREATE INDEX webhook_attempts_attempted ON webhook_attempts USING brin (attempted_at);
    INSERT INTO webhook_attempts SELECT id, company_id, channel, event_type, message_id, num_part, attempt, attempted_at, http_status, duration_ms, error, next_attempt_at, outcome
      FROM webhook_attempts_partitioned ORDER BY id;
    SELECT setval('webhook_attempts_id_seq', coalesce(max(id), 0) + 1, false) FROM webhook_attempts;
    DROP TABLE webhook_attempts_partitioned;
    DROP FUNCTION ensure_day_partitions(text, date, date);
  `);
}
