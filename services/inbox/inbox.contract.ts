/**
 * What other services may import from inbox: the read-side builder of the campaign statistics'
 * `responded` (campaigns' GET /campaigns/stats), so that "wrote back" is defined once, here, by the
 * owner of inbound messages; the body of `inbox.ingest` (the ingress and the simulator call it); and
 * the live view's event types, the broadcast that wakes the streams, what the gateway reads events
 * with, and the SQL that writes `message.status` events in tracking's own transaction.
 *
 * Order of `inbox_events` ids: an id is the SSE event id and streams read `id > Last-Event-ID`, so a
 * reader must never pass an id whose transaction has not ended yet. Every writer takes the account's
 * advisory lock in SHARED mode ({@link INBOX_EVENTS_LOCK}) right before its insert and holds it until
 * its commit (writers never wait for each other); a reader first passes a barrier, the same lock in
 * EXCLUSIVE mode for one statement, which waits for the account's writers in flight and reads the
 * id sequence: every id of the account up to that value has then been committed or rolled back, and
 * the reader reads no further. Write inbox events as the last statement of a transaction, so the lock
 * is held only for the commit.
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

/** The account's event lock key, as a SQL expression over the account id column or parameter `company`. */
export const INBOX_EVENTS_LOCK_KEY = (company: string) => `hashtext('pgw-inbox-events:' || ${company})`;

/** What every writer of `inbox_events` takes before its insert, until its commit: the account's lock, shared. */
export const INBOX_EVENTS_LOCK = (company: string) => `pg_advisory_xact_lock_shared(${INBOX_EVENTS_LOCK_KEY(company)})`;

/**
 * A CTE body taking the event locks of the accounts in `from` (a relation with a `company` column),
 * in account order; it yields one row, so joining it to the rows inserted makes every lock come
 * before the first id is drawn.
 */
export const lockAccountsSql = (from: string, company: string) =>
  `SELECT count(*) AS locks FROM (SELECT ${INBOX_EVENTS_LOCK("a.company")} FROM (SELECT DISTINCT ${company} AS company FROM ${from} ORDER BY 1) a) l`;

/**
 * The readers' barrier, one statement on its own ($1: the account): waits for the account's writers
 * in flight (the lock in exclusive mode, released when the statement ends) and answers `horizon`, the
 * last id drawn from the sequence: every event of the account with an id up to it is settled.
 */
export const INBOX_EVENTS_BARRIER_SQL = `SELECT (SELECT CASE WHEN q.is_called THEN q.last_value ELSE 0 END FROM inbox_events_id_seq q WHERE b.locked = b.locked) AS horizon
  FROM (SELECT pg_advisory_xact_lock(${INBOX_EVENTS_LOCK_KEY("$1::text")})::text AS locked OFFSET 0) b`;

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
  locked AS (${lockAccountsSql("hit", "company_id")}),
  ins AS (
    INSERT INTO inbox_events (company_id, conversation_id, type, data)
    SELECT hit.company_id, hit.conversation_id, 'message.status',
           jsonb_build_object('chatId', hit.conversation_id, 'id', hit.reply_id, 'direction', 'OUTBOUND',
                              'deliveryStatus', ${STATUS_NAME}, 'statusCode', hit.status_code,
                              'deliveryDate', hit.delivery_date, 'readAt', hit.read_at)
      FROM hit CROSS JOIN locked
     ORDER BY hit.company_id, hit.reply_id
    RETURNING company_id)
  SELECT DISTINCT company_id FROM ins`;
