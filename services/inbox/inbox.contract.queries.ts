/**
 * The SQL inbox publishes through inbox.contract.ts (re-exported there, so importers name the
 * contract): who "wrote back" to a campaign (`campaignRespondedSql`), how a writer of `inbox_events`
 * draws its ids from the account's counter (`drawEventIdsSql`, `eventIdSql`), a reader's horizon
 * (`INBOX_EVENTS_HORIZON_SQL`), and the `message.status` events tracking writes in its own
 * transaction (`MESSAGE_STATUS_EVENTS_SQL`). The rules they keep are the contract's (see there).
 */
import { DELIVERY_STATUSES } from "../../lib/messaging/channels";
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

/**
 * CTEs drawing the ids of the events in `from` (a relation with an account column `company`):
 * `drawn_n` counts them per account, `drawn` adds the counts to the accounts' counters, in account
 * order (two writers of the same accounts take their rows in the same order), and answers each
 * account's `last_id`. An account's events then take ids `last_id - n + 1 .. last_id`: see
 * {@link eventIdSql}.
 */
export const drawEventIdsSql = (from: string, company: string) =>
  `drawn_n AS (SELECT ${company} AS company_id, count(*) AS n FROM ${from} GROUP BY 1),
   drawn AS (
     INSERT INTO inbox_event_counters AS ctr (company_id, last_id) SELECT company_id, n FROM drawn_n ORDER BY company_id
     ON CONFLICT (company_id) DO UPDATE SET last_id = ctr.last_id + excluded.last_id
     RETURNING ctr.company_id, ctr.last_id)`;

/** The id of each event row joined to `drawn` (as `d`), numbered in `order` within its account. */
export const eventIdSql = (company: string, order: string) =>
  `d.last_id - count(*) OVER (PARTITION BY ${company}) + row_number() OVER (PARTITION BY ${company} ORDER BY ${order})`;

/**
 * The account's horizon ($1: the account): the last event id it drew, 0 before its first. Every
 * event of the account up to it is committed in the snapshot that reads it (see above).
 */
export const INBOX_EVENTS_HORIZON_SQL = `SELECT coalesce((SELECT last_id FROM inbox_event_counters WHERE company_id = $1), 0) AS horizon`;

const STATUS_NAME = `CASE hit.status_code ${DELIVERY_STATUSES.map((s) => `WHEN ${s.code} THEN '${s.name}'`).join(" ")} ELSE 'UNKNOWN' END`;

/**
 * `message.status` events for the inbox replies among changed messages, in the writer's transaction:
 * $1 is a JSON array of {@link StatusChangeKey}, one per message (its status as the write left it). A
 * reply is the OUTBOUND `conversation_messages` row of the same account and channel whose
 * `message_id` is the message's customerMessageId (its unique index); `data` carries the message's id
 * as the thread answers it (its customerMessageId) and that status. It reads nothing of tracking's. Answers the accounts that
 * got events (`company_id`), for the broadcast after the commit.
 */
export const MESSAGE_STATUS_EVENTS_SQL = `WITH k AS (
    SELECT k.c, k.ch, k.id, k.st, k.dd, k.ra FROM jsonb_to_recordset($1::jsonb) AS k(c text, ch text, id text, st smallint, dd timestamptz, ra timestamptz)
     WHERE k.ch IN ('RCS', 'WHATSAPP')),
  hit AS MATERIALIZED (
    SELECT cm.company_id, cm.conversation_id, cm.message_id AS reply_id, k.st AS status_code, k.ra AS read_at, k.dd AS delivery_date
      FROM k
      JOIN conversation_messages cm ON cm.company_id = k.c AND cm.channel = k.ch AND cm.direction = 'OUTBOUND' AND cm.message_id = k.id),
  ${drawEventIdsSql("hit", "company_id")},
  ins AS (
    INSERT INTO inbox_events (company_id, id, conversation_id, type, data)
    SELECT hit.company_id, ${eventIdSql("hit.company_id", "hit.reply_id")}, hit.conversation_id, 'message.status',
           jsonb_build_object('chatId', hit.conversation_id, 'id', hit.reply_id, 'direction', 'OUTBOUND',
                              'deliveryStatus', ${STATUS_NAME}, 'statusCode', hit.status_code,
                              'deliveryDate', hit.delivery_date, 'readAt', hit.read_at)
      FROM hit JOIN drawn d ON d.company_id = hit.company_id
     ORDER BY hit.company_id, hit.reply_id
    RETURNING company_id)
  SELECT DISTINCT company_id FROM ins`;
