/**
 * The inbox's SQL. Every query filters by the account. Writes run inside the caller's transaction
 * (`tx`), beside the inbox_events rows (and, for inbound messages, the outbox rows) they cause; the
 * inbox_events rows themselves are written by `insertInboxEvents` (inbox.events.ts). The live view's
 * reads are in inbox.live.queries.ts, the campaign statistics' `responded` in inbox.stats.ts.
 */
import { randomUUID } from "node:crypto";
import { QueryTypes, type Sequelize, type Transaction } from "sequelize";
import { queryPage, type Page } from "../../lib/http/paging";
import { drawEventIdsSql, eventIdSql } from "./inbox.events.queries";
import {
  CONVERSATION_COLUMNS,
  previewOf,
  SERVICE_WINDOW_MS,
  toConversationOut,
  toThreadMessageOut,
  type ConversationRow,
  type MessageRow,
} from "./inbox.models";
import type { ConversationOut, InboundMessageIn, InboxChannel, ListConversationsIn, ThreadIn, ThreadMessageOut } from "./inbox.schemas";

type Q = { sequelize: Sequelize; tx?: Transaction };
const select = <T extends object>({ sequelize, tx }: Q, sql: string, bind: unknown[]) =>
  sequelize.query<T>(sql, { bind, type: QueryTypes.SELECT, transaction: tx });

/** One conversation of the account, or null; `lock` takes its row for the rest of the transaction. */
export async function findConversation(q: Q, companyId: string, chatId: string, lock = false): Promise<ConversationRow | null> {
  const [row] = await select<ConversationRow>(
    q,
    `SELECT ${CONVERSATION_COLUMNS} FROM conversations c WHERE c.company_id = $1 AND c.id = $2${lock ? " FOR UPDATE" : ""}`,
    [companyId, chatId.toLowerCase()],
  );
  return row ?? null;
}

/** Whether the number opted out of the channel in the account (contract section 7; the view `contacts_opted_out` contacts publishes, migration 0029). */
export async function optedOut(q: Q, companyId: string, channel: InboxChannel, phone: string): Promise<boolean> {
  const [row] = await select<{ opted_out: boolean }>(
    q,
    `SELECT EXISTS (SELECT 1 FROM contacts_opted_out o WHERE o.company_id = $1 AND o.channel = $2 AND o.phone_number = $3) AS opted_out`,
    [companyId, channel, phone],
  );
  return row?.opted_out === true;
}

/** A page of the account's conversations, newest activity first (ties by id). */
export function conversationsPage(sequelize: Sequelize, companyId: string, p: ListConversationsIn): Promise<Page<ConversationOut>> {
  const where = ["c.company_id = :companyId"];
  if (p.status !== "ALL") where.push("c.status = :status");
  if (p.channel) where.push("c.channel = :channel");
  if (p.search) where.push("strpos(c.contact_number, :search) > 0");
  const order = p.sortOrder === "asc" ? "ASC" : "DESC";
  const now = Date.now();
  return queryPage<ConversationRow, ConversationOut>(sequelize, {
    select: `SELECT ${CONVERSATION_COLUMNS} FROM conversations c WHERE ${where.join(" AND ")}
              ORDER BY c.last_message_at ${order}, c.id ${order} LIMIT :limit OFFSET :offset`,
    count: `SELECT count(*) AS total FROM conversations c WHERE ${where.join(" AND ")}`,
    replacements: { companyId, status: p.status ?? "ACTIVE", channel: p.channel ?? null, search: p.search?.replace(/^\+/, "") ?? null },
    page: p.page,
    limit: p.limit,
    map: (row) => toConversationOut(row, now),
  });
}

/**
 * A page of one conversation's messages, oldest first. A reply's tracked status is tracking's to
 * tell: the caller asks `tracking.statusCodes` for the page's replies (inbox.conversations.ts).
 */
export function threadPage(sequelize: Sequelize, companyId: string, chatId: string, p: ThreadIn): Promise<Page<ThreadMessageOut>> {
  const order = p.sortOrder === "desc" ? "DESC" : "ASC";
  return queryPage<MessageRow, ThreadMessageOut>(sequelize, {
    select: `SELECT cm.id, cm.conversation_id, cm.direction, cm.message_id, cm.message_type, cm.text, cm.media_key, cm.created_at
               FROM conversation_messages cm
              WHERE cm.conversation_id = :chatId AND cm.company_id = :companyId
              ORDER BY cm.created_at ${order}, cm.seq ${order} LIMIT :limit OFFSET :offset`,
    count: `SELECT count(*) AS total FROM conversation_messages cm WHERE cm.conversation_id = :chatId AND cm.company_id = :companyId`,
    replacements: { companyId, chatId: chatId.toLowerCase() },
    page: p.page,
    limit: p.limit,
    map: toThreadMessageOut,
  });
}

