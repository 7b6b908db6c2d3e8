/**
 * Feeds: a table its owner appends to in the transaction of a change, published read-only as a view,
 * that another service follows with a cursor of its own (migrations 0027 and 0031). Each row carries
 * `tx`, the id of the transaction that wrote it (`pg_current_xact_id()`), and an `id` from a sequence.
 * A follower reads past its cursor, in `(tx, id)` order, only rows whose transaction ended before the
 * oldest one still running began (`tx < pg_snapshot_xmin(pg_current_snapshot())`): a row that commits
 * later has a `tx` at or above that bound, so a later round reads it and none is stepped over.
 *
 * What is here is the part every owner and follower shares: the owner's insert of webhook events, and
 * the owner's check before it drops a day that its follower has read the whole day.
 */
import { QueryTypes, type Sequelize } from "sequelize";

const NAME = /^[a-z_]+$/;
const DAY = /^[a-z_]+_p\d{8}$/;

/**
 * The insert of webhook events given as a JSON array in `$1` into the feed `table` (set-based, one
 * statement), in the array's order, only for accounts listed by the view `accounts` (those with a
 * webhook: an event nobody is sent is not written). The columns are those the notifier follows
 * (`WebhookEvent`, notifier.contract.ts).
 */
export function webhookFeedInsert(table: string, accounts: string): string {
  if (!NAME.test(table) || !NAME.test(accounts)) throw new Error(`not a table or view name: ${table}, ${accounts}`);
  return `INSERT INTO ${table} (company_id, channel, event_type, message_id, num_part, payload, message_sent_at)
  SELECT x.company_id, x.channel, x.event_type, x.message_id, x.num_part, x.payload, x.message_sent_at
    FROM ROWS FROM (jsonb_to_recordset($1::jsonb) AS (company_id text, channel text, event_type text, message_id text, num_part smallint, payload jsonb, message_sent_at timestamptz))
         WITH ORDINALITY AS x(company_id, channel, event_type, message_id, num_part, payload, message_sent_at, n)
   WHERE EXISTS (SELECT 1 FROM ${accounts} w WHERE w.company_id = x.company_id)
   ORDER BY x.n`;
}

/**
 * A follower round's `held` column (SQL): committed rows of `view` wait behind a transaction still
 * running. Rows at or above the snapshot's xmin are never read yet (a round reads only below it),
 * so any of them visible now is held back: the follower's loop looks again soon (lib/jobs/follow.ts).
 */
export function heldBackSql(view: string): string {
  if (!NAME.test(view)) throw new Error(`not a view name: ${view}`);
  return `EXISTS (SELECT 1 FROM ${view} h WHERE h.tx >= pg_snapshot_xmin(pg_current_snapshot()))`;
}

/**
 * Whether the follower whose cursor is the row `feed` of the view `positions` has read every row of
 * the day `partition` (one probe of the day's `(tx, id)` index). No cursor row: not read.
 */
export async function dayReadBy(sequelize: Sequelize, partition: string, positions: string, feed: string): Promise<boolean> {
  if (!DAY.test(partition) || !NAME.test(positions)) throw new Error(`not a day's partition or a view: ${partition}, ${positions}`);
  const [row] = await sequelize.query<{ read: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM ${positions} p WHERE p.feed = $1)
            AND NOT EXISTS (SELECT 1 FROM "${partition}" f, ${positions} p WHERE p.feed = $1 AND (f.tx, f.id) > (p.tx, p.id)) AS read`,
    { bind: [feed], type: QueryTypes.SELECT },
  );
  return row?.read === true;
}

/** A feed a service follows, and the view its cursors are published in. */
export interface FollowedFeed {
  feed: string;
  positions: string;
}

/**
 * How far behind its follower each feed is: seconds since the oldest row past the follower's cursor
 * was written (0 when it has read everything; a follower down, or held back by a long transaction,
 * shows here before its owner's retention keeps days for it). One probe of each feed's `(tx, id)`
 * index; keyed by feed.
 */
export async function feedLags(sequelize: Sequelize, feeds: FollowedFeed[]): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const { feed, positions } of feeds) {
    if (!NAME.test(feed) || !NAME.test(positions)) throw new Error(`not a feed or a view: ${feed}, ${positions}`);
    const [row] = await sequelize.query<{ lag: number | null }>(
      `WITH p AS (SELECT tx, id FROM ${positions} WHERE feed = $1)
       SELECT (SELECT extract(epoch FROM clock_timestamp() - f.created_at)::float8 FROM ${feed} f
                WHERE (f.tx, f.id) > ((SELECT tx FROM p), (SELECT id FROM p)) ORDER BY f.tx, f.id LIMIT 1) AS lag`,
      { bind: [feed], type: QueryTypes.SELECT },
    );
    out.set(feed, row?.lag === null || row?.lag === undefined ? 0 : Math.max(0, Number(row.lag)));
  }
  return out;
}
