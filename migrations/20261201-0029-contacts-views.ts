import type { Sequelize } from "sequelize";

/**
 * The read-only views contacts publishes (issue 33 item 1: no SQL strings in contracts). Campaigns
 * and the inbox read contacts' data through them, in their own statements. Until now they ran
 * condition builders that contacts' contract exported (`optedOutSql`, `contactGoneSql`,
 * `liveListsSql`, `audienceSql`). Each view is a plain projection or join, so the planner inlines
 * it, and the probes stay what they were: one primary-key probe each.
 *
 * - `contacts_opted_out (company_id, channel, phone_number)`: numbers opted out of a channel
 *   (contract section 7).
 * - `contacts_existing (company_id, id)`: contacts not deleted.
 * - `contacts_live_lists (company_id, id, is_test)`: lists not deleted.
 * - `contacts_live_list_members (company_id, list_id, contact_id, is_test)`: the members of those
 *   lists.
 * - `contacts_reachable (company_id, id, phone_number, first_name, last_name, custom_fields,
 *   communication_refused)`: valid contacts with a number, what a campaign can reach. The RCS and
 *   WhatsApp numbers refused are in `communication_refused`.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE VIEW contacts_opted_out AS
      SELECT company_id, channel, phone_number FROM opt_outs WHERE opted_out;
    CREATE VIEW contacts_existing AS
      SELECT company_id, id FROM contacts;
    CREATE VIEW contacts_live_lists AS
      SELECT company_id, id, is_test FROM contact_lists WHERE deleted_at IS NULL;
    CREATE VIEW contacts_live_list_members AS
      SELECT m.company_id, m.list_id, m.contact_id, l.is_test
        FROM contact_list_members m JOIN contact_lists l ON l.company_id = m.company_id AND l.id = m.list_id
       WHERE l.deleted_at IS NULL;
    CREATE VIEW contacts_reachable AS
      SELECT company_id, id, phone_number, first_name, last_name, custom_fields, communication_refused
        FROM contacts WHERE is_valid AND phone_number IS NOT NULL;
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    DROP VIEW contacts_reachable;
    DROP VIEW contacts_live_list_members;
    DROP VIEW contacts_live_lists;
    DROP VIEW contacts_existing;
    DROP VIEW contacts_opted_out;
  `);
}
