/**
 * The sender's SQL (campaigns.sender.ts): the claim of a batch of recipients (lib/jobs/jobs.ts's
 * claim, the campaign's send slot read and moved in the same statement), what is left to send, the
 * auto-pause, the outcomes of a batch with the progress counters, and the end of a campaign. Each
 * one statement, on a connection of the pool (atomic by itself).
 */
import type { Sequelize } from "sequelize";
import { queryRows } from "../../lib/db/db";
import type { Channel } from "../../lib/messaging/channels";
import { claimSql, type JobTable } from "../../lib/jobs/jobs";
import { contactGoneSql, optedOutSql } from "./campaigns.contacts";
import type { RecipientRow } from "./campaigns.models";

/** The recipients as jobs: keyed by (campaign_id, contact_id), held by a batch's claim token. */
export const RECIPIENT_JOBS: JobTable = {
  table: "campaign_recipients",
  alias: "r",
  key: "contact_id",
  keyType: "uuid",
  group: { column: "campaign_id", type: "uuid" },
  owner: "owner",
  lease: { until: "leased_until" },
};

/**
 * The claim, one statement: the campaign row locked while it is SENDING (none: stop), its send slot
 * read; recipients due, free (no holder, or a holder whose lease ran out) and after the cursor taken
 * under the token; the slot moved on by what was taken. One row per recipient taken, or one row of
 * nulls with the slot when none was.
 * $1 campaign, $2 token, $3 lease (ms), $4 how many, [$5 due, $6 contact: the cursor].
 */
function claimStatement(cursor: boolean): string {
  const took = claimSql(RECIPIENT_JOBS, {
    as: "next",
    candidates: `SELECT r.campaign_id, r.contact_id, r.due_at AS was_due, r.due_at::text AS due_key FROM campaign_recipients r, k
      WHERE r.campaign_id = $1 AND r.status = 'PENDING' AND r.due_at <= now() AND (r.owner IS NULL OR r.leased_until < now())
        AND (k.rate IS NULL OR k.slot <= now())${cursor ? " AND (r.due_at, r.contact_id) > ($5::timestamptz, $6::uuid)" : ""}
      ORDER BY r.due_at, r.contact_id LIMIT $4 FOR UPDATE OF r SKIP LOCKED`,
    owner: "$2",
    leaseMs: "$3",
    returning: "r.contact_id, r.destination, r.vars, r.simulation, r.attempts, next.was_due, next.due_key",
  });
  return `WITH k AS (
      SELECT id, company_id, channel, send_rate_per_second AS rate, coalesce(rate_next_at, now()) AS slot FROM campaigns WHERE id = $1 AND status = 'SENDING' FOR UPDATE),
    took AS (${took}),
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
 * given: its due time as text, and contact id). No row: the campaign is no longer SENDING.
 */
export function claimRecipients(
  sequelize: Sequelize,
  c: { campaignId: string; token: string; leaseMs: number; size: number; cursor: { due: string; id: string } | null },
): Promise<ClaimedRecipient[]> {
  const params: unknown[] = [c.campaignId, c.token, c.leaseMs, c.size];
  return queryRows<ClaimedRecipient>(sequelize, c.cursor ? CLAIM_AFTER : CLAIM_FROM_START, c.cursor ? [...params, c.cursor.due, c.cursor.id] : params);
}

/**
 * The campaign's PENDING recipients: how many, and in how many ms the first of them can be claimed
 * (its due time, or the end of the lease of the batch holding it; null when there is none).
 */
export async function pendingLeft(sequelize: Sequelize, campaignId: string): Promise<{ n: number; wait_ms: number | null }> {
  const [left] = await queryRows<{ n: number; wait_ms: number | null }>(
    sequelize,
    `SELECT count(*)::int AS n,
              (EXTRACT(EPOCH FROM min(CASE WHEN owner IS NULL OR leased_until < now() THEN due_at ELSE greatest(due_at, leased_until) END) - now()) * 1000)::int AS wait_ms
         FROM campaign_recipients WHERE campaign_id = $1 AND status = 'PENDING'`,
    [campaignId],
  );
  return left!;
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
 * are written to campaign_contact_marks in the same statement. No status is named for the held rows:
 * they are reached by the primary key (see CampaignSend.record), their ids given as an array too
 * (`contact_id = ANY`, an index condition). Joined to the outcomes alone, the planner, which sees
 * every recipient's `owner` NULL and so estimates `owner = token` at one row, chose a scan of the
 * campaign's recipients (or of the table) for each batch: 136 ms a batch of 500 at 100,000
 * recipients in bench:campaign, a third of PostgreSQL's time. The confirm's ANALYZE after a large
 * snapshot (campaigns.queries.ts, refreshRecipientStats) is the other half (campaigns-sender-plans.spec).
 */
export const RECORD_OUTCOMES_SQL = `WITH x AS (SELECT * FROM jsonb_to_recordset($2::jsonb) AS x(id uuid, ok boolean, skip boolean, final boolean, wait float8, error text)),
       upd AS (
         UPDATE campaign_recipients r
            SET status = CASE WHEN x.ok THEN 'SENT' WHEN x.skip THEN 'SKIPPED' WHEN x.final OR r.attempts + 1 >= $8::int THEN 'FAILED' ELSE 'PENDING' END,
                attempts = r.attempts + CASE WHEN x.skip THEN 0 ELSE 1 END,
                sent_at = CASE WHEN x.ok THEN now() END,
                error = CASE WHEN x.ok THEN NULL ELSE x.error END,
                due_at = CASE WHEN x.ok THEN r.due_at ELSE now() + make_interval(secs => GREATEST($3::float8 * power(4, r.attempts), x.wait) / 1000) END,
                owner = NULL, leased_until = NULL
           FROM x WHERE r.company_id = $5 AND r.campaign_id = $1 AND r.contact_id = ANY ($7::uuid[]) AND r.contact_id = x.id AND r.owner = $4
         RETURNING r.status, r.contact_id, r.simulation),
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
  o.results.map((r) => r.id),
  o.maxAttempts,
];

/** Runs RECORD_OUTCOMES_SQL for one batch. */
export async function recordOutcomes(sequelize: Sequelize, o: OutcomesIn): Promise<RecordedCounts> {
  const [row] = await queryRows<RecordedCounts>(sequelize, RECORD_OUTCOMES_SQL, outcomesParams(o));
  return row!;
}

/**
 * Ends a SENDING campaign none of whose recipients is PENDING: SENT, or FAILED when none could be
 * sent; one node's UPDATE wins. Undefined when it did not end here.
 */
export async function finishCampaign(sequelize: Sequelize, campaignId: string): Promise<{ status: string; sent: number; failed: number } | undefined> {
  const [row] = await queryRows<{ status: string; sent: number; failed: number }>(
    sequelize,
    `UPDATE campaigns SET status = CASE WHEN sent = 0 AND failed > 0 THEN 'FAILED' ELSE 'SENT' END, completed_at = now(), updated_at = now()
        WHERE id = $1 AND status = 'SENDING' AND NOT EXISTS (SELECT 1 FROM campaign_recipients WHERE campaign_id = $1 AND status = 'PENDING')
       RETURNING status, sent, failed`,
    [campaignId],
  );
  return row;
}
