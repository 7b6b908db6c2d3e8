import type { Sequelize } from "sequelize";

/**
 * The key that made a key (issue 15): `api_keys.created_by_key_id`, the id of the key whose
 * POST /authentication created this one, null for keys made by the admin command. Every key answer
 * shows it as `createdByKeyId`, so an account owner can find and revoke what a stolen key made.
 *
 * The first migration already kept this id, as `created_by`, written but never shown: it is renamed,
 * so keys made before this migration keep their creator. No foreign key: a key outlives its
 * creator's deletion and still names it. The index serves "the keys this key made".
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    ALTER TABLE api_keys RENAME COLUMN created_by TO created_by_key_id;
    CREATE INDEX api_keys_created_by_key ON api_keys (created_by_key_id) WHERE created_by_key_id IS NOT NULL;
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    DROP INDEX api_keys_created_by_key;
    ALTER TABLE api_keys RENAME COLUMN created_by_key_id TO created_by;
  `);
}