/** Sets a conversation's status; the row as it is now, or null when it was already so (or is not the account's). */
export async function setStatus(q: Q, companyId: string, chatId: string, status: "ACTIVE" | "ARCHIVED"): Promise<ConversationRow | null> {
  const [row] = await select<ConversationRow>(
    q,
    `UPDATE conversations c SET status = $3, updated_at = now() WHERE c.company_id = $1 AND c.id = $2 AND c.status <> $3 RETURNING ${CONVERSATION_COLUMNS}`,
    [companyId, chatId.toLowerCase(), status],
  );
  return row ?? null;
}

/**
 * Marks read every inbound message up to `upTo` (a message of the conversation, in thread order):
 * `unreadCount` becomes the number of inbound messages after it, unless it is already lower. Read
 * marks only move forward: `unread_count` counts the inbound messages after the furthest mark (and
 * those that arrived since, even if dated before it), so an older mark, which counts more, changes
 * nothing, whatever order concurrent marks commit in (each holds the row from before it counts).
 * Null when the message is not in the conversation.
 */
export async function markRead(q: Q, companyId: string, chatId: string, upTo: string): Promise<ConversationRow | null> {
  // The row first, in a statement of its own: an inbound message being stored holds it until its
  // commit, and the count below (a new statement, so a new snapshot) then sees that message. Counted
  // in the same statement as the wait, it would miss the message and its unread increment be lost.
  if (!q.tx) throw new Error("markRead runs in a transaction");
  await select(q, `SELECT 1 FROM conversations WHERE company_id = $1 AND id = $2 FOR UPDATE`, [companyId, chatId.toLowerCase()]);
  const [row] = await select<ConversationRow>(
    q,
    `WITH mark AS (
       SELECT created_at, seq FROM conversation_messages WHERE conversation_id = $2 AND company_id = $1 AND message_id = $3
        ORDER BY created_at DESC, seq DESC LIMIT 1)
     UPDATE conversations c
        SET unread_count = least(c.unread_count, (SELECT count(*) FROM conversation_messages cm, mark
                             WHERE cm.conversation_id = c.id AND cm.direction = 'INBOUND' AND (cm.created_at, cm.seq) > (mark.created_at, mark.seq))),
            updated_at = now()
       FROM mark
      WHERE c.company_id = $1 AND c.id = $2
     RETURNING ${CONVERSATION_COLUMNS}`,
    [companyId, chatId.toLowerCase(), upTo],
  );
  return row ?? null;
}

/** Stores a reply (OUTBOUND) and makes it the conversation's latest message; answers both rows. */
export async function insertReply(
  q: Q,
  conv: ConversationRow,
  r: { messageId: string; messageType: string; text: string | null; mediaKey: string | null; holdsMedia: boolean },
): Promise<{ message: MessageRow; conversation: ConversationRow }> {
  const [message] = await select<MessageRow>(
    q,
    `INSERT INTO conversation_messages (id, company_id, conversation_id, channel, direction, message_id, message_type, text, media_key, created_at, media_released)
     VALUES ($1, $2, $3, $4, 'OUTBOUND', $5, $6, $7, $8, date_trunc('milliseconds', now()), $9)
     RETURNING id, conversation_id, direction, message_id, message_type, text, media_key, created_at`,
    [randomUUID(), conv.company_id, conv.id, conv.channel, r.messageId, r.messageType, r.text, r.mediaKey, !r.holdsMedia],
  );
  const [conversation] = await select<ConversationRow>(
    q,
    `UPDATE conversations c SET last_message_at = greatest(c.last_message_at, $3), last_message_preview = $4, updated_at = now()
      WHERE c.company_id = $1 AND c.id = $2 RETURNING ${CONVERSATION_COLUMNS}`,
    [conv.company_id, conv.id, message!.created_at, previewOf(r.text) ?? (r.mediaKey ? `[${r.messageType}]` : null)],
  );
  return { message: message!, conversation: conversation! };
}

export interface IngestedMessage {
  message: MessageRow;
  item: InboundMessageIn;
}

/**
 * Inbound messages of one channel, in the caller's transaction: each conversation found or
 * created, each message stored once (a repeated messageId changes nothing, from whatever number: a
 * conversation created for repeats only is removed again), then each touched
 * conversation reopened, its unread count raised and its latest message and window moved on.
 * Answers the messages stored now and the conversations they touched (with whether each was
 * archived before).
 */
