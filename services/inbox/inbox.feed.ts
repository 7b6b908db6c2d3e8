/**
 * The inbox follows tracking's status feed (tracking.contract.ts, `message_status_changes`, migration
 * 0027): a `message.status` event for each change of one of its replies, written by the inbox in its
 * own transaction, with its cursor (`inbox_feed_cursors`). Tracking writes nothing of the inbox's.
 *
 * - **No row missed.** A round reads past the cursor, in `(tx, id)` order, only rows whose transaction
 *   ended before the oldest one still running began (`tx < pg_snapshot_xmin(...)`). A row that
 *   commits later has a `tx` at or above that bound, so it is read by a later round, never stepped
 *   over. A round that fails writes nothing and moves nothing.
 * - **One follower at a time.** Every inbox node follows: on tracking's broadcast, every FEED_POLL_MS,
 *   and again at once after a full batch. A round locks the cursor row with SKIP LOCKED, so a node
 *   whose peer is mid-round does nothing.
 * - **Order.** An account's events are numbered in feed order (its counter, inbox.events.ts). Each
 *   change of a reply is its own event, as when tracking wrote them.
 * - **Latency.** The live view waits for the round after the commit: milliseconds, or as long as the
 *   longest write transaction running on the database at that moment (`docs/architecture.md`).
 */
import { heldBackSql } from "../../lib/db/feeds";
import type { Sequelize } from "sequelize";
import { inTransaction } from "../../lib/db/db";
import { DELIVERY_STATUSES } from "../../lib/messaging/channels";
import { STATUS_FEED_VIEW } from "../tracking/tracking.contract";
import { drawEventIdsSql, eventIdSql } from "./inbox.events.queries";

/**
 * A follower looks at least this often: the safety net for a lost broadcast, or a row held back by
 * a long transaction. A round every second instead took bench:inbox's INBOUND webhooks from a p50 of
 * 18-98 ms to 340-870 ms (at 500 inbound messages/s, three runs each). Why is not understood yet.
 */
export const FEED_POLL_MS = 5000;
/** Rows of the feed read per round; a full round is followed by another at once. */
export const FEED_BATCH = 2000;

const STATUS_NAME = `CASE f.status_code ${DELIVERY_STATUSES.map((s) => `WHEN ${s.code} THEN '${s.name}'`).join(" ")} ELSE 'UNKNOWN' END`;

/**
 * One round's statement ($1 cursor tx, $2 cursor id, $3 batch): the feed rows past the cursor of ended
 * transactions, the events of the inbox's replies among them (an OUTBOUND `conversation_messages` row of
 * the same account and channel whose `message_id` is the customerMessageId), the cursor moved to the
 * last row read. Answers how many rows were read and the accounts that got events.
 */
const ROUND_SQL = `WITH f AS MATERIALIZED (
    SELECT f.company_id, f.tx, f.id, f.channel, f.customer_message_id, f.status_code, f.delivery_date, f.read_at
      FROM ${STATUS_FEED_VIEW} f
     WHERE (f.tx, f.id) > ($1::xid8, $2::bigint) AND f.tx < pg_snapshot_xmin(pg_current_snapshot())
     ORDER BY f.tx, f.id LIMIT $3),
  last AS (SELECT tx, id FROM f ORDER BY tx DESC, id DESC LIMIT 1),
  moved AS (UPDATE inbox_feed_cursors c SET tx = last.tx, id = last.id FROM last WHERE c.feed = '${STATUS_FEED_VIEW}' RETURNING 1),
  hit AS MATERIALIZED (
    SELECT cm.company_id, cm.conversation_id, cm.message_id AS reply_id, f.tx, f.id,
           jsonb_build_object('chatId', cm.conversation_id, 'id', cm.message_id, 'direction', 'OUTBOUND',
                              'deliveryStatus', ${STATUS_NAME}, 'statusCode', f.status_code,
                              'deliveryDate', f.delivery_date, 'readAt', f.read_at) AS data
      FROM f
      JOIN conversation_messages cm ON cm.company_id = f.company_id AND cm.channel = f.channel AND cm.direction = 'OUTBOUND' AND cm.message_id = f.customer_message_id),
  ${drawEventIdsSql("hit", "company_id")},
  ins AS (
    INSERT INTO inbox_events (company_id, id, conversation_id, type, data)
    SELECT hit.company_id, ${eventIdSql("hit.company_id", "hit.tx, hit.id")}, hit.conversation_id, 'message.status', hit.data
      FROM hit JOIN drawn d ON d.company_id = hit.company_id
     ORDER BY hit.company_id, hit.tx, hit.id
    RETURNING company_id)
  SELECT (SELECT count(*) FROM f)::int AS read, ARRAY(SELECT DISTINCT company_id FROM ins) AS companies,
         ${heldBackSql(STATUS_FEED_VIEW)} AS held`;

export interface FeedRound {
  /** Another node holds the cursor: this round did nothing. */
  busy: boolean;
  /** Feed rows read (FEED_BATCH: there may be more). */
  read: number;
  /** Accounts that got events (their streams are woken after the commit). */
  companies: string[];
  /** Committed rows wait behind a transaction still running (its rows at or above the snapshot's xmin are all unread): look again soon. */
  held: boolean;
}

/** One round of following the status feed, in one transaction of its own. */
export function followStatusFeed(sequelize: Sequelize, batch = FEED_BATCH): Promise<FeedRound> {
  return inTransaction(sequelize, async (exec) => {
    const [cursor] = await exec<{ tx: string; id: string }>(`SELECT tx::text AS tx, id FROM inbox_feed_cursors WHERE feed = $1 FOR UPDATE SKIP LOCKED`, [
      STATUS_FEED_VIEW,
    ]);
    if (!cursor) return { busy: true, read: 0, companies: [], held: false };
    // A statement of its own, after the lock: its snapshot sees the cursor as the last round left it.
    const [row] = await exec<{ read: number; companies: string[]; held: boolean }>(ROUND_SQL, [cursor.tx, cursor.id, batch]);
    return { busy: false, read: row!.read, companies: row!.companies, held: row!.held };
  });
}
