/**
 * The inbox follows tracking's inbound feed (migration 0032, tracking.contract.ts): the internal
 * ingress stores each inbound message there, in the transaction its 202 waits for, and calls nothing
 * of the inbox's. The inbox stores the messages as `inbox.ingest` does (conversations found, created
 * or reopened, each messageId once, INBOUND webhook events, live-view events), with its cursor, in
 * one transaction of its own.
 *
 * - **No message missed.** A round reads past the cursor, in `(tx, id)` order, only rows whose
 *   transaction ended before the oldest one still running began: every row up to the last one read
 *   had committed by then, so the batch read first (outside the transaction) is exactly what the
 *   transaction then writes, and the cursor moves with the writes. A round that fails writes nothing
 *   and moves nothing; messages are stored once however often they are read.
 * - **Consent first.** Tracking's ingress hands a request's opt-out keywords to contacts before it
 *   stores the request in the feed (contacts.keywords.ts): the inbox never waits for contacts.
 * - **One follower at a time.** Every inbox node follows: on tracking's broadcast
 *   (`tracking.inboundWritten`), every INBOUND_POLL_MS, again at once after a full batch. The write
 *   locks the cursor row with SKIP LOCKED, and writes nothing when a peer has it or moved it since
 *   the read.
 * - **A message that cannot be stored** (the database refuses it: a SQLSTATE outside the classes of
 *   a connection or a server in trouble) fails its round; the follower then reads half as
 *   many rows a round, down to the one refused, which is skipped (the cursor moves past it), logged
 *   with its account and messageId and counted (`inbox_inbound_refused_total`), so one bad row never
 *   holds the feed up. A row the inbox's own checks refuse (the ingress checked it already) is
 *   skipped and logged likewise.
 */
import type { Service, ServiceBroker } from "moleculer";
import { QueryTypes, type Sequelize } from "sequelize";
import { FeedLoop, type FollowStep } from "../../lib/jobs/follow";
import { INBOUND_FEED_VIEW, type InboundFeedRow } from "../tracking/tracking.contract";
import { announceInboxEvents } from "./inbox.events";
import { badItems, writeGroup, type GroupHooks } from "./inbox.ingest";
import { isInfrastructureError } from "../../lib/db/group-commit";
import { sqlstateOf } from "../../lib/jobs/jobs";
import type { InboxMetrics } from "./inbox.metrics";
import { INBOX_CHANNELS, type InboundMessageIn, type IngestIn } from "./inbox.schemas";

/** Rows of the feed read per round; a full round is followed by another at once. */
export const INBOUND_BATCH = 500;
/** The safety net for a lost broadcast. */
export const INBOUND_POLL_MS = 1000;

/** $1 the feed, $2 the batch: the cursor, the rows past it of ended transactions, and whether committed rows wait behind a running one. */
const READ_SQL = `WITH c AS (SELECT tx, id FROM inbox_feed_cursors WHERE feed = $1),
  f AS (
    SELECT f.company_id, f.tx::text AS tx, f.id, f.channel, f.message_id, f.source, f.destination,
           f.received_date, f.message_type, f.text, f.media_key
      FROM ${INBOUND_FEED_VIEW} f, c
     WHERE (f.tx, f.id) > (c.tx, c.id) AND f.tx < pg_snapshot_xmin(pg_current_snapshot())
     ORDER BY f.tx, f.id LIMIT $2)
  SELECT (SELECT tx::text FROM c) AS ctx, (SELECT id FROM c) AS cid,
         COALESCE((SELECT json_agg(f ORDER BY f.tx::xid8, f.id) FROM f), '[]'::json) AS rows,
         EXISTS (SELECT 1 FROM ${INBOUND_FEED_VIEW} h WHERE h.tx >= pg_snapshot_xmin(pg_current_snapshot())) AS held`;

export interface InboundRound {
  /** A peer holds the cursor or moved it since the read: this round wrote nothing. */
  busy: boolean;
  /** The database refused the batch (of more than one row): read fewer rows a round. */
  refused?: boolean;
  read: number;
  /** Messages new to the inbox. */
  created: number;
  held: boolean;
}

export interface InboundDeps {
  sequelize: Sequelize;
  broker: ServiceBroker;
  metrics: InboxMetrics;
  logger: Service["logger"];
}

