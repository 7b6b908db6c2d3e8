/**
 * What other services may import from inbox: the read-side builder of the campaign statistics'
 * `responded` (campaigns' GET /campaigns/stats), so that "wrote back" is defined once, here, by the
 * owner of inbound messages; the body of `inbox.ingest` (the ingress and the simulator call it); and
 * the live view's event types, the broadcast that wakes the streams, what the gateway reads events
 * with, and the SQL that writes `message.status` events in tracking's own transaction.
 *
 * `inbox_events` ids are the SSE event ids, counted per account (an account's stream never shows
 * another account's activity) and read `id > Last-Event-ID`, so a reader must never pass an id
 * whose transaction has not ended yet. Every writer draws its ids from the account's row of
 * `inbox_event_counters` ({@link drawEventIdsSql}), which it then holds until its commit: the
 * account's writers commit in id order, and whatever one statement sees of an account's events is
 * every event up to the counter it sees (its horizon), none missing. Write inbox events as the last
 * statement of a transaction, so the account's row is held only for the commit.
 */
import { DELIVERY_STATUSES } from "../../lib/channels";
import { campaignMessageConditions, type CampaignStatsFilters } from "../tracking/tracking.contract";
import type { IngestIn, InboundMessageIn } from "./inbox.schemas";

export type { IngestIn as InboxIngestIn, InboundMessageIn };

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

/** What a live-view event tells. `data` is the message (contract "Conversation" messages) or the conversation. */
export type InboxEventType =
  "message.created" | "message.status" | "conversation.read" | "conversation.archived" | "conversation.unarchived" | "conversation.windowClosed";

export const INBOX_EVENT_TYPES: readonly InboxEventType[] = [
  "message.created",
  "message.status",
  "conversation.read",
  "conversation.archived",
  "conversation.unarchived",
  "conversation.windowClosed",
];

/** Where a stream starts: after `after` (its Last-Event-ID, or the newest event when it has none); `head` is the newest event id now. */
export interface EventStreamStart {
  $eventStream: { companyId: string; chatId: string | null; after: number; head: number };
}

/** What `inbox.eventsSince` takes (the gateway's read of events; the account is the call's meta.companyId). */
export interface EventsSinceIn {
  chatId?: string;
  after: number;
  limit?: number;
}
export interface LiveEvent {
  id: number;
  type: string;
  /** The event's data as one line of JSON text (with `chatId`), written to the stream as it is. */
  data: string;
  chatId: string;
}

/**
 * A page of an account's events after `after`, in id order. `next`: where the next read starts;
 * without `more` it is past every event of the account committed when the page was read (a stream
 * that wrote the page has seen the account up to there, whether or not the events were its chat's).
 */
export interface EventsSinceOut {
  events: LiveEvent[];
  next: number;
  more: boolean;
}

/** The broadcast that wakes the streams of these accounts after `inbox_events` rows were committed. */
export const INBOX_EVENTS_WRITTEN = "inbox.eventsWritten";
export interface InboxEventsWritten {
  companyIds: string[];
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

/** One message whose status a tracking write changed (RCS or WhatsApp): account, channel, customerMessageId. */
export interface StatusChangeKey {
  c: string;
  ch: "RCS" | "WHATSAPP";
  id: string;
}

/**
 * `message.status` events for the inbox replies among changed messages, in the writer's transaction:
 * $1 is a JSON array of {@link StatusChangeKey}. A reply is the OUTBOUND `conversation_messages` row
 * of the same account and channel whose `message_id` is the message's customerMessageId (its unique
 * index); `data` carries the message's id as the thread answers it (its customerMessageId) and its
 * status as tracking now holds it. Answers the accounts that
 * got events (`company_id`), for the broadcast after the commit.
 */
export const MESSAGE_STATUS_EVENTS_SQL = `WITH k AS (
    SELECT DISTINCT k.c, k.ch, k.id FROM jsonb_to_recordset($1::jsonb) AS k(c text, ch text, id text) WHERE k.ch IN ('RCS', 'WHATSAPP')),
  hit AS MATERIALIZED (
    SELECT cm.company_id, cm.conversation_id, cm.message_id AS reply_id, m.status_code, m.read_at, m.delivery_date
      FROM k
      JOIN conversation_messages cm ON cm.company_id = k.c AND cm.channel = k.ch AND cm.direction = 'OUTBOUND' AND cm.message_id = k.id
      JOIN messages m ON m.company_id = k.c AND m.channel = k.ch AND m.customer_message_id = k.id),
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
