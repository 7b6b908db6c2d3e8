/**
 * The inbox follows tracking's inbound feed (migration 0032, tracking.contract.ts): the internal
 * ingress stores each inbound message there, in the transaction its 202 waits for, and calls nothing
 * of the inbox's. The inbox stores the messages as `inbox.ingest` does (conversations found, created
 * or reopened, each messageId once, INBOUND webhook events, live-view events), with its cursor, in
 * one transaction of its own.
 *
 * - **No message missed, none waits.** A round reads the committed rows past the cursor, in
 *   `(tx, id)` order, and stores them all at once; the cursor moves, in the same transaction, only past
 *   the rows whose transaction ended before the oldest one still running began (a row that commits
 *   later has a `tx` at or above that bound, so the cursor never passes it). Rows stored ahead of the
 *   cursor are remembered by the node (StoredAhead) and skipped when read again; another node that
 *   reads them stores them again, which changes nothing (a messageId is stored once, and only a
 *   message new to the inbox makes events). Reading only behind the bound instead made every message
 *   wait for the transactions running beside its own: bench:inbox's message.created p50 went from 4
 *   to 35-55 ms. A round that fails writes nothing and moves nothing.
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
import { heldBackSql } from "../../lib/db/feeds";
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

/**
 * $1 the feed, $2 the batch: the cursor, the committed rows past it (`safe`: its transaction ended
 * before the oldest one still running began, so no row can commit before it any more), and whether
 * committed rows wait behind a running transaction.
 */
const READ_SQL = `WITH c AS (SELECT tx, id FROM inbox_feed_cursors WHERE feed = $1),
  f AS (
    SELECT f.company_id, f.tx::text AS tx, f.id, f.channel, f.message_id, f.source, f.destination,
           f.received_date, f.message_type, f.text, f.media_key, f.tx < pg_snapshot_xmin(pg_current_snapshot()) AS safe
      FROM ${INBOUND_FEED_VIEW} f, c
     WHERE (f.tx, f.id) > (c.tx, c.id)
     ORDER BY f.tx, f.id LIMIT $2)
  SELECT (SELECT tx::text FROM c) AS ctx, (SELECT id FROM c) AS cid,
         COALESCE((SELECT json_agg(f ORDER BY f.tx::xid8, f.id) FROM f), '[]'::json) AS rows,
         ${heldBackSql(INBOUND_FEED_VIEW)} AS held`;

export interface InboundRound {
  /** A peer holds the cursor or moved it since the read: this round wrote nothing. */
  busy: boolean;
  /** The database refused the batch (of more than one row): read fewer rows a round. */
  refused?: boolean;
  /** Rows read (stored now, or ahead already). */
  read: number;
  /** Something was stored or the cursor moved. */
  progressed: boolean;
  /** Messages new to the inbox. */
  created: number;
  held: boolean;
}

type FeedRow = InboundFeedRow & { safe: boolean };

/** A feed position, comparable: `(tx, id)`. */
const after = (a: { tx: string; id: string | number }, b: { tx: string; id: string | number }) => {
  const [ta, tb] = [BigInt(a.tx), BigInt(b.tx)];
  return ta !== tb ? ta > tb : BigInt(a.id) > BigInt(b.id);
};

/**
 * Rows this node stored ahead of the cursor (their transaction ended, but an older one still ran, so
 * the cursor could not pass them yet): skipped when read again, forgotten once the cursor passes
 * them. Lost with the node: another node stores them again, which changes nothing (a messageId is
 * stored once; only a message new to the inbox makes events).
 */
