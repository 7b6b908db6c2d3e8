/**
 * The notifier follows the webhook-event feeds of tracking and the inbox (migration 0031) into its own
 * schedule, `outbox_events`, which no other service writes (issue 33 item 1).
 *
 * - **No event missed.** A round reads past the feed's cursor (`notifier_feed_cursors`), in `(tx, id)`
 *   order, only rows whose transaction ended before the oldest one still running began
 *   (`tx < pg_snapshot_xmin(pg_current_snapshot())`), and copies them with the cursor moved, in one
 *   transaction: a row that commits later is read by a later round, a round that fails moves nothing.
 * - **One follower at a time.** Every notifier node follows, on the producers' broadcasts, every
 *   NOTIFIER_POLL_MS, and again at once after a full batch. A round locks the feed's cursor row with
 *   SKIP LOCKED, so a node whose peer is mid-round does nothing now and looks again soon
 *   (lib/jobs/follow.ts: the peer's snapshot may have been taken before the rows it was woken for).
 * - **Rows held back.** Committed rows behind a transaction still running are counted by the round;
 *   the follower looks again soon, not at the next poll.
 * - **Order.** Events are copied in feed order; the schedule's ids are the order of delivery per account.
 * - **RETRACT** (tracking's feed): the DELIVERY and READ events of that message written since the
 *   row's time are dropped from the schedule (or not copied, in the same round); one already being
 *   attempted may still go out, as when tracking deleted them itself.
 * - Events of an account whose webhook is gone meanwhile are not copied.
 */
import { heldBackSql } from "../../lib/db/feeds";
import type { Service } from "moleculer";
import type { Sequelize } from "sequelize";
import { inTransaction } from "../../lib/db/db";
import { FeedLoop } from "../../lib/jobs/follow";
import { INBOUND_EVENTS_VIEW } from "../inbox/inbox.contract";
import { MESSAGE_EVENTS_VIEW } from "../tracking/tracking.contract";

/** The feeds followed (views their owners publish), in this order each round. */
export const WEBHOOK_FEEDS = [MESSAGE_EVENTS_VIEW, INBOUND_EVENTS_VIEW] as const;
export type WebhookFeed = (typeof WEBHOOK_FEEDS)[number];
/** Rows read per round of a feed; a full round is followed by another at once. */
export const FOLLOW_BATCH = 2000;
/** Rounds of one feed in a row before the other feed's turn (a backlog of one never holds up the other for long). */
const ROUNDS_IN_A_ROW = 10;

/**
 * One round's statement ($1 cursor tx, $2 cursor id, $3 batch, $4 the feed). `retracts`: the feed may
 * hold RETRACT rows (tracking's). A RETRACT drops the events copied already; an event read after its
 * RETRACT (which can come first in feed order: the registration's transaction may have drawn its id
 * before the receipt's, then waited for its key) is not copied: it is looked up among every RETRACT
 * of the feed (a partial index). `held`: rows at or above the snapshot's xmin are all unread (the
 * cursor is always below it), so the probe starts there, not at the cursor.
 */
