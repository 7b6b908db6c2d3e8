/**
 * Retiring the days of `messages` (migration 0023: daily partitions by a time-ordered id) once
 * past the retention; they are made ahead by lib/db/partitions.ts. Tracking's loops run both
 * (tracking.service.ts).
 */
import { QueryTypes, type Sequelize } from "sequelize";
import { dayOf, daysBefore, dropDay } from "../../lib/db/partitions";

/**
 * Retention by whole days (migration 0023): for each day before `cutoff`'s, its messages' keys go
 * first, then the day's partition is dropped. Keys go first so that no key ever names a message
 * that is gone: a receipt for a retired message meanwhile finds no key and is stored as a new
 * message. Answers the keys removed, the statements and the days dropped.
 *
 * A day's keys are exactly those whose id lies in the day's range (a key's id is its message's):
 * they are deleted through `message_keys`' index over `id` (migration 0035), `batchSize` a
 * statement in id order, each its own short transaction (waiting for a writer that holds one).
 * Another tracking node may retire the same day at once: it finds the keys deleted, and whichever
 * drops the day first ends the other's walk.
 */
export async function purgeBefore(
  sequelize: Sequelize,
  cutoff: Date,
  batchSize: number,
  maxBatches = Infinity,
): Promise<{ messages: number; batches: number; days: string[] }> {
  const out = { messages: 0, batches: 0, days: [] as string[] };
  for (const part of await daysBefore(sequelize, "messages", cutoff)) {
    // The day's id range: its partition's bounds.
    const [range] = await sequelize.query<{ lo: string; hi: string }>(
      `SELECT message_id_floor($1::date::timestamp AT TIME ZONE 'UTC')::text AS lo, message_id_floor(($1::date + 1)::timestamp AT TIME ZONE 'UTC')::text AS hi`,
      { bind: [dayOf(part)], type: QueryTypes.SELECT },
    );
    for (let from = range!.lo; ;) {
      if (out.batches >= maxBatches) return out;
      const [row] = await sequelize.query<{ n: string; taken: string; last: string | null }>(
        `WITH b AS (SELECT id FROM message_keys WHERE id >= $1::bigint AND id < $2::bigint ORDER BY id LIMIT $3),
              gone AS (DELETE FROM message_keys WHERE id >= $1::bigint AND id <= (SELECT max(id) FROM b) RETURNING 1)
         SELECT (SELECT count(*) FROM gone) AS n, (SELECT count(*) FROM b) AS taken, (SELECT max(id) FROM b)::text AS last`,
        { bind: [from, range!.hi, batchSize], type: QueryTypes.SELECT },
      );
      out.batches++;
      out.messages += Number(row!.n);
      if (Number(row!.taken) < batchSize || row!.last === null) break;
      from = (BigInt(row!.last) + 1n).toString();
    }
    if (await dropDay(sequelize, part)) out.days.push(dayOf(part));
  }
  return out;
}
