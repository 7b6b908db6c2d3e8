/**
 * Campaigns' reads of contacts' data: SQL of campaigns' own over the read-only views contacts
 * publishes (migration 0029), never over contacts' tables. These are the consent probes a campaign
 * makes at its confirm and with each batch (contract section 7), its lists, and its audience. Each
 * view is inlined by the planner: a probe is one primary-key lookup, as it was on the tables. The
 * arguments are SQL expressions (parameters of the caller's statement).
 */
import type { Channel } from "../../lib/messaging/channels";

/** The number `phone` is opted out of `channel` in the account `companyId`. */
export const optedOutSql = (companyId: string, channel: string, phone: string): string =>
  `EXISTS (SELECT 1 FROM contacts_opted_out o WHERE o.company_id = ${companyId} AND o.channel = ${channel} AND o.phone_number = ${phone})`;

/** No contact `contactId` is left in the account (deleted after the confirm). */
export const contactGoneSql = (companyId: string, contactId: string): string =>
  `NOT EXISTS (SELECT 1 FROM contacts_existing e WHERE e.company_id = ${companyId} AND e.id = ${contactId})`;

/** The account's live lists among `listIds` (bigint[]), as rows `{ id }`; `lock`: held FOR SHARE until the caller's transaction ends, so a deletion waits for it. */
export const liveListsSql = (companyId: string, listIds: string, lock = false): string =>
  `SELECT l.id FROM contacts_live_lists l WHERE l.company_id = ${companyId} AND l.id = ANY (${listIds}::bigint[])${lock ? " FOR SHARE" : ""}`;

/**
 * A campaign's audience on `channel`: the reachable contacts (valid, with a number) that are members
 * of the account's live lists among `listIds`. On RCS and WhatsApp, contacts whose number refused the
 * channel (`communication_refused`) are left out. One row per contact:
 * - `contact_id`, `destination`;
 * - `vars`: first and last name, and the custom fields named by `customKeys` (text[]), for the
 *   placeholders;
 * - `simulation`: true when every list that brings the contact is a test list.
 * One join of memberships and contacts, grouped by contact (by every column it selects: the views
 * carry no key for the planner to see). Grouping the memberships first and probing each contact by
 * its key made a 20,000-contact preview on embedded PGlite about three times slower
 * (campaigns-preview.spec's fairness case: 87 s against 20-27 s).
 */
export function audienceSql(o: { companyId: string; listIds: string; customKeys: string; channel: Channel }): string {
  const refused = o.channel === "SMS" ? "" : `AND NOT ('${o.channel === "RCS" ? "RCS" : "WHATSAPP"}' = ANY (c.communication_refused))`;
  return `SELECT c.id AS contact_id, c.phone_number AS destination,
                 jsonb_build_object('firstName', c.first_name, 'lastName', c.last_name, 'customFields',
                   (SELECT coalesce(jsonb_object_agg(k, c.custom_fields -> k), '{}'::jsonb) FROM unnest(${o.customKeys}::text[]) k WHERE jsonb_exists(c.custom_fields, k))) AS vars,
                 bool_and(m.is_test) AS simulation
            FROM contacts_live_list_members m
            JOIN contacts_reachable c ON c.company_id = m.company_id AND c.id = m.contact_id
           WHERE m.company_id = ${o.companyId} AND m.list_id = ANY (${o.listIds}::bigint[]) ${refused}
           GROUP BY c.company_id, c.id, c.phone_number, c.first_name, c.last_name, c.custom_fields`;
}
