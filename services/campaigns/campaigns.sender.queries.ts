/**
 * The sender's SQL (campaigns.sender.ts): the claim of a batch of recipients (one lease row in
 * `campaign_batches`, migration 0030, with the campaign's send slot read and moved), what is left to
 * send, the auto-pause, the outcomes of a batch with the progress counters, the heartbeat and the
 * give-back of a batch, and the end of a campaign.
 *
 * How a batch is held (range claims, issue 33 item 4): a claim takes the first recipients due in
 * the campaign's pending order `(due_at, contact_id)` that no lease covers, and writes one lease
 * row over the keys it took (`lo`..`hi`) with the batch's claim token; it writes nothing on the
 * recipients. Before, it wrote a token and a lease on each recipient, and each heartbeat and
 * give-back did again: one row per recipient each time.
 * - Claims of a campaign are serialized by its row, locked FOR UPDATE in a first statement of the
 *   claim's transaction; the second statement then reads the leases with a snapshot taken after
 *   the lock, so it sees every lease a claim before it wrote (one statement would read them with a
 *   snapshot taken before it waited).
 * - A lease whose time ran out is deleted by the next claim, which may take its recipients, unless
 *   its row is locked at that moment (SKIP LOCKED: its holder is writing the batch's outcomes, or
 *   renewing it); then its keys stay held.
 * - An outcome statement first locks its lease row. No lease row (a claim ended it, and may have
 *   taken the recipients): it writes nothing, as before when a recipient's token had changed. With
 *   the row locked no claim can end it; it is deleted with the outcomes.
 * - A recipient whose key lies in a lease's range but that its claim did not take (another lease
 *   held it then) waits for that lease to end too: a delay, never a second holder.
 */
import type { Sequelize } from "sequelize";
import { inTransaction, queryRows } from "../../lib/db/db";
import type { Channel } from "../../lib/messaging/channels";
import { contactGoneSql, optedOutSql } from "./campaigns.contacts";
import type { RecipientRow } from "./campaigns.models";

/**
 * The claim's second statement (the campaign row already locked, and SENDING): the campaign's send
 * slot read; leases run out and not locked by their holder ended; recipients due, covered by no
 * lease and after the cursor taken, in pending order, from the first such one up to the next lease
 * (so that leases never overlap: a lease's range holds exactly the recipients its batch took); one
 * lease row over them, its end counted from the clock (not from the transaction's start, which may
 * have waited for the campaign row); the slot moved on by what was taken. One row per recipient
 * taken, or one row of nulls with the slot when none was.
 * $1 campaign, $2 token, $3 lease (ms), $4 how many, [$5 due, $6 contact: the cursor].
 */
