import type { Sequelize } from "sequelize";

/**
 * Contacts to mark contacted after a campaign batch (issue 17): lastContactType/lastCampaignType are
 * the contacts service's to write (`contacts.markContacted`), and the call used to be fire and
 * forget, so a contacts node away at that moment lost the mark for good. Now the batch's outcome
 * statement also writes one row here with the contacts it reached; any campaigns node claims due
 * rows (lib/jobs/jobs.ts: owner, lease), calls contacts.markContacted and deletes the row, or puts it off
 * with a backoff when the call fails.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE TABLE campaign_contact_marks (
      id            bigserial PRIMARY KEY,
      campaign_id   uuid NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
      company_id    text NOT NULL,
      channel       text NOT NULL,
      contact_ids   uuid[] NOT NULL,
      attempts      integer NOT NULL DEFAULT 0,
      due_at        timestamptz NOT NULL DEFAULT now(),
      owner         text,
      leased_until  timestamptz
    );
    CREATE INDEX campaign_contact_marks_due ON campaign_contact_marks (due_at, id);
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`DROP TABLE campaign_contact_marks;`);
}
