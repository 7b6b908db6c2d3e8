import type { Sequelize } from "sequelize";

/**
 * Retiring a day finds its messages' keys by their ids (issue 33 targets: a day retired in under a
 * second at 100 M rows). A key's id is its message's id, drawn from the time of its first write
 * (migration 0023), so a day of `messages` is exactly the keys whose id lies in that day's range.
 * Until now the retention walked the day's rows and probed `message_keys`' primary key for each: a
 * random page of a large index a key (9 µs a key at 100 M rows, 2.3 s a day of 250,000).
 *
 * A B-tree over `id` reads a day's keys as one range, in id order, and the heap in about that order
 * too (keys are appended as their ids are drawn); each statement of the retention costs its own
 * keys, whatever the table's size. What it costs: about 22 bytes a key (8 of them the id), an index
 * insert at its right edge for each new key, and the index in every vacuum of `message_keys`.
 * (A BRIN was measured first: every statement reads the whole BRIN, 5 ms with `minmax` and 23 ms with
 * `minmax_multi` at 22,000 block ranges, so a day of 50 M keys in statements of 5,000 would read
 * it 10,000 times; docs/scaling.md.)
 *
 * The index is built here over the keys already stored; `CREATE INDEX` blocks writes to
 * `message_keys` meanwhile (about a minute at 100 M keys on 2 cores): ingest waits for it.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`CREATE INDEX message_keys_id ON message_keys (id)`);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`DROP INDEX message_keys_id`);
}