function claimStatement(cursor: boolean): string {
  // A recipient a claim may take: PENDING, due, covered by no lease (and after the cursor).
  const free = `r.campaign_id = $1 AND r.status = 'PENDING' AND r.due_at <= now() AND (k.rate IS NULL OR k.slot <= now())${cursor ? " AND (r.due_at, r.contact_id) > ($5::timestamptz, $6::uuid)" : ""}
         AND NOT EXISTS (SELECT 1 FROM held h WHERE (r.due_at, r.contact_id) >= (h.lo_due, h.lo_contact) AND (r.due_at, r.contact_id) <= (h.hi_due, h.hi_contact))`;
  return `WITH k AS (
      SELECT id, company_id, channel, send_rate_per_second AS rate, coalesce(rate_next_at, now()) AS slot FROM campaigns WHERE id = $1),
    expired AS (SELECT b.token FROM campaign_batches b WHERE b.campaign_id = $1 AND b.leased_until < now() FOR UPDATE SKIP LOCKED),
    ended AS (DELETE FROM campaign_batches b USING expired e WHERE b.campaign_id = $1 AND b.token = e.token),
    held AS (SELECT b.lo_due, b.lo_contact, b.hi_due, b.hi_contact FROM campaign_batches b WHERE b.campaign_id = $1 AND b.token NOT IN (SELECT token FROM expired)),
    first AS (SELECT r.due_at, r.contact_id FROM campaign_recipients r, k WHERE ${free} ORDER BY r.due_at, r.contact_id LIMIT 1),
    stop AS (
      SELECT h.lo_due, h.lo_contact FROM held h, first f WHERE (h.lo_due, h.lo_contact) > (f.due_at, f.contact_id) ORDER BY h.lo_due, h.lo_contact LIMIT 1),
    took AS (
      SELECT r.contact_id, r.destination, r.vars, r.simulation, r.attempts, r.due_at AS was_due, r.due_at::text AS due_key
        FROM campaign_recipients r, k
       WHERE ${free} AND NOT EXISTS (SELECT 1 FROM stop s WHERE (r.due_at, r.contact_id) >= (s.lo_due, s.lo_contact))
       ORDER BY r.due_at, r.contact_id LIMIT $4),
    lease AS (
      INSERT INTO campaign_batches (campaign_id, company_id, token, lo_due, lo_contact, hi_due, hi_contact, leased_until)
      SELECT $1, k.company_id, $2, lo.was_due, lo.contact_id, hi.was_due, hi.contact_id, clock_timestamp() + make_interval(secs => $3::float8 / 1000)
        FROM k, (SELECT was_due, contact_id FROM took ORDER BY was_due, contact_id LIMIT 1) lo,
             (SELECT was_due, contact_id FROM took ORDER BY was_due DESC, contact_id DESC LIMIT 1) hi),
    moved AS (
      UPDATE campaigns c SET rate_next_at = greatest(k.slot, now()) + make_interval(secs => (SELECT count(*) FROM took)::float8 / k.rate)
        FROM k WHERE c.id = k.id AND k.rate IS NOT NULL AND EXISTS (SELECT 1 FROM took))
    SELECT (EXTRACT(EPOCH FROM k.slot - now()) * 1000)::float8 AS slot_wait_ms, t.*,
           t.contact_id IS NOT NULL AND (${optedOutSql("k.company_id", "k.channel", "t.destination")} OR ${contactGoneSql("k.company_id", "t.contact_id")}) AS skip
      FROM k LEFT JOIN took t ON true`;
}
const CLAIM_FROM_START = claimStatement(false);
const CLAIM_AFTER = claimStatement(true);

/**
 * A row of the claim: a recipient taken (with when it was due, that time as text for the cursor,
 * and whether it is to be skipped: opted out, or its contact deleted), or, when none was taken, a row
 * of nulls but `slot_wait_ms`.
 */
export type ClaimedRecipient = RecipientRow & { was_due: Date; due_key: string; slot_wait_ms: number; skip: boolean };

/**
 * Claims up to `size` recipients of the campaign under `token` for `leaseMs` (after `cursor` when
 * given: its due time as text, and contact id), one transaction of two statements (see the top of
 * this file). No row: the campaign is no longer SENDING.
 */
export function claimRecipients(
  sequelize: Sequelize,
  c: { campaignId: string; token: string; leaseMs: number; size: number; cursor: { due: string; id: string } | null },
): Promise<ClaimedRecipient[]> {
  const params: unknown[] = [c.campaignId, c.token, c.leaseMs, c.size];
  return inTransaction(sequelize, async (exec) => {
    if (!c.cursor) {
      const sending = await exec(`SELECT 1 FROM campaigns WHERE id = $1 AND status = 'SENDING' FOR UPDATE`, [c.campaignId]);
      if (sending.length === 0) return [];
      return exec<ClaimedRecipient>(CLAIM_FROM_START, params);
    }
    // After the cursor, or after the last key leased (another node's batches ahead of this one's
    // cursor), whichever is later: a claim never walks the rows of batches in flight.
    const [after] = await exec<{ due: string; contact: string }>(
      `SELECT b.due::text AS due, b.contact::text AS contact
         FROM (SELECT id FROM campaigns WHERE id = $1 AND status = 'SENDING' FOR UPDATE) c,
              LATERAL (SELECT $2::timestamptz AS due, $3::uuid AS contact
                       UNION ALL
                       SELECT h.hi_due, h.hi_contact FROM campaign_batches h WHERE h.campaign_id = $1 AND h.leased_until >= now()
                       ORDER BY 1 DESC, 2 DESC LIMIT 1) b`,
      [c.campaignId, c.cursor.due, c.cursor.id],
    );
    if (!after) return [];
    return exec<ClaimedRecipient>(CLAIM_AFTER, [...params, after.due, after.contact]);
  });
}

/**
 * Whether the campaign has PENDING recipients (`n`: 1 or 0), and in how many ms the first of them
 * may be claimable: its due time when none is due yet, else the end of the first lease to end
 * (the due ones are held: the claim that came just before took nothing). Null when none is PENDING.
 * Two index probes and a look at the campaign's few leases: an idle worker asks about once a second.
 */
