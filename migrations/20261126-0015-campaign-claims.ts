import type { Sequelize } from "sequelize";

/**
 * Campaign sends claimed per recipient (issue 17, the pipelined send).
 *
 * Before: the campaign row was the job, held by one node (`campaigns.node_id`, `leased_until`), so
 * one node sent one batch at a time. Now the recipients are the jobs: a batch of
 * `campaign_recipients` is claimed with a claim token (`owner`) and a lease (`leased_until`), any
 * number of batches of the same campaign are in flight on any number of campaigns nodes, and a
 * batch's outcomes are written only while its token still holds them. The two columns are not
 * indexed: a claim changes no indexed column, so PostgreSQL can write it as a heap-only update.
 *
 * `campaigns.rate_next_at`: the campaign's next send slot when it has a `sendRatePerSecond`: a
 * claim of n recipients is made only once the slot has come and moves it n / rate seconds on, in the
 * statement that claims them, so the cap holds across every node.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    ALTER TABLE campaign_recipients ADD COLUMN owner text;
    ALTER TABLE campaign_recipients ADD COLUMN leased_until timestamptz;
    ALTER TABLE campaigns ADD COLUMN rate_next_at timestamptz;
    ALTER TABLE campaigns DROP COLUMN node_id;
    ALTER TABLE campaigns DROP COLUMN leased_until;
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    ALTER TABLE campaigns ADD COLUMN node_id text;
    ALTER TABLE campaigns ADD COLUMN leased_until timestamptz;
    ALTER TABLE campaigns DROP COLUMN rate_next_at;
    ALTER TABLE campaign_recipients DROP COLUMN leased_until;
    ALTER TABLE campaign_recipients DROP COLUMN owner;
  `);
}
