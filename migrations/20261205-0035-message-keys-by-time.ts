import type { Sequelize } from "sequelize";

/**
 * Retiring a day finds its messages' keys by their time (issue 33 targets: a day retired in under a
 * second at 100 M rows). A key's id is its message's id, drawn from the time of its first write
 * (migration 0023), so a day of `messages` is exactly the keys whose id lies in that day's range,
 * and keys are appended to `message_keys` in about that order. Until now the retention walked the
 * day's rows and probed `message_keys`' primary key for each (one random page of a large index a
 * key: 9 µs a key at 100 M rows, 2.3 s a day of 250,000).
 *
 * A BRIN index over `id` (a few pages for the whole table; nothing for a writer to maintain but the
 * summary of the last block range) lets a DELETE of an id range read only the blocks whose keys
 * were written in it. The `minmax_multi` operator class keeps several intervals per block range:
 * blocks emptied by a retired day and filled again by a new one hold two intervals, not one spanning
 * every day between, so the index stays selective after a retention cycle. 32 pages a range (about
 * 3,000 keys): a statement of 5,000 keys reads two or three ranges.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`CREATE INDEX message_keys_id ON message_keys USING brin (id int8_minmax_multi_ops) WITH (pages_per_range = 32)`);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`DROP INDEX message_keys_id`);
}