export class StoredAhead {
  private readonly rows = new Map<string, { tx: string; id: string }>();
  has(r: { id: string | number }): boolean {
    return this.rows.has(String(r.id));
  }
  add(r: { tx: string; id: string | number }): void {
    this.rows.set(String(r.id), { tx: r.tx, id: String(r.id) });
  }
  /** Forgets the rows at or before `cursor`. */
  passed(cursor: { tx: string; id: string | number }): void {
    for (const [k, r] of this.rows) if (!after(r, cursor)) this.rows.delete(k);
  }
  get size(): number {
    return this.rows.size;
  }
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
export async function followInbound(d: InboundDeps, batch = INBOUND_BATCH, ahead = new StoredAhead()): Promise<InboundRound> {
  const [read] = await d.sequelize.query<{ ctx: string | null; cid: string | null; rows: FeedRow[]; held: boolean }>(READ_SQL, {
    bind: [INBOUND_FEED_VIEW, batch],
    type: QueryTypes.SELECT,
  });
  if (!read || read.ctx === null) throw new Error(`no cursor of ${INBOUND_FEED_VIEW} in inbox_feed_cursors (migration 0032)`);
  // Every committed row past the cursor is stored now (a message waits for no older transaction);
  // the cursor moves only past the safe ones (a prefix, in (tx, id) order).
  const rows = read.rows.filter((r) => !ahead.has(r));
  const safe = read.rows.filter((r) => r.safe);
  const last = safe[safe.length - 1];
  if (rows.length === 0 && !last) return { busy: false, read: read.rows.length, created: 0, held: read.held, progressed: false };
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
      if (!last) return;
      await d.sequelize.query(`UPDATE inbox_feed_cursors SET tx = $2::xid8, id = $3 WHERE feed = $1`, {
        bind: [INBOUND_FEED_VIEW, last.tx, last.id],
        transaction,
      });
    },
  };
  const calls: IngestIn[] = [];
  let out: Awaited<ReturnType<typeof writeGroup>>;
  const started = process.hrtime.bigint();
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
    if (!refused(err) || rows.length === 0) throw err;
    if (rows.length > 1) return { busy: false, refused: true, read: 0, created: 0, held: read.held, progressed: false };
    // The one row the database refuses: skipped (the cursor moves past it when it is safe).
    const bad = rows[0]!;
    d.logger.error({ err, companyId: bad.company_id, channel: bad.channel, messageId: bad.message_id }, "an inbound message the database refuses was skipped");
    out = await writeGroup(d.sequelize, [], cursorHooks);
    if (!out) return { busy: true, read: read.rows.length, created: 0, held: read.held, progressed: false };
    d.metrics.refused(bad.channel);
    ahead.add(bad);
    if (last) ahead.passed(last);
    return { busy: false, read: read.rows.length, created: 0, held: read.held, progressed: true };
  }
  if (!out) return { busy: true, read: read.rows.length, created: 0, held: read.held, progressed: false };
  for (const r of rows) if (!r.safe) ahead.add(r);
  if (last) ahead.passed(last);
  d.metrics.transaction(rows.length, Number(process.hrtime.bigint() - started) / 1e9);
  announceInboxEvents(d.broker, out.live);
  calls.forEach((c, i) => d.metrics.stored(c.channel, out.created[i]!));
  return { busy: false, read: read.rows.length, created: out.created.reduce((a, b) => a + b, 0), held: read.held, progressed: true };
}

/** An inbox node's follower of the inbound feed (lib/jobs/follow.ts: wakes, the poll, rechecks). */
export function inboundFollower(d: InboundDeps, batch = INBOUND_BATCH): FeedLoop {
  // Rows a round: halved while the database refuses a batch, back to `batch` after a round it takes.
  let limit = batch;
  const ahead = new StoredAhead();
  return new FeedLoop("tracking's inbound feed", d.logger, async (): Promise<FollowStep> => {
    const r = await followInbound(d, limit, ahead);
    if (r.refused) {
      limit = Math.max(1, Math.ceil(limit / 2));
      return { waiting: false, more: true };
    }
    const full = r.read >= limit;
    if (!r.busy) limit = batch;
    // A full batch of rows stored ahead already, behind a running transaction: wait, do not spin.
    return { waiting: r.busy || r.held, more: r.progressed && full, progress: r.progressed };
  });
}
