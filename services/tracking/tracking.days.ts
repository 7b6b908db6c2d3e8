/**
 * The days of `messages` (migration 0023: daily partitions by a time-ordered id): made ahead, and
 * retired whole once past the retention. Tracking's loops run both (tracking.service.ts).
 */
import { QueryTypes, type Sequelize } from "sequelize";

/**
 * Retention by whole days (migration 0023): the keys of every message of a day before `cutoff`'s
 * go first, `batchSize` rows per statement (the BRIN index on their id finds them), each its own
 * short transaction skipping rows another writer holds; then each such day's partition is dropped at
 * once. Keys go first so that no key ever names a message that is gone: a receipt for a retired
 * message meanwhile finds no key and is stored as a new message. Answers the keys removed, the
 * batches and the days dropped.
 */
export async function purgeBefore(
  sequelize: Sequelize,
  cutoff: Date,
  batchSize: number,
  maxBatches = Infinity,
): Promise<{ messages: number; batches: number; days: string[] }> {
  const out = { messages: 0, batches: 0, days: [] as string[] };
  const day = cutoff.toISOString().slice(0, 10);
  for (;;) {
    if (out.batches >= maxBatches) return out;
    const [row] = await sequelize.query<{ n: string }>(
      `WITH gone AS (
         DELETE FROM message_keys WHERE (company_id, channel, customer_message_id) IN (
           SELECT company_id, channel, customer_message_id FROM message_keys
            WHERE id < message_id_floor($1::date::timestamp AT TIME ZONE 'UTC') LIMIT $2 FOR UPDATE SKIP LOCKED)
         RETURNING 1)
       SELECT count(*) AS n FROM gone`,
      { bind: [day, batchSize], type: QueryTypes.SELECT },
    );
    const n = Number(row!.n);
    out.batches++;
    out.messages += n;
    if (n < batchSize) break;
  }
  const parts = await sequelize.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = 'messages'::regclass AND c.relname ~ '^messages_p[0-9]{8}$' AND to_date(substr(c.relname, 11), 'YYYYMMDD') < $1::date
      ORDER BY c.relname`,
    { bind: [day], type: QueryTypes.SELECT },
  );
  for (const { name } of parts) {
    // The name is one this service made (the pattern above): quoted all the same.
    await sequelize.query(`DROP TABLE IF EXISTS "${name}"`);
    out.days.push(`${name.slice(10, 14)}-${name.slice(14, 16)}-${name.slice(16, 18)}`);
  }
  return out;
}

/** Makes the daily partitions of `messages` from `first` to `last` (UTC days) that are missing; answers how many it made. */
export async function ensurePartitions(sequelize: Sequelize, first: Date, last: Date): Promise<number> {
  const [row] = await sequelize.query<{ made: number }>(`SELECT ensure_message_partitions($1::date, $2::date) AS made`, {
    bind: [first.toISOString().slice(0, 10), last.toISOString().slice(0, 10)],
    type: QueryTypes.SELECT,
  });
  return Number(row?.made ?? 0);
}
