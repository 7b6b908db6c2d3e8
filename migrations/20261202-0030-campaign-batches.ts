import type { Sequelize } from "sequelize";

/**
 * Range claims (issue 33 item 4): a batch of a campaign's recipients is held by one lease row,
 * `campaign_batches`, not by a claim token and a lease written on each recipient (`owner`,
 * `leased_until`, migration 0015). A lease covers the recipients of its campaign whose pending key
 * `(due_at, contact_id)` lies between its `lo` and `hi` keys (the batch taken, in that order); a claim
 * takes none of them while the lease is held (services/campaigns/campaigns.sender.queries.ts). A
 * claim, a heartbeat, a give-back and an outcome each write one lease row instead of one row per
 * recipient.
 *
 * The leases in flight when this runs move: one row per claim token still held, over the keys of
 * its recipients, with their latest lease (a batch being sent during the upgrade is not claimed
 * again before its lease runs out). Down moves them back onto the recipients of each range. Claims
 * make ranges that never overlap and hold exactly the recipients their batch took, so that is
 * exact. Stop the campaigns nodes before either step.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE TABLE campaign_batches (
      campaign_id  uuid NOT NULL,
      company_id   text NOT NULL,
      token        text NOT NULL,
      lo_due       timestamptz NOT NULL,
      lo_contact   uuid NOT NULL,
      hi_due       timestamptz NOT NULL,
      hi_contact   uuid NOT NULL,
      leased_until timestamptz NOT NULL,
      PRIMARY KEY (campaign_id, token, company_id),
      CONSTRAINT campaign_batches_campaign_id_fkey FOREIGN KEY (company_id, campaign_id) REFERENCES campaigns (company_id, id) ON DELETE CASCADE
    );
    INSERT INTO campaign_batches (campaign_id, company_id, token, lo_due, lo_contact, hi_due, hi_contact, leased_until)
    SELECT campaign_id, company_id, owner,
           (array_agg(due_at ORDER BY due_at, contact_id))[1], (array_agg(contact_id ORDER BY due_at, contact_id))[1],
           (array_agg(due_at ORDER BY due_at DESC, contact_id DESC))[1], (array_agg(contact_id ORDER BY due_at DESC, contact_id DESC))[1],
           max(leased_until)
      FROM campaign_recipients
     WHERE owner IS NOT NULL AND status = 'PENDING' AND leased_until IS NOT NULL
     GROUP BY campaign_id, company_id, owner;
    ALTER TABLE campaign_recipients DROP COLUMN owner;
    ALTER TABLE campaign_recipients DROP COLUMN leased_until;
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    ALTER TABLE campaign_recipients ADD COLUMN owner text;
    ALTER TABLE campaign_recipients ADD COLUMN leased_until timestamptz;
    UPDATE campaign_recipients r SET owner = b.token, leased_until = b.leased_until
      FROM campaign_batches b
     WHERE r.campaign_id = b.campaign_id AND r.company_id = b.company_id AND r.status = 'PENDING'
       AND (r.due_at, r.contact_id) >= (b.lo_due, b.lo_contact) AND (r.due_at, r.contact_id) <= (b.hi_due, b.hi_contact);
    DROP TABLE campaign_batches;
  `);
}