const round = (view: WebhookFeed, retracts: boolean) => `WITH f AS MATERIALIZED (
    SELECT f.company_id, f.tx, f.id, f.channel, f.event_type, f.message_id, f.num_part, f.payload, f.message_sent_at, f.created_at
      FROM ${view} f
     WHERE (f.tx, f.id) > ($1::xid8, $2::bigint) AND f.tx < pg_snapshot_xmin(pg_current_snapshot())
     ORDER BY f.tx, f.id LIMIT $3),
  last AS (SELECT tx, id FROM f ORDER BY tx DESC, id DESC LIMIT 1),
  moved AS (UPDATE notifier_feed_cursors c SET tx = last.tx, id = last.id FROM last WHERE c.feed = $4 RETURNING 1),
  ${
    retracts
      ? `r AS (SELECT company_id, channel, message_id, min(message_sent_at) AS since FROM f WHERE event_type = 'RETRACT' GROUP BY company_id, channel, message_id),
  gone AS (
    DELETE FROM outbox_events o USING r
     WHERE o.company_id = r.company_id AND o.channel = r.channel AND o.message_id = r.message_id
       AND o.event_type IN ('DELIVERY', 'READ') AND o.created_at >= r.since
    RETURNING 1),`
      : `gone AS (SELECT 1 WHERE false),`
  }
  ins AS (
    INSERT INTO outbox_events (company_id, channel, event_type, message_id, num_part, payload, message_sent_at, created_at)
    SELECT f.company_id, f.channel, f.event_type, f.message_id, f.num_part, f.payload, f.message_sent_at, f.created_at
      FROM f
     WHERE f.event_type <> 'RETRACT'
       AND EXISTS (SELECT 1 FROM webhooks w WHERE w.company_id = f.company_id)
       ${
         retracts
           ? `AND NOT (f.event_type IN ('DELIVERY', 'READ') AND EXISTS (
                 SELECT 1 FROM ${view} x WHERE x.event_type = 'RETRACT' AND x.company_id = f.company_id AND x.channel = f.channel
                    AND x.message_id = f.message_id AND f.created_at >= x.message_sent_at))`
           : ""
       }
     ORDER BY f.tx, f.id
    RETURNING 1)
  SELECT (SELECT count(*) FROM f)::int AS read, (SELECT count(*) FROM ins)::int AS written, (SELECT count(*) FROM gone)::int AS retracted,
         ${heldBackSql(view)} AS held`;
const ROUND_SQL: Record<WebhookFeed, string> = {
  [MESSAGE_EVENTS_VIEW]: round(MESSAGE_EVENTS_VIEW, true),
  [INBOUND_EVENTS_VIEW]: round(INBOUND_EVENTS_VIEW, false),
};

export interface FollowRound {
  /** Another node holds the cursor: this round did nothing. */
  busy: boolean;
  /** Feed rows read (FOLLOW_BATCH: there may be more). */
  read: number;
  /** Events copied into the schedule. */
  written: number;
  /** Events taken back out of the schedule (RETRACT). */
  retracted: number;
  /** Committed rows past the cursor wait behind a transaction still running. */
  held: boolean;
}

/** One round of following `feed`, in one transaction of its own. */
export function followFeed(sequelize: Sequelize, feed: WebhookFeed, batch = FOLLOW_BATCH): Promise<FollowRound> {
  return inTransaction(sequelize, async (exec) => {
    const [cursor] = await exec<{ tx: string; id: string }>(`SELECT tx::text AS tx, id FROM notifier_feed_cursors WHERE feed = $1 FOR UPDATE SKIP LOCKED`, [
      feed,
    ]);
    if (!cursor) return { busy: true, read: 0, written: 0, retracted: 0, held: false };
    // A statement of its own, after the lock: its snapshot sees the cursor as the last round left it.
    const [row] = await exec<Omit<FollowRound, "busy">>(ROUND_SQL[feed], [cursor.tx, cursor.id, batch, feed]);
    return { busy: false, ...row! };
  });
}

/** A notifier node's follower of both feeds (lib/jobs/follow.ts: wakes, the poll, rechecks); `onCopied`: events were copied into the schedule (or taken out), claim now. */
export function feedFollower(o: { sequelize: Sequelize; logger: Service["logger"]; onCopied: () => void; batch?: number }): FeedLoop {
  const batch = o.batch ?? FOLLOW_BATCH;
  return new FeedLoop("the webhook event feeds", o.logger, async () => {
    let more = false;
    let waiting = false;
    let progress = false;
    for (const feed of WEBHOOK_FEEDS) {
      for (let i = 0; i < ROUNDS_IN_A_ROW; i++) {
        const r = await followFeed(o.sequelize, feed, batch);
        if (r.written > 0 || r.retracted > 0) o.onCopied();
        if (r.busy || r.held) waiting = true;
        if (r.read > 0) progress = true;
        if (r.busy || r.read < batch) break;
        if (i === ROUNDS_IN_A_ROW - 1) more = true;
      }
    }
    return { waiting, more, progress };
  });
}
