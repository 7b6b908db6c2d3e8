/** SQL of the live view: where a stream starts, pages of events, windows closed, retention. */
import type { Sequelize } from "sequelize";
import { queryRows } from "../../lib/db/db";
import { dropDaysBefore } from "../../lib/db/partitions";
import { dayReadBy } from "../../lib/db/feeds";
import { FEED_POSITIONS_VIEW } from "../notifier/notifier.contract";
import { INBOUND_EVENTS_VIEW } from "./inbox.contract";
import { INBOX_EVENTS_HORIZON_SQL } from "./inbox.events.queries";
import { appendInboxEvents, type InboxEvent } from "./inbox.events";
import type { EventsSinceOut, LiveEvent } from "./inbox.live.schemas";

/** Bytes of event data in one page: well under NATS's payload limit, whatever the texts. */
export const PAGE_BYTES = 256 * 1024;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Whether the conversation exists in the account (anything that is not a uuid does not). */
export async function conversationExists(sequelize: Sequelize, companyId: string, chatId: string): Promise<boolean> {
  if (!UUID.test(chatId)) return false;
  const rows = await queryRows(sequelize, `SELECT 1 FROM conversations WHERE id = $1 AND company_id = $2`, [chatId, companyId]);
  return rows.length > 0;
}

/**
 * Where the account's events end now (inbox.contract.ts): the last id it drew; every event of the
 * account up to it is committed, and any later one will have a higher id. A stream without
 * Last-Event-ID starts here. Never waits for the account's writers.
 */
export async function accountHorizon(sequelize: Sequelize, companyId: string): Promise<number> {
  const [row] = await queryRows<{ horizon: string }>(sequelize, INBOX_EVENTS_HORIZON_SQL, [companyId]);
  return Number(row!.horizon);
}

/**
 * The account's (or one conversation's) events after `after` and up to its horizon, at most `limit`
 * and about PAGE_BYTES of data (at least one), in id order, with where the next read starts (see
 * EventsSinceOut). One statement, so one snapshot: the horizon it reads and every event up to it.
 */
export async function eventsSince(
  sequelize: Sequelize,
  companyId: string,
  o: { chatId?: string; after: number; limit: number; keptHours: number },
): Promise<EventsSinceOut> {
  const params: unknown[] = [companyId, o.after, o.limit, o.keptHours];
  if (o.chatId) params.push(o.chatId);
  const rows = await queryRows<{ horizon: string; id: string | null; chat_id: string; type: string; data: string; bytes: string }>(
    sequelize,
    `WITH h AS (${INBOX_EVENTS_HORIZON_SQL})
     SELECT h.horizon, e.id, e.chat_id, e.type, e.data, e.bytes FROM h LEFT JOIN LATERAL (
       SELECT e.id, e.conversation_id AS chat_id, e.type, e.data, sum(octet_length(e.data)) OVER (ORDER BY e.id) AS bytes
         FROM (SELECT id, conversation_id, type, (jsonb_build_object('chatId', conversation_id) || data)::text AS data
                 FROM inbox_events
                WHERE company_id = $1 AND id > $2 AND id <= h.horizon AND created_at >= now() - make_interval(hours => $4) ${o.chatId ? "AND conversation_id = $5" : ""}
                ORDER BY id LIMIT $3) e) e ON true
      ORDER BY e.id`,
    params,
  );
  const horizon = Number(rows[0]?.horizon ?? 0);
  if (horizon <= o.after) return { events: [], more: false, next: o.after };
  const found = rows.filter((r) => r.id !== null);
  const events: LiveEvent[] = [];
  let cut = false;
  for (const r of found) {
    if (events.length > 0 && Number(r.bytes) > PAGE_BYTES) {
      cut = true;
      break;
    }
    events.push({ id: Number(r.id), chatId: r.chat_id, type: r.type, data: r.data });
  }
  const more = cut || found.length === o.limit;
  const last = events.at(-1)?.id ?? o.after;
  // Not `more`: the page holds every event of the account up to the horizon.
  return { events, more, next: more ? last : Math.max(last, horizon) };
}

/** Conversations whose WhatsApp service window (24 h after the last inbound message) has closed. */
export const WINDOW_HOURS = 24;

/**
 * Writes one `conversation.windowClosed` event for each WhatsApp conversation whose window closed
 * and has no such event for its current last inbound message, at most `batch` of them, in one
 * transaction (rows locked FOR UPDATE SKIP LOCKED: several inbox nodes never write one twice).
 * Answers the events written.
 */
export async function closeWindows(sequelize: Sequelize, batch: number): Promise<InboxEvent[]> {
  const t = await sequelize.transaction();
  try {
    const [rows] = (await sequelize.query(
      `WITH due AS (
         SELECT c.id FROM conversations c
          WHERE c.channel = 'WHATSAPP' AND c.last_inbound_at IS NOT NULL
            AND c.window_closed_for IS DISTINCT FROM c.last_inbound_at
            AND c.last_inbound_at < now() - make_interval(hours => ${WINDOW_HOURS})
          ORDER BY c.last_inbound_at
          LIMIT $1
          FOR UPDATE SKIP LOCKED)
       UPDATE conversations c SET window_closed_for = c.last_inbound_at
         FROM due WHERE c.id = due.id
       RETURNING c.id, c.company_id, c.status, c.last_inbound_at`,
      { bind: [batch], transaction: t },
    )) as unknown as [Array<{ id: string; company_id: string; status: string; last_inbound_at: Date }>];
    const events: InboxEvent[] = rows.map((r) => ({
      companyId: r.company_id,
      conversationId: r.id,
      type: "conversation.windowClosed",
      data: {
        chatId: r.id,
        status: r.status,
        canReply: false,
        serviceWindowExpiresAt: new Date(new Date(r.last_inbound_at).getTime() + WINDOW_HOURS * 3600_000).toISOString(),
      },
    }));
    await appendInboxEvents(sequelize, t, events);
    await t.commit();
    return events;
  } catch (err) {
    await t.rollback().catch(() => undefined);
    throw err;
  }
}

/**
 * Retention of the live-view events (migration 0025: daily partitions): the days wholly older than
 * `hours` are dropped; readers skip the older events of the day that remains (eventsSince). Answers
 * the days dropped.
 */
export function purgeEvents(sequelize: Sequelize, hours: number): Promise<string[]> {
  return dropDaysBefore(sequelize, "inbox_events", new Date(Date.now() - hours * 3600_000));
}

/** The inbox's webhook-event feed (migration 0031) keeps this many days, and a day the notifier has not read whole stays. */
export const EVENT_FEED_KEEP_DAYS = 2;

/** The days of the inbox's webhook-event feed past EVENT_FEED_KEEP_DAYS that the notifier has read whole, dropped. */
export function purgeEventFeed(sequelize: Sequelize): Promise<string[]> {
  return dropDaysBefore(sequelize, "inbound_event_feed", new Date(Date.now() - EVENT_FEED_KEEP_DAYS * 86_400_000), (day) =>
    dayReadBy(sequelize, day, FEED_POSITIONS_VIEW, INBOUND_EVENTS_VIEW),
  );
}