export async function ingestInbound(
  q: Q,
  channel: InboxChannel,
  items: InboundMessageIn[],
): Promise<{ created: IngestedMessage[]; conversations: Array<ConversationRow & { was_archived: boolean }> }> {
  // A date ahead of our clock is taken as now: a conversation dated in the future would head the
  // list and keep its WhatsApp reply window open until then.
  const now = Date.now();
  const receivedAt = (it: InboundMessageIn) => new Date(Math.min(Date.parse(it.receivedDate), now)).toISOString();
  // Conversations, in key order (two concurrent batches lock them in the same order).
  const keys = new Map<string, { c: string; s: string; n: string; at: string }>();
  for (const it of items) {
    const k = `${it.companyId}\u0000${it.destination}\u0000${it.source}`;
    const at = receivedAt(it);
    const prev = keys.get(k);
    if (!prev || at < prev.at) keys.set(k, { c: it.companyId, s: it.destination, n: it.source, at });
  }
  const convRows = [...keys.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, v]) => ({ id: randomUUID(), ...v }));
  const opened = await select<{ id: string }>(
    q,
    `INSERT INTO conversations (id, company_id, channel, sender_id, contact_number, last_message_at)
     SELECT x.id, x.c, $2, x.s, x.n, x.at FROM jsonb_to_recordset($1::jsonb) AS x(id uuid, c text, s text, n text, at timestamptz)
     ON CONFLICT (company_id, channel, sender_id, contact_number) DO NOTHING
     RETURNING id`,
    [JSON.stringify(convRows), channel],
  );
  const convs = await select<ConversationRow>(
    q,
    `SELECT ${CONVERSATION_COLUMNS} FROM jsonb_to_recordset($1::jsonb) AS x(c text, s text, n text)
       JOIN conversations c ON c.company_id = x.c AND c.channel = $2 AND c.sender_id = x.s AND c.contact_number = x.n
      ORDER BY c.id FOR UPDATE OF c`,
    [JSON.stringify(convRows), channel],
  );
  const convOf = new Map(convs.map((c) => [`${c.company_id}\u0000${c.sender_id}\u0000${c.contact_number}`, c]));

  const msgRows = items.map((it, i) => ({
    i,
    id: randomUUID(),
    c: it.companyId,
    v: convOf.get(`${it.companyId}\u0000${it.destination}\u0000${it.source}`)!.id,
    m: it.messageId,
    ty: it.messageType,
    tx: it.text ?? null,
    mk: it.mediaKey ?? null,
    at: receivedAt(it),
  }));
  const inserted = await select<MessageRow & { i: number }>(
    q,
    `INSERT INTO conversation_messages (id, company_id, conversation_id, channel, direction, message_id, message_type, text, media_key, created_at)
     SELECT x.id, x.c, x.v, $2, 'INBOUND', x.m, x.ty, x.tx, x.mk, x.at
       FROM jsonb_to_recordset($1::jsonb) AS x(i int, id uuid, c text, v uuid, m text, ty text, tx text, mk text, at timestamptz)
      ORDER BY x.i
     ON CONFLICT (company_id, channel, direction, message_id) DO NOTHING
     RETURNING id, conversation_id, direction, message_id, message_type, text, media_key, created_at`,
    [JSON.stringify(msgRows), channel],
  );
  // Which item each stored row is: the first item with its (account, messageId) not seen before.
  const byKey = new Map<string, InboundMessageIn>();
  for (const it of items) if (!byKey.has(`${it.companyId}\u0000${it.messageId}`)) byKey.set(`${it.companyId}\u0000${it.messageId}`, it);
  const companyOfConv = new Map(convs.map((c) => [c.id, c.company_id]));
  const created = inserted.map((message) => ({ message, item: byKey.get(`${companyOfConv.get(message.conversation_id)}\u0000${message.message_id}`)! }));
  // A conversation opened here for nothing but repeats (a messageId already stored, sent again from
  // another number, say) goes again: a repeat changes nothing, and leaves no empty conversation.
  const holding = new Set(inserted.map((m) => m.conversation_id));
  const empty = opened.map((c) => c.id).filter((id) => !holding.has(id));
  if (empty.length > 0) await select(q, `DELETE FROM conversations WHERE id = ANY($1::uuid[]) RETURNING id`, [empty]);
  if (created.length === 0) return { created, conversations: [] };

  // Each touched conversation: reopened, unread raised, latest message and window moved on.
  const touched = new Map<string, { v: string; n: number; last: string; preview: string | null; kind: string }>();
  for (const { message } of created) {
    const at = new Date(message.created_at).toISOString();
    const t = touched.get(message.conversation_id);
    const preview = previewOf(message.text) ?? (message.media_key ? `[${message.message_type}]` : null);
    if (!t) touched.set(message.conversation_id, { v: message.conversation_id, n: 1, last: at, preview, kind: message.message_type });
    else {
      t.n++;
      if (at >= t.last) Object.assign(t, { last: at, preview });
    }
  }
  const conversations = await select<ConversationRow & { was_archived: boolean }>(
    q,
    `UPDATE conversations c
        SET unread_count = c.unread_count + x.n, status = 'ACTIVE',
            last_message_preview = CASE WHEN x.last >= c.last_message_at THEN x.preview ELSE c.last_message_preview END,
            last_message_at = greatest(c.last_message_at, x.last),
            last_inbound_at = greatest(c.last_inbound_at, x.last),
            -- A late message whose window had ended before it arrived never opened one: when the
            -- previous window's close was announced, this one counts as announced too (one
            -- conversation.windowClosed per window the partner could reply in).
            window_closed_for = CASE WHEN c.window_closed_for IS NOT DISTINCT FROM c.last_inbound_at
                                      AND greatest(c.last_inbound_at, x.last) <= now() - make_interval(secs => ${SERVICE_WINDOW_MS / 1000})
                                     THEN greatest(c.last_inbound_at, x.last) ELSE c.window_closed_for END,
            updated_at = now()
       FROM jsonb_to_recordset($1::jsonb) AS x(v uuid, n int, last timestamptz, preview text),
            LATERAL (SELECT status = 'ARCHIVED' AS was_archived FROM conversations o WHERE o.id = x.v) before
      WHERE c.id = x.v
     RETURNING ${CONVERSATION_COLUMNS}, before.was_archived`,
    [JSON.stringify([...touched.values()])],
  );
  return { created, conversations };
}

