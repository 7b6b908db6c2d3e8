import type { Sequelize } from "sequelize";

/**
 * Consent in sending (contract section 7): a recipient whose number opted out of the campaign's
 * channel, or whose contact was deleted after the confirm, ends SKIPPED (never sent), counted in
 * the campaign's `skipped` (progress.skipped). audience = sent + failed + skipped once it ends.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    ALTER TABLE campaigns ADD COLUMN skipped integer NOT NULL DEFAULT 0;
    ALTER TABLE campaign_recipients DROP CONSTRAINT campaign_recipients_status_check;
    ALTER TABLE campaign_recipients ADD CONSTRAINT campaign_recipients_status_check CHECK (status IN ('PENDING', 'SENT', 'FAILED', 'SKIPPED'));
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    UPDATE campaign_recipients SET status = 'FAILED', error = 'skipped' WHERE status = 'SKIPPED';
    ALTER TABLE campaign_recipients DROP CONSTRAINT campaign_recipients_status_check;
    ALTER TABLE campaign_recipients ADD CONSTRAINT campaign_recipients_status_check CHECK (status IN ('PENDING', 'SENT', 'FAILED'));
    ALTER TABLE campaigns DROP COLUMN skipped;
  `);
}
