/**
 * How a writer of `inbox_events` draws its ids from the account's counter (`drawEventIdsSql`,
 * `eventIdSql`), and a reader's horizon (`INBOX_EVENTS_HORIZON_SQL`). The rules they keep are
 * inbox.events.ts's: every writer draws from the account's row of `inbox_event_counters` and holds
 * it until its commit, so an account's events commit in id order.
 */
/**
 * CTEs drawing the ids of the events in `from` (a relation with an account column `company`):
 * `drawn_n` counts them per account, `drawn` adds the counts to the accounts' counters, in account
 * order (two writers of the same accounts take their rows in the same order), and answers each
 * account's `last_id`. An account's events then take ids `last_id - n + 1 .. last_id`: see
 * {@link eventIdSql}.
 */
export const drawEventIdsSql = (from: string, company: string) =>
  `drawn_n AS (SELECT ${company} AS company_id, count(*) AS n FROM ${from} GROUP BY 1),
   drawn AS (
     INSERT INTO inbox_event_counters AS ctr (company_id, last_id) SELECT company_id, n FROM drawn_n ORDER BY company_id
     ON CONFLICT (company_id) DO UPDATE SET last_id = ctr.last_id + excluded.last_id
     RETURNING ctr.company_id, ctr.last_id)`;

/** The id of each event row joined to `drawn` (as `d`), numbered in `order` within its account. */
export const eventIdSql = (company: string, order: string) =>
  `d.last_id - count(*) OVER (PARTITION BY ${company}) + row_number() OVER (PARTITION BY ${company} ORDER BY ${order})`;

/**
 * The account's horizon ($1: the account): the last event id it drew, 0 before its first. Every
 * event of the account up to it is committed in the snapshot that reads it (see above).
 */
export const INBOX_EVENTS_HORIZON_SQL = `SELECT coalesce((SELECT last_id FROM inbox_event_counters WHERE company_id = $1), 0) AS horizon`;
