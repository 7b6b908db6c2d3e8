/**
 * The contacts service's SQL for a contact's channels as other services report them: what it was
 * last sent on (lastContactType, lastCampaignType: `contacts.markContacted`, contacts.actions.ts)
 * and what its number is reachable on (communicationSupported from delivery receipts,
 * contacts.support.ts, following tracking's status feed). Every statement filters by the account.
 */
import type { Sequelize } from "sequelize";
import type { Exec } from "../../lib/db/db";
import type { Channel } from "../../lib/messaging/channels";
import type { ChannelSupport } from "../tracking/tracking.contract";

/**
 * lastContactType (and, for a campaign, lastCampaignType) of the account's contacts among `ids`
 * become `channel`; answers how many changed (those already so are left as they are).
 */
export async function markContacted(sequelize: Sequelize, companyId: string, ids: string[], channel: Channel, campaign: boolean): Promise<number> {
  const [rows] = await sequelize.query(
    `UPDATE contacts SET last_contact_type = :channel,
            last_campaign_type = CASE WHEN :campaign THEN :channel ELSE last_campaign_type END, updated_at = now()
      WHERE company_id = :companyId AND id IN (:ids)
        AND (last_contact_type IS DISTINCT FROM :channel OR (:campaign AND last_campaign_type IS DISTINCT FROM :channel))
      RETURNING id`,
    { replacements: { channel, campaign, companyId, ids } },
  );
  return (rows as unknown[]).length;
}

/**
 * Applies one channel's reachability changes in one statement (a contact, one number, meets at most
 * one of them): RCS or WhatsApp is added to the communicationSupported of the account's contacts
 * with that number and taken off their refused channels when `supported`, else the reverse (the
 * campaign audience skips refused channels, through the view contacts_reachable); contacts already so are
 * left as they are.
 */
export async function applyChannelSupportChanges(exec: Exec, changes: ChannelSupport[]): Promise<void> {
  await exec(
    `UPDATE contacts AS c
        SET communication_supported = CASE
              WHEN NOT x.supported THEN array_remove(c.communication_supported, x.channel)
              WHEN x.channel = ANY (c.communication_supported) THEN c.communication_supported
              ELSE array_append(c.communication_supported, x.channel) END,
            communication_refused = CASE
              WHEN x.supported THEN array_remove(c.communication_refused, x.channel)
              WHEN x.channel = ANY (c.communication_refused) THEN c.communication_refused
              ELSE array_append(c.communication_refused, x.channel) END,
            updated_at = now()
       FROM jsonb_to_recordset($1::jsonb) AS x("companyId" text, channel text, destination text, supported boolean)
      WHERE c.company_id = x."companyId" AND c.phone_number = x.destination
        AND ((x.channel = ANY (c.communication_supported)) IS DISTINCT FROM x.supported
          OR (x.channel = ANY (c.communication_refused)) IS DISTINCT FROM NOT x.supported)`,
    [JSON.stringify(changes)],
  );
}
