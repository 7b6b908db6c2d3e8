/** SQL of the live view: where a stream starts, pages of events, windows closed, retention. */
import type { Sequelize } from "sequelize";
import { rawQuery } from "../../lib/db";
import { appendInboxEvents, type InboxEvent } from "./inbox.events";
import type { EventsSinceOut, LiveEvent } from "./inbox.live.schemas";

/** Bytes of event data in one page: well under NATS's payload limit, whatever the texts. */
export const PAGE_BYTES = 256 * 1024;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Whether the conversation exists in the account (anything that is not a uuid does not). */
export async function conversationExists(sequelize: Sequelize, companyId: string, chatId: string): Promise<boolean> {
  if (!UUID.test(chatId)) return false;
  const rows = await rawQuery(sequelize, `SELECT 1 FROM conversations WHERE id = $1 AND company_id = $2`, [chatId, companyId]);
  return rows.length > 0;
}

/**
 * The account's newest event id (0 when none): where a stream without Last-Event-ID starts. Per
 * account, not of the whole table: ids of one account commit in order (inbox.contract.ts), those of
 * different accounts do not, so a later event of this account always has a higher id than this.
 */
export async function accountHead(sequelize: Sequelize, companyId: string): Promise<number> {
  const [row] = await rawQuery<{ head: string }>(sequelize, `SELECT coalesce(max(id), 0) AS head FROM inbox_events WHERE company_id = $1`, [companyId]);
  return Number(row!.head);
}

/**
 * The account's (or one conversation's) events after `after`, at most `limit` and about PAGE_BYTES
 * of data (at least one), in id order, with where the next read starts (see EventsSinceOut).
 */
export async function eventsSince(sequelize: Sequelize, companyId: string, o: { chatId?: string; after: number; limit: number }): Promise<EventsSinceOut> {
  const params: unknown[] = [companyId, o.after, o.limit];
  if (o.chatId) params.push(o.chatId);
  // The page and the account's newest id in one statement, so in one snapshot: an event committed
  // after the page was read is never counted as covered (a second statement could see it).
  const rows = await rawQuery<{ id: string | null; chat_id: string; type: string; data: string; bytes: string; covered: string }>(
    sequelize,
    `WITH head AS (SELECT coalesce(max(id), 0) AS covered FROM inbox_events WHERE company_id = $1),
          page AS (
            SELECT e.id, e.conversation_id AS chat_id, e.type, e.data, sum(octet_length(e.data)) OVER (ORDER BY e.id) AS bytes
              FROM (SELECT id, conversation_id, type, (jsonb_build_object('chatId', conversation_id) || data)::text AS data
                      FROM inbox_events
                     WHERE company_id = $1 AND id > $2 ${o.chatId ? "AND conversation_id = $4" : ""}
                     ORDER BY id LIMIT $3) e)
     SELECT head.covered, page.* FROM head LEFT JOIN page ON true ORDER BY page.id`,
    params,
  );
  const events: LiveEvent[] = [];
  let cut = false;
  let read = 0;
  for (const r of rows) {
    if (r.id === null) continue;
    read++;
    if (events.length > 0 && Number(r.bytes) > PAGE_BYTES) {
      cut = true;
      break;
    }
    events.push({ id: Number(r.id), chatId: r.chat_id, type: r.type, data: r.data });
  }
  const more = cut || read === o.limit;
  const last = events.at(-1)?.id ?? o.after;
  // Not `more`: the page holds every event of the account committed so far (ids of one account
  // commit in order, inbox.contract.ts), so the next read may start past the newest of them.
  const covered = Number(rows[0]?.covered ?? o.after);
  return { events, more, next: more ? last : Math.max(last, covered, o.after) };
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

/** Deletes events older than `hours`, `batch` rows a statement, at most `batches` statements; answers how many went. */
export async function purgeEvents(sequelize: Sequelize, hours: number, batch: number, batches: number): Promise<number> {
  let purged = 0;
  for (let i = 0; i < batches; i++) {
    const [row] = await rawQuery<{ n: number }>(
      sequelize,
      `WITH gone AS (
         DELETE FROM inbox_events WHERE id IN (
           SELECT id FROM inbox_events WHERE created_at < now() - make_interval(hours => $1) ORDER BY id LIMIT $2)
         RETURNING 1)
       SELECT count(*)::int AS n FROM gone`,
      [hours, batch],
    );
    purged += Number(row?.n ?? 0);
    if (Number(row?.n ?? 0) < batch) break;
  }
  return purged;
}
