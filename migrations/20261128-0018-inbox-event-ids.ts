import type { Sequelize } from "sequelize";

/**
 * Live-view event ids per account (issue 30): an `inbox_events` id was drawn from one sequence for
 * every account, so the gaps between an account's own ids told it how busy the others were. Each
 * account now counts its own events (`inbox_event_counters.last_id`, the last id it drew) and the
 * key is (company_id, id).
 *
 * The ids already written stay as they are (they rise within each account), and each account's
 * counter starts at its highest: a stream resumed with a Last-Event-ID from before the change goes
 * on where it was. The counter outlives its events (retention), so an id is never drawn twice.
 *
 * Down: one sequence again, every id renumbered in (account, id) order (the order within each
 * account is kept; ids streams hold no longer match).
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE TABLE inbox_event_counters (
      company_id  text PRIMARY KEY,
      last_id     bigint NOT NULL
    );
    INSERT INTO inbox_event_counters (company_id, last_id) SELECT company_id, max(id) FROM inbox_events GROUP BY company_id;
    ALTER TABLE inbox_events ALTER COLUMN id DROP DEFAULT;
    DROP SEQUENCE inbox_events_id_seq;
    ALTER TABLE inbox_events DROP CONSTRAINT inbox_events_pkey;
    DROP INDEX inbox_events_account;
    ALTER TABLE inbox_events ADD PRIMARY KEY (company_id, id);
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    ALTER TABLE inbox_events DROP CONSTRAINT inbox_events_pkey;
    UPDATE inbox_events e SET id = r.n
      FROM (SELECT company_id, id, row_number() OVER (ORDER BY company_id, id) AS n FROM inbox_events) r
     WHERE e.company_id = r.company_id AND e.id = r.id;
    CREATE SEQUENCE inbox_events_id_seq OWNED BY inbox_events.id;
    SELECT setval('inbox_events_id_seq', coalesce(max(id), 0) + 1, false) FROM inbox_events;
    ALTER TABLE inbox_events ALTER COLUMN id SET DEFAULT nextval('inbox_events_id_seq');
    ALTER TABLE inbox_events ADD PRIMARY KEY (id);
    CREATE INDEX inbox_events_account ON inbox_events (company_id, id);
    DROP TABLE inbox_event_counters;
  `);
}
