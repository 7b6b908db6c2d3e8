/**
 * Retiring the days of `messages` (migration 0023: daily partitions by a time-ordered id) once
 * past the retention; they are made ahead by lib/db/partitions.ts. Tracking's loops run both
 * (tracking.service.ts).
 */
import { QueryTypes, type Sequelize } from "sequelize";
import { dayOf, daysBefore, dropDay } from "../../lib/db/partitions";

/**
 * Retention by whole days (migration 0023): for each day before `cutoff`'s, its messages' keys go
 * first, walked through the day's own rows in key order (`batchSize` a statement, each its own short
 * transaction, waiting for a writer that holds one), then the day's partition is dropped. Keys go
 * first so that no key ever names a message that is gone: a receipt for a retired message meanwhile
 * finds no key and is stored as a new message. Answers the keys removed, the statements and the
 * days dropped.
 */
export async function purgeBefore(
  sequelize: Sequelize,
  cutoff: Date,
  batchSize: number,
  maxBatches = Infinity,
): Promise<{ messages: number; batches: number; days: string[] }> {
  const out = { messages: 0, batches: 0, days: [] as string[] };
  for (const part of await daysBefore(sequelize, "messages", cutoff)) {
    let after: [string, string] = ["", "-9223372036854775808"];
    for (;;) {
      if (out.batches >= maxBatches) return out;
      // The partition's name is one daysBefore found (messages_pYYYYMMDD): safe to quote. Another
      // tracking node may retire the same day at once: when it has dropped it, this walk is over.
      const [row] = await sequelize
        .query<{ n: string; scanned: string; c: string | null; i: string | null }>(
          `WITH b AS (
           SELECT company_id, channel, customer_message_id, id FROM "${part}"
            WHERE (company_id, id) > ($1::text, $2::bigint) ORDER BY company_id, id LIMIT $3),
         gone AS (
           DELETE FROM message_keys k USING b
            WHERE k.company_id = b.company_id AND k.channel = b.channel AND k.customer_message_id = b.customer_message_id AND k.id = b.id
           RETURNING 1),
         last AS (SELECT company_id, id FROM b ORDER BY company_id DESC, id DESC LIMIT 1)
         SELECT (SELECT count(*) FROM gone) AS n, (SELECT count(*) FROM b) AS scanned, (SELECT company_id FROM last) AS c, (SELECT id::text FROM last) AS i`,
          { bind: [after[0], after[1], batchSize], type: QueryTypes.SELECT },
        )
        .catch((err: unknown) => {
          // 42P01: undefined_table (dropped by the other node).
          if ((err as { parent?: { code?: string } }).parent?.code === "42P01") return [null];
          throw err;
        });
      if (!row) break;
      out.batches++;
      out.messages += Number(row!.n);
      if (Number(row!.scanned) < batchSize || row!.c === null) break;
      after = [row!.c, row!.i!];
    }
    if (await dropDay(sequelize, part)) out.days.push(dayOf(part));
  }
  return out;
}