/** How long a reply holds its media at most when no final status comes (the upstream's retries are long over). */
export const REPLY_MEDIA_HOLD_DAYS = 10;

/**
 * Replies still holding their media, oldest first, after `after` (created_at, id) and at most
 * `limit`: the candidates whose tracked status the caller asks tracking for. `old` is true for those
 * older than {@link REPLY_MEDIA_HOLD_DAYS}, released whatever their status.
 */
export function heldReplies(
  sequelize: Sequelize,
  after: { at: string; id: string } | null,
  limit: number,
): Promise<Array<{ id: string; company_id: string; channel: "RCS" | "WHATSAPP"; message_id: string; at: string; old: boolean }>> {
  return sequelize.query(
    `SELECT cm.id, cm.company_id, cm.channel, cm.message_id, to_char(cm.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at,
            cm.created_at < now() - make_interval(days => ${REPLY_MEDIA_HOLD_DAYS}) AS old
       FROM conversation_messages cm
      WHERE NOT cm.media_released AND ($1::timestamptz IS NULL OR (cm.created_at, cm.id) > ($1::timestamptz, $2::uuid))
      ORDER BY cm.created_at, cm.id LIMIT $3`,
    { bind: [after?.at ?? null, after?.id ?? null, limit], type: QueryTypes.SELECT },
  );
}

/** The reply's media reference was dropped. */
export async function markReplyMediaReleased(sequelize: Sequelize, id: string): Promise<void> {
  await sequelize.query(`UPDATE conversation_messages SET media_released = true WHERE id = $1`, { bind: [id] });
}

// --- the live view's events (inbox.events.ts)

/** One `inbox_events` row as the insert reads it: its order `i` in the statement, account `c`, conversation `v`, type `t`, data `d`. */
export interface InboxEventRecord {
  i: number;
  c: string;
  v: string;
  t: string;
  d: Record<string, unknown>;
}

/** Writes the event rows in one statement inside `transaction`, their ids drawn from the accounts' counters in `i` order (inbox.contract.ts). */
export async function insertInboxEvents(sequelize: Sequelize, transaction: Transaction | null, rows: InboxEventRecord[]): Promise<void> {
  await sequelize.query(
    `WITH x AS MATERIALIZED (SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(i int, c text, v uuid, t text, d jsonb)),
          ${drawEventIdsSql("x", "c")}
     INSERT INTO inbox_events (company_id, id, conversation_id, type, data)
     SELECT x.c, ${eventIdSql("x.c", "x.i")}, x.v, x.t, x.d FROM x JOIN drawn d ON d.company_id = x.c ORDER BY x.i`,
    { bind: [JSON.stringify(rows)], type: QueryTypes.INSERT, transaction: transaction ?? undefined },
  );
}