export async function pendingLeft(sequelize: Sequelize, campaignId: string): Promise<{ n: number; wait_ms: number | null }> {
  const [left] = await queryRows<{ n: number; wait_ms: number | null }>(
    sequelize,
    `SELECT (d.due IS NOT NULL)::int AS n,
            (EXTRACT(EPOCH FROM CASE WHEN d.due > now() THEN d.due
                                     ELSE coalesce((SELECT min(b.leased_until) FROM campaign_batches b WHERE b.campaign_id = $1), d.due) END - now()) * 1000)::int AS wait_ms
       FROM (SELECT min(due_at) AS due FROM campaign_recipients WHERE campaign_id = $1 AND status = 'PENDING') d`,
    [campaignId],
  );
  return left!;
}

/** Renews the lease of a batch its token still holds: false when it holds none any more (a claim ended it). */
export async function renewBatch(sequelize: Sequelize, campaignId: string, token: string, leaseMs: number): Promise<boolean> {
  const rows = await queryRows(
    sequelize,
    `UPDATE campaign_batches SET leased_until = now() + make_interval(secs => $3::float8 / 1000) WHERE campaign_id = $1 AND token = $2 RETURNING 1`,
    [campaignId, token, leaseMs],
  );
  return rows.length > 0;
}

/** Ends the lease of a batch at once, counting no attempt: any node claims its recipients again. */
export async function giveBackBatch(sequelize: Sequelize, campaignId: string, token: string): Promise<void> {
  await queryRows(sequelize, `DELETE FROM campaign_batches WHERE campaign_id = $1 AND token = $2`, [campaignId, token]);
}

/** The auto-pause: a SENDING campaign becomes PAUSED with `reason`; false when it was no longer SENDING. */
export async function pauseSending(sequelize: Sequelize, campaignId: string, reason: string): Promise<boolean> {
  const paused = await queryRows(
    sequelize,
    `UPDATE campaigns SET status = 'PAUSED', pause_reason = $2, updated_at = now() WHERE id = $1 AND status = 'SENDING' RETURNING id`,
    [campaignId, reason],
  );
  return paused.length > 0;
}

/** One recipient's outcome: sent (`ok`), skipped, or failed (`final`: not to be tried again; `wait`: ms asked before a retry). */
export interface RecipientOutcome {
  id: string;
  ok: boolean;
  skip: boolean;
  final: boolean;
  wait: number;
  error: string | null;
}

/** What one batch's outcome statement wrote: recipients by outcome, how many rows (`written`), and whether contacts were marked. */
export interface RecordedCounts {
  sent: number;
  failed: number;
  skipped: number;
  retried: number;
  written: number;
  marked: number;
}

/** The arguments of an outcome statement: the batch's token and outcomes, and the retry rule. */
export interface OutcomesIn {
  campaignId: string;
  companyId: string;
  channel: Channel;
  token: string;
  results: readonly RecipientOutcome[];
  retryBaseMs: number;
  maxAttempts: number;
}

/**
 * Outcomes of one batch and the progress counters, one statement, for the recipients `token` still
 * holds; a failed one is PENDING again, due after `retryBaseMs` x 4^attempts (or the `wait` asked,
 * when longer), until its `maxAttempts`-th attempt, then FAILED. The contacts reached (not simulated)
 * are written to campaign_contact_marks in the same statement, and the batch's lease row is deleted.
 * No status is named for the batch's rows: they are reached by the primary key (see
 * CampaignSend.record), provided the statistics know the campaign: the confirm's ANALYZE after a
 * large snapshot (campaigns.queries.ts, refreshRecipientStats). With statistics from before it, the
 * planner read every recipient of the campaign for each batch: 136 ms a batch of 500 at 100,000
 * recipients in bench:campaign, a third of PostgreSQL's time (campaigns-sender-plans.spec).
 */
