/**
 * The SQL inbox publishes through inbox.contract.ts (re-exported there, so importers name the
 * contract): who "wrote back" to a campaign (`campaignRespondedSql`).
 */
import { campaignMessageConditions, type CampaignStatsFilters } from "../tracking/tracking.contract";

/** A recipient "wrote back" when an inbound message arrived within this long after the campaign message. */
export const RESPONSE_WINDOW_HOURS = 24;

/**
 * The distinct recipients (per campaign) of RCS/WhatsApp campaign messages who wrote back within 24
 * hours of their message: one query, driven by the campaign messages (tracking's partial index
 * messages_history_campaign), each probing its number's conversations (conversations_contact) and
 * their messages in the window (conversation_messages_thread). Answers one row `{ responded }`.
 * Parameters as tracking's campaignStatsSql: $1 the account, then the filters given, in order.
 */
export function campaignRespondedSql(companyId: string, q: CampaignStatsFilters): { sql: string; params: unknown[] } {
  const { where, params } = campaignMessageConditions(companyId, q);
  return {
    sql: `SELECT count(*)::bigint AS responded FROM (
            SELECT DISTINCT m.campaign_id, m.channel, m.destination
              FROM messages m
             WHERE ${where.join(" AND ")} AND m.channel IN ('RCS', 'WHATSAPP')
               AND EXISTS (
                 SELECT 1 FROM conversations c
                   JOIN conversation_messages cm ON cm.conversation_id = c.id
                  WHERE c.company_id = m.company_id AND c.contact_number = m.destination AND c.channel = m.channel
                    AND cm.direction = 'INBOUND' AND cm.created_at >= m.sent_at
                    AND cm.created_at < m.sent_at + interval '${RESPONSE_WINDOW_HOURS} hours')) r`,
    params,
  };
}
