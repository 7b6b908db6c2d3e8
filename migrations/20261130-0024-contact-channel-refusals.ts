import type { Sequelize } from "sequelize";

/**
 * A contact's refused channels (issue 33): `communication_refused` holds RCS or WhatsApp once the
 * latest word on the contact's number for that channel was an UNSUPPORTED or DISABLED receipt
 * (tracking's `tracking.channelSupportChanged`, applied beside `communication_supported`). A
 * campaign's audience skips those numbers by reading the contact's own row; until now it looked up
 * the number's latest receipt in `messages` per contact, which over 400 daily partitions is 400
 * index probes per contact and, besides, a read of another service's table.
 *
 * Filled here from what `messages` holds, by the rule the event applies: of the receipts that speak
 * to reachability (DELIVERED, DISABLED, UNSUPPORTED) of messages really sent (not simulated), the
 * latest (by sentAt) to the contact's number on that channel was DISABLED (10) or UNSUPPORTED (11).
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    ALTER TABLE contacts ADD COLUMN communication_refused text[] NOT NULL DEFAULT '{}';
    UPDATE contacts c SET communication_refused = r.channels
      FROM (SELECT company_id, destination, array_agg(channel ORDER BY channel) AS channels
              FROM (SELECT DISTINCT ON (company_id, channel, destination) company_id, channel, destination, status_code
                      FROM messages
                     WHERE channel IN ('RCS', 'WHATSAPP') AND sent_at IS NOT NULL AND status_code IN (3, 10, 11) AND NOT simulation
                     ORDER BY company_id, channel, destination, sent_at DESC, id DESC) latest
             WHERE status_code IN (10, 11)
             GROUP BY company_id, destination) r
     WHERE c.company_id = r.company_id AND c.phone_number = r.destination;
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`ALTER TABLE contacts DROP COLUMN communication_refused`);
}