export const RECORD_OUTCOMES_SQL = `WITH x AS (SELECT * FROM jsonb_to_recordset($2::jsonb) AS x(id uuid, ok boolean, skip boolean, final boolean, wait float8, error text)),
       upd AS (
         UPDATE campaign_recipients r
            SET status = CASE WHEN x.ok THEN 'SENT' WHEN x.skip THEN 'SKIPPED' WHEN x.final OR r.attempts + 1 >= $7::int THEN 'FAILED' ELSE 'PENDING' END,
                attempts = r.attempts + CASE WHEN x.skip THEN 0 ELSE 1 END,
                sent_at = CASE WHEN x.ok THEN now() END,
                error = CASE WHEN x.ok THEN NULL ELSE x.error END,
                due_at = CASE WHEN x.ok THEN r.due_at ELSE now() + make_interval(secs => GREATEST($3::float8 * power(4, r.attempts), x.wait) / 1000) END
           FROM x WHERE r.company_id = $5 AND r.campaign_id = $1 AND r.contact_id = x.id
         RETURNING r.status, r.contact_id, r.simulation),
       freed AS (DELETE FROM campaign_batches WHERE campaign_id = $1 AND token = $4),
       n AS (SELECT count(*) FILTER (WHERE status = 'SENT')::int AS sent, count(*) FILTER (WHERE status = 'FAILED')::int AS failed,
                    count(*) FILTER (WHERE status = 'SKIPPED')::int AS skipped,
                    count(*) FILTER (WHERE status = 'PENDING')::int AS retried, count(*)::int AS written FROM upd),
       bump AS (UPDATE campaigns k SET sent = k.sent + n.sent, failed = k.failed + n.failed, skipped = k.skipped + n.skipped, updated_at = now()
                  FROM n WHERE k.id = $1 AND (n.sent > 0 OR n.failed > 0 OR n.skipped > 0)),
       mark AS (
         INSERT INTO campaign_contact_marks (campaign_id, company_id, channel, contact_ids)
         SELECT $1, $5, $6, array_agg(contact_id) FROM upd WHERE status = 'SENT' AND NOT simulation HAVING count(*) > 0
         RETURNING 1)
       SELECT sent, failed, skipped, retried, written, (SELECT count(*)::int FROM mark) AS marked FROM n`;

/** RECORD_OUTCOMES_SQL's bind parameters. */
export const outcomesParams = (o: OutcomesIn): unknown[] => [
  o.campaignId,
  JSON.stringify(o.results.map(({ id, ok, skip, final, wait, error }) => ({ id, ok, skip, final, wait, error }))),
  o.retryBaseMs,
  o.token,
  o.companyId,
  o.channel,
  o.maxAttempts,
];

/** Nothing written: the batch's lease was ended by a claim (it outlived it). */
const NOTHING: RecordedCounts = { sent: 0, failed: 0, skipped: 0, retried: 0, written: 0, marked: 0 };

/** Runs RECORD_OUTCOMES_SQL for one batch, its lease row locked first (see the top of this file). */
export function recordOutcomes(sequelize: Sequelize, o: OutcomesIn): Promise<RecordedCounts> {
  return inTransaction(sequelize, async (exec) => {
    const held = await exec(`SELECT 1 FROM campaign_batches WHERE campaign_id = $1 AND token = $2 AND company_id = $3 FOR UPDATE`, [
      o.campaignId,
      o.token,
      o.companyId,
    ]);
    if (held.length === 0) return NOTHING;
    const [row] = await exec<RecordedCounts>(RECORD_OUTCOMES_SQL, outcomesParams(o));
    return row!;
  });
}

/**
 * Ends a SENDING campaign none of whose recipients is PENDING: SENT, or FAILED when none could be
 * sent, and deletes its leases left; one node's UPDATE wins. Undefined when it did not end here.
 */
export async function finishCampaign(sequelize: Sequelize, campaignId: string): Promise<{ status: string; sent: number; failed: number } | undefined> {
  const [row] = await queryRows<{ status: string; sent: number; failed: number }>(
    sequelize,
    `WITH f AS (
       UPDATE campaigns SET status = CASE WHEN sent = 0 AND failed > 0 THEN 'FAILED' ELSE 'SENT' END, completed_at = now(), updated_at = now()
        WHERE id = $1 AND status = 'SENDING' AND NOT EXISTS (SELECT 1 FROM campaign_recipients WHERE campaign_id = $1 AND status = 'PENDING')
       RETURNING status, sent, failed),
     -- Leases left by batches that outlived them (their recipients were recorded by others).
     d AS (DELETE FROM campaign_batches WHERE campaign_id = $1 AND EXISTS (SELECT 1 FROM f))
     SELECT * FROM f`,
    [campaignId],
  );
  return row;
}
