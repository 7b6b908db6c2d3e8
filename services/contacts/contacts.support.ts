/**
 * communicationSupported from delivery receipts (contract section 4): a number gains RCS or
 * WhatsApp once a message on that channel was DELIVERED to it, and loses it (and the campaign
 * audience skips it: `communication_refused`) after an UNSUPPORTED or DISABLED receipt.
 *
 * Contacts follows tracking's status feed for it (tracking.contract.ts, `message_status_changes`,
 * migration 0034), as the inbox follows it for its replies (inbox.feed.ts): what a receipt said of
 * the number (`reach`) was written in the transaction of the receipt, and contacts applies it in a
 * transaction of its own with its cursor (`contacts_feed_cursors`). So a change is applied exactly
 * once and in feed order, however the bus or a contacts node fared meanwhile; it was a best-effort
 * event after the commit before.
 *
 * - **No row missed.** A round reads past the cursor, in `(tx, id)` order, only rows whose
 *   transaction ended before the oldest one still running began; a row that commits later is read
 *   by a later round. A round that fails writes nothing and moves nothing.
 * - **One follower at a time.** Every contacts node follows (tracking's broadcast, a poll, again at
 *   once after a full batch: lib/jobs/follow.ts); a round locks the cursor row with SKIP LOCKED.
 * - **The last word per number wins**, in feed order; one statement per channel (a contact, one
 *   number, meets at most one change in each: contacts.channels.queries.ts).
 */
import { heldBackSql } from "../../lib/db/feeds";
import type { Sequelize } from "sequelize";
import { inTransaction, type Exec } from "../../lib/db/db";
import { STATUS_FEED_VIEW, type ChannelSupport } from "../tracking/tracking.contract";
import { applyChannelSupportChanges } from "./contacts.channels.queries";

/** A follower looks at least this often (the safety net for a lost broadcast or a row held back by a long transaction). */
export const SUPPORT_FEED_POLL_MS = 5000;
/** Rows of the feed read per round; a full round is followed by another at once. */
export const SUPPORT_FEED_BATCH = 2000;

/** Applies `changes` in order: the last word per (account, channel, number) wins. */
export async function applyChannelSupport(exec: Exec, changes: ChannelSupport[]): Promise<void> {
  const last = new Map<string, ChannelSupport>();
  for (const c of changes) last.set(`${c.companyId}\u0000${c.channel}\u0000${c.destination}`, c);
  for (const channel of ["RCS", "WHATSAPP"] as const) {
    const ofChannel = [...last.values()].filter((c) => c.channel === channel);
    if (ofChannel.length > 0) await applyChannelSupportChanges(exec, ofChannel);
  }
}

/**
 * One round's read ($1 cursor tx, $2 cursor id, $3 batch): the rows past the cursor of ended
 * transactions; answers the last row's position and, in feed order, the changes that say something
 * of a number (rows written before migration 0034 carry no `reach` and are passed over); `held`:
 * rows at or above the snapshot's xmin (all unread) wait behind a transaction still running.
 */
const ROUND_SQL = `WITH f AS MATERIALIZED (
    SELECT f.tx, f.id, f.company_id, f.channel, f.destination, f.reach
      FROM ${STATUS_FEED_VIEW} f
     WHERE (f.tx, f.id) > ($1::xid8, $2::bigint) AND f.tx < pg_snapshot_xmin(pg_current_snapshot())
     ORDER BY f.tx, f.id LIMIT $3)
  SELECT (SELECT count(*) FROM f)::int AS read,
         (SELECT tx::text FROM f ORDER BY tx DESC, id DESC LIMIT 1) AS tx,
         (SELECT id FROM f ORDER BY tx DESC, id DESC LIMIT 1) AS id,
         COALESCE((SELECT jsonb_agg(jsonb_build_object('companyId', company_id, 'channel', channel, 'destination', destination, 'supported', reach) ORDER BY tx, id)
                     FROM f WHERE reach IS NOT NULL AND destination IS NOT NULL), '[]'::jsonb) AS changes,
         ${heldBackSql(STATUS_FEED_VIEW)} AS held`;

export interface SupportRound {
  /** Another node holds the cursor: this round did nothing. */
  busy: boolean;
  /** Feed rows read (SUPPORT_FEED_BATCH: there may be more). */
  read: number;
  /** Changes of a number's channels among them (applied). */
  changes: number;
  /** Nothing was read, yet rows past the cursor wait behind a transaction still running. */
  held: boolean;
}

/** One round of following the status feed for the contacts' channels, in one transaction of its own. */
export function followChannelSupport(sequelize: Sequelize, batch = SUPPORT_FEED_BATCH): Promise<SupportRound> {
  return inTransaction(sequelize, async (exec) => {
    const [cursor] = await exec<{ tx: string; id: string }>(`SELECT tx::text AS tx, id FROM contacts_feed_cursors WHERE feed = $1 FOR UPDATE SKIP LOCKED`, [
      STATUS_FEED_VIEW,
    ]);
    if (!cursor) return { busy: true, read: 0, changes: 0, held: false };
    // A statement of its own, after the lock: its snapshot sees the cursor as the last round left it.
    const [row] = await exec<{ read: number; tx: string | null; id: string | null; changes: ChannelSupport[]; held: boolean }>(ROUND_SQL, [
      cursor.tx,
      cursor.id,
      batch,
    ]);
    // Nothing read: rows committed past the cursor may wait behind a transaction still running.
    if (!row || row.read === 0) return { busy: false, read: 0, changes: 0, held: row?.held === true };
    await applyChannelSupport(exec, row.changes);
    await exec(`UPDATE contacts_feed_cursors SET tx = $2::xid8, id = $3 WHERE feed = $1`, [STATUS_FEED_VIEW, row.tx, row.id]);
    return { busy: false, read: row.read, changes: row.changes.length, held: row.held };
  });
}