const toItem = (r: InboundFeedRow): InboundMessageIn => ({
  companyId: r.company_id,
  messageId: r.message_id,
  source: r.source,
  destination: r.destination,
  receivedDate: r.received_date,
  messageType: r.message_type,
  ...(r.text !== null ? { text: r.text } : {}),
  ...(r.media_key !== null ? { mediaKey: r.media_key } : {}),
});

/** A refusal that comes again however often the round is tried: a SQLSTATE outside the classes of a connection or a server in trouble. */
function refused(err: unknown): boolean {
  return sqlstateOf(err) !== undefined && !isInfrastructureError(err);
}

/** One round of following the inbound feed. */
export async function followInbound(d: InboundDeps, batch = INBOUND_BATCH): Promise<InboundRound> {
  const [read] = await d.sequelize.query<{ ctx: string | null; cid: string | null; rows: InboundFeedRow[]; held: boolean }>(READ_SQL, {
    bind: [INBOUND_FEED_VIEW, batch],
    type: QueryTypes.SELECT,
  });
  if (!read || read.ctx === null) throw new Error(`no cursor of ${INBOUND_FEED_VIEW} in inbox_feed_cursors (migration 0032)`);
  const rows = read.rows;
  if (rows.length === 0) return { busy: false, read: 0, created: 0, held: read.held };
  const last = rows[rows.length - 1]!;
  const cursorHooks: GroupHooks = {
    async before(transaction) {
      const [cursor] = await d.sequelize.query<{ tx: string; id: string }>(
        `SELECT tx::text AS tx, id FROM inbox_feed_cursors WHERE feed = $1 FOR UPDATE SKIP LOCKED`,
        {
          bind: [INBOUND_FEED_VIEW],
          type: QueryTypes.SELECT,
          transaction,
        },
      );
      return cursor !== undefined && cursor.tx === read.ctx && String(cursor.id) === String(read.cid);
    },
    async after(transaction) {
      await d.sequelize.query(`UPDATE inbox_feed_cursors SET tx = $2::xid8, id = $3 WHERE feed = $1`, {
        bind: [INBOUND_FEED_VIEW, last.tx, last.id],
        transaction,
      });
    },
  };
  const calls: IngestIn[] = [];
  let out: Awaited<ReturnType<typeof writeGroup>>;
  try {
    for (const channel of INBOX_CHANNELS) {
      const items = rows.filter((r) => r.channel === channel).map(toItem);
      const good = items.filter((it) => badItems([it]).length === 0);
      if (good.length < items.length) d.logger.warn({ skipped: items.length - good.length, channel }, "inbound feed rows the inbox refuses were skipped");
      if (good.length === 0) continue;
      calls.push({ channel, items: good });
    }
    out = await writeGroup(d.sequelize, calls, cursorHooks);
  } catch (err) {
    if (!refused(err)) throw err;
    if (rows.length > 1) return { busy: false, refused: true, read: 0, created: 0, held: read.held };
    // The one row the database refuses: skipped, the cursor moved past it.
    d.logger.error(
      { err, companyId: last.company_id, channel: last.channel, messageId: last.message_id },
      "an inbound message the database refuses was skipped",
    );
    out = await writeGroup(d.sequelize, [], cursorHooks);
    if (out) d.metrics.refused(last.channel);
    return { busy: !out, read: 1, created: 0, held: read.held };
  }
  if (!out) return { busy: true, read: rows.length, created: 0, held: read.held };
  announceInboxEvents(d.broker, out.live);
  calls.forEach((c, i) => d.metrics.stored(c.channel, out.created[i]!));
  return { busy: false, read: rows.length, created: out.created.reduce((a, b) => a + b, 0), held: read.held };
}

/** An inbox node's follower of the inbound feed (lib/jobs/follow.ts: wakes, the poll, rechecks). */
export function inboundFollower(d: InboundDeps, batch = INBOUND_BATCH): FeedLoop {
  // Rows a round: halved while the database refuses a batch, back to `batch` after a round it takes.
  let limit = batch;
  return new FeedLoop("tracking's inbound feed", d.logger, async (): Promise<FollowStep> => {
    const r = await followInbound(d, limit);
    if (r.refused) {
      limit = Math.max(1, Math.ceil(limit / 2));
      return { waiting: false, more: true };
    }
    const full = r.read >= limit;
    if (!r.busy) limit = batch;
    return { waiting: r.busy || r.held, more: !r.busy && full };
  });
}
