/**
 * Retiring the days of `messages` (migration 0023: daily partitions by a time-ordered id) once
 * past the retention; they are made ahead by lib/db/partitions.ts. Tracking's loops run both
 * (tracking.service.ts).
 */
import { QueryTypes, type Sequelize } from "sequelize";
import { dayOf, daysBefore, dropDay } from "../../lib/db/partitions";

/** 42P01: undefined_table (the day was dropped by another tracking node meanwhile). */
const isGone = (err: unknown) => (err as { parent?: { code?: string } }).parent?.code === "42P01";

/**
 * A day's id range, `[lo, hi)` (its partition's bounds: ids are drawn from the time of a message's
 * first write), and how many messages it holds: the planner's estimate, counted when the day was
 * never analyzed. Null when the day is gone.
 */
async function dayRange(sequelize: Sequelize, part: string): Promise<{ lo: bigint; hi: bigint; n: number } | null> {
  const [r] = await sequelize.query<{ lo: string; hi: string; est: number | null }>(
    `SELECT message_id_floor($1::date::timestamp AT TIME ZONE 'UTC')::text AS lo,
            message_id_floor(($1::date + 1)::timestamp AT TIME ZONE 'UTC')::text AS hi,
            (SELECT reltuples FROM pg_class WHERE oid = to_regclass($2))::float8 AS est`,
    { bind: [dayOf(part), part], type: QueryTypes.SELECT },
  );
  if (r!.est === null) return null;
  let n = Number(r!.est);
  if (n < 0) {
    // The partition's name is one daysBefore found (messages_pYYYYMMDD): safe to quote.
    const counted = await sequelize
      .query<{ n: string }>(`SELECT count(*) AS n FROM "${part}"`, { type: QueryTypes.SELECT })
      .catch((err: unknown) => (isGone(err) ? null : Promise.reject(err)));
    if (!counted) return null;
    n = Number(counted[0]!.n);
  }
  return { lo: BigInt(r!.lo), hi: BigInt(r!.hi), n };
}

/**
 * Retention by whole days (migration 0023): for each day before `cutoff`'s, its messages' keys go
 * first, then the day's partition is dropped. Keys go first so that no key ever names a message
 * that is gone: a receipt for a retired message meanwhile finds no key and is stored as a new
 * message. Answers the keys removed, the statements and the days dropped.
 *
 * A day's keys are exactly those whose id lies in the day's range (a key's id is its message's),
 * found through `message_keys`' BRIN index over `id` (migration 0035): they were appended in about
 * that order, so a statement reads only the blocks written in its slice of the day. The day is
 * cut into slices of time of about `batchSize` keys each (from its size), each slice one DELETE in
 * its own short transaction; a slice that held more than twice that halves the next, one that held
 * less than half doubles it (the day's traffic is not flat). Another tracking node may retire the
 * same day at once: it finds the keys deleted, and when it has dropped the day this walk is over.
 */
export async function purgeBefore(
  sequelize: Sequelize,
  cutoff: Date,
  batchSize: number,
  maxBatches = Infinity,
): Promise<{ messages: number; batches: number; days: string[] }> {
  const out = { messages: 0, batches: 0, days: [] as string[] };
  const batch = BigInt(batchSize);
  for (const part of await daysBefore(sequelize, "messages", cutoff)) {
    const range = await dayRange(sequelize, part);
    if (!range) continue;
    const { lo, hi } = range;
    let step = (hi - lo) / BigInt(Math.max(1, Math.ceil(range.n / batchSize)));
    for (let from = lo; from < hi;) {
      if (out.batches >= maxBatches) return out;
      const to = from + step < hi ? from + step : hi;
      const [row] = await sequelize.query<{ n: string }>(
        `WITH gone AS (DELETE FROM message_keys WHERE id >= $1::bigint AND id < $2::bigint RETURNING 1) SELECT count(*) AS n FROM gone`,
        { bind: [from.toString(), to.toString()], type: QueryTypes.SELECT },
      );
      const n = BigInt(row!.n);
      out.batches++;
      out.messages += Number(n);
      from = to;
      if (n > 2n * batch && step > 1n) step /= 2n;
      else if (2n * n < batch) step *= 2n;
    }
    if (await dropDay(sequelize, part)) out.days.push(dayOf(part));
  }
  return out;
}
