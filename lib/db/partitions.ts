/**
 * Daily partitions of the tables that grow without bound (issue 33): each owner makes its days
 * ahead and retires old ones whole, by dropping the day's partition (no row-by-row DELETE, no vacuum
 * debt). A day's partition is `<table>_pYYYYMMDD` (UTC). The SQL functions are migration 0023's
 * (`messages`, partitioned by a time-ordered id) and 0025's (`ensure_day_partitions`, partitioned by
 * a timestamp); both are idempotent and serialized across nodes by an advisory lock.
 */
import { QueryTypes, type Sequelize } from "sequelize";

const DAY_MS = 86_400_000;
const day = (at: Date) => at.toISOString().slice(0, 10);

/** The tables partitioned by day, and the function that makes their days. */
const MAKERS = {
  messages: "ensure_message_partitions($1::date, $2::date)",
  webhook_attempts: "ensure_day_partitions('webhook_attempts', $1::date, $2::date)",
  inbox_events: "ensure_day_partitions('inbox_events', $1::date, $2::date)",
  message_status_feed: "ensure_day_partitions('message_status_feed', $1::date, $2::date)",
  message_event_feed: "ensure_day_partitions('message_event_feed', $1::date, $2::date)",
  inbound_event_feed: "ensure_day_partitions('inbound_event_feed', $1::date, $2::date)",
  inbound_message_feed: "ensure_day_partitions('inbound_message_feed', $1::date, $2::date)",
} as const;
export type DailyTable = keyof typeof MAKERS;
/** Every table partitioned by day. */
export const DAILY_TABLES = Object.keys(MAKERS) as DailyTable[];

/** Makes `table`'s days from yesterday to `ahead` days from now that are missing; answers how many it made. */
export async function ensureDays(sequelize: Sequelize, table: DailyTable, ahead = 7): Promise<number> {
  const now = Date.now();
  const [row] = await sequelize.query<{ made: number }>(`SELECT ${MAKERS[table]} AS made`, {
    bind: [day(new Date(now - DAY_MS)), day(new Date(now + ahead * DAY_MS))],
    type: QueryTypes.SELECT,
  });
  return Number(row?.made ?? 0);
}

/** `table`'s days that end at or before the start of `cutoff`'s day (UTC), oldest first: their partitions' names. */
export async function daysBefore(sequelize: Sequelize, table: DailyTable, cutoff: Date): Promise<string[]> {
  const parts = await sequelize.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = $1::regclass AND c.relname ~ ('^' || $1 || '_p[0-9]{8}$') AND to_date(right(c.relname, 8), 'YYYYMMDD') < $2::date
      ORDER BY c.relname`,
    { bind: [table, day(cutoff)], type: QueryTypes.SELECT },
  );
  return parts.map((p) => p.name);
}

/** YYYY-MM-DD of a day's partition name. */
export const dayOf = (partition: string) => `${partition.slice(-8, -4)}-${partition.slice(-4, -2)}-${partition.slice(-2)}`;

/**
 * Drops one day's partition (a name `daysBefore` gave: a table name of ours and eight digits, safe
 * to quote). A DROP takes an exclusive lock on the parent for an instant, and while it waits for
 * that lock every new statement on the table queues behind it: so it waits 200 ms at most, three
 * times a second apart, and otherwise gives up (a long export holds the table) until the next run.
 * Answers whether the day is gone.
 */
export async function dropDay(sequelize: Sequelize, partition: string): Promise<boolean> {
  if (!/^[a-z_]+_p\d{8}$/.test(partition)) throw new Error(`not a day's partition: ${partition}`);
  for (let attempt = 1; ; attempt++) {
    try {
      await sequelize.transaction(async (transaction) => {
        await sequelize.query(`SET LOCAL lock_timeout = '200ms'`, { transaction });
        await sequelize.query(`DROP TABLE IF EXISTS "${partition}"`, { transaction });
      });
      return true;
    } catch (err) {
      // 55P03: lock_not_available.
      if ((err as { parent?: { code?: string } }).parent?.code !== "55P03") throw err;
      if (attempt === 3) return false;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

/**
 * Drops `table`'s days that end at or before the start of `cutoff`'s day (UTC), oldest first, each
 * its own statement; answers the days dropped (YYYY-MM-DD). A row of the cutoff's own day stays
 * until its whole day has passed: readers that promise an exact age filter by it.
 */
export async function dropDaysBefore(
  sequelize: Sequelize,
  table: DailyTable,
  cutoff: Date,
  /** A feed's owner: whether its followers have read the whole day yet (a day not read yet stays, and the days after it). */
  readWhole?: (partition: string) => Promise<boolean>,
): Promise<string[]> {
  const dropped: string[] = [];
  for (const name of await daysBefore(sequelize, table, cutoff)) {
    if (readWhole && !(await readWhole(name))) break;
    if (await dropDay(sequelize, name)) dropped.push(dayOf(name));
  }
  return dropped;
}
