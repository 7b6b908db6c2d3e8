/**
 * `inbox.campaignResponded` (GET /campaigns/stats asks it): who "wrote back" to a campaign, defined
 * once, here, by the owner of inbound messages. It reads tracking's view `campaign_messages`
 * (migration 0028) against the inbox's own conversations.
 */
import type { Exec } from "../../lib/db/db";
import type { CampaignStatsIn } from "../tracking/tracking.contract";

/** A recipient "wrote back" when an inbound message arrived within this long after the campaign message. */
export const RESPONSE_WINDOW_HOURS = 24;

/**
 * The distinct recipients (per campaign) of RCS/WhatsApp campaign messages who wrote back within 24
 * hours of their message: one query, driven by the campaign messages (the view keeps to tracking's
 * partial index messages_history_campaign), each probing its number's conversations
 * (conversations_contact) and their messages in the window (conversation_messages_thread).
 */
export async function campaignResponded(exec: Exec, q: CampaignStatsIn): Promise<number> {
  const params: unknown[] = [q.companyId];
  const p = (v: unknown) => `$${params.push(v)}`;
  const where = ["m.company_id = $1", "m.channel IN ('RCS', 'WHATSAPP')"];
  // Campaign ids are stored as the campaigns service makes them (lower case); one asked in upper case is the same campaign.
  if (q.campaignId) where.push(`m.campaign_id = ${p(q.campaignId.toLowerCase())}`);
  if (q.channel) where.push(`m.channel = ${p(q.channel)}`);
  if (q.from) where.push(`m.sent_at >= ${p(new Date(q.from).toISOString())}::timestamptz`);
  if (q.to) where.push(`m.sent_at < ${p(new Date(q.to).toISOString())}::timestamptz`);
  const [row] = await exec<{ responded: string }>(
    `SELECT count(*)::bigint AS responded FROM (
       SELECT DISTINCT m.campaign_id, m.channel, m.destination
         FROM campaign_messages m
        WHERE ${where.join(" AND ")}
          AND EXISTS (
            SELECT 1 FROM conversations c
              JOIN conversation_messages cm ON cm.company_id = c.company_id AND cm.conversation_id = c.id
             WHERE c.company_id = m.company_id AND c.contact_number = m.destination AND c.channel = m.channel
               AND cm.direction = 'INBOUND' AND cm.created_at >= m.sent_at
               AND cm.created_at < m.sent_at + interval '${RESPONSE_WINDOW_HOURS} hours')) r`,
    params,
  );
  return Number(row?.responded ?? 0);
}
