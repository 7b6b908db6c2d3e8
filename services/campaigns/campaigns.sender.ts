/**
 * One campaign being sent on this node: CAMPAIGN_CONCURRENCY workers, each claiming a batch of the
 * campaign's PENDING recipients (lib/jobs.ts: FOR UPDATE SKIP LOCKED, a claim token of its own and
 * a lease), rendering it, handing it to the upstream adapter and recording every recipient's outcome
 * and the progress counters in one statement guarded by the token. Other campaigns nodes run the
 * same workers on the same campaign: a claim never takes a recipient another batch holds.
 *
 * - Claims of this node are made one at a time (a chain), each after the last one's cursor (due
 *   time, contact), so the PENDING index is not walked again over recipients already recorded; once
 *   nothing is after the cursor, one claim from the start (retries, recipients given back).
 * - A claim is made only while the campaign is SENDING; the campaign row is locked FOR UPDATE by the
 *   claim, so a pause (or cancel) that has answered is never followed by a claim, while batches in
 *   flight finish and record their outcomes.
 * - sendRatePerSecond: the claim also reads and moves the campaign's next send slot
 *   (`rate_next_at`): a batch (at most one second's worth, `rate` recipients) is claimed only once
 *   the slot has come, and moves it n / rate seconds on. The cap holds across every node because the
 *   slot is a row, moved in the statement that claims.
 * - When more than half of the node's last PAUSE_WINDOW attempts failed at the upstream, the
 *   campaign pauses itself with a pauseReason.
 * - The contacts a batch reached are written, in its outcome statement, to campaign_contact_marks:
 *   the runner hands them to contacts.markContacted, again until it answers.
 * - Consent at the last moment (contract section 7): the claim itself says, for each recipient it
 *   takes, whether its number has opted out of the channel or its contact was deleted since the
 *   confirm (two primary-key probes a recipient inside the claim statement: no extra round trip);
 *   such a recipient is not sent and ends SKIPPED, counted in the campaign's `skipped`.
 */
import { randomUUID } from "node:crypto";
import type { Sequelize } from "sequelize";
import type { Config } from "../../lib/config";
import { rawQuery } from "../../lib/db";
import { claimSql, type JobTable } from "../../lib/jobs";
import type { OutboundMessage, Upstream } from "../../lib/upstream";
import type { CampaignMetrics } from "./campaigns.metrics";
import { contactGoneSql, optedOutSql } from "../contacts/contacts.contract";
import { customerMessageIdOf, type CampaignRow, type RecipientRow } from "./campaigns.models";
import { fits, MAX_TEXT, parseText, render, type Parsed } from "./campaigns.text";

export const MAX_ATTEMPTS = 3;
/**
 * A failed message waits RETRY_BASE_MS, then 4x that, before its next attempt (longer when a 429's
 * Retry-After asks; a permanent failure, a 4xx other than 408 and 429, is not tried again).
 */
export const RETRY_BASE_MS = 2000;
/** The batch window of the auto-pause: the last attempts judged together (at most this many). */
export const PAUSE_WINDOW = 100;

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

type Claimed = RecipientRow & { was_due: Date; due_key: string; slot_wait_ms: number; skip: boolean };

/** What a claim gave: recipients, nothing (yet), or the campaign is no longer SENDING. */
type Claim = { kind: "batch"; token: string; rows: Claimed[] } | { kind: "none"; slotWaitMs: number } | { kind: "off" };

export interface SenderDeps {
  config: Config;
  sequelize: Sequelize;
  nodeId: string;
  upstream: Upstream;
  metrics: CampaignMetrics;
  log: { info(o: object, m: string): void; warn(o: object, m: string): void };
  /** Contacts to mark contacted were recorded (campaign_contact_marks): mark them now. */
  marked(): void;
  /** The campaign became final here (its media references can go). */
  ended(): void;
}

/**
 * The longest a send of a campaign in progress waits before it looks again (a failed claim, the
 * recipients left all held or not yet due): CAMPAIGN_POLL_MS when lower. The idle poll for new
 * campaigns is slower; a send in progress is not idle.
 */
const SEND_WAIT_MAX_MS = 1000;

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
  });

export class CampaignSend {
  /** The batches in flight: claim token -> contact ids and when their lease was last set (for the heartbeat and the give-back). */
  readonly batches = new Map<string, { ids: string[]; leasedAt: number }>();
  private readonly parsed: Parsed;
  private readonly rate: number | null;
  private readonly size: number;
  private readonly windowSize: number;
  private readonly window: boolean[] = [];
  private readonly abort = new AbortController();
  private cursor: { due: string; id: string } | null = null;
  private claims: Promise<unknown> = Promise.resolve();
  private claiming = true;
  /** Resolves once every worker has ended (its batch recorded). */
  readonly done: Promise<void>;

  constructor(
    readonly c: CampaignRow,
    private readonly d: SenderDeps,
  ) {
    this.parsed = parseText(c.text);
    this.rate = c.send_rate_per_second ? Number(c.send_rate_per_second) : null;
    this.size = Math.min(d.config.campaignBatchSize, this.rate ?? Infinity);
    // Judged once it holds as many as it can (a small campaign fills it with its whole audience).
    this.windowSize = Math.max(1, Math.min(PAUSE_WINDOW, d.config.campaignBatchSize, Number(c.audience) || 1));
    this.done = Promise.all(Array.from({ length: d.config.campaignConcurrency }, () => this.worker())).then(() => undefined);
  }

  /** No claim after this; batches in flight finish and record (sleeping workers wake and end). */
  stopClaiming(): void {
    this.claiming = false;
    this.abort.abort();
  }

  private async worker(): Promise<void> {
    while (this.claiming) {
      let got: Claim;
      try {
        got = await this.claim();
      } catch (err) {
        this.d.log.warn({ err, campaignId: this.c.id }, "campaign claim failed");
        await sleep(Math.min(this.d.config.campaignPollMs, SEND_WAIT_MAX_MS), this.abort.signal);
        continue;
      }
      if (got.kind === "off") break;
      if (got.kind === "none") {
        const wait = got.slotWaitMs > 0 ? got.slotWaitMs : await this.idle();
        if (wait === null) break;
        await sleep(Math.max(wait, 5), this.abort.signal);
        continue;
      }
      this.batches.set(got.token, { ids: got.rows.map((r) => r.contact_id), leasedAt: Date.now() });
      try {
        await this.send(got.token, got.rows);
      } catch (err) {
        // Its recipients stay held until their lease runs out; then any node claims them again.
        this.d.log.warn({ err, campaignId: this.c.id }, "campaign batch failed; its recipients are claimed again after their lease");
      } finally {
        this.batches.delete(got.token);
      }
    }
    // Off, ended or paused: the other workers end too (after their batch).
    this.stopClaiming();
  }

  /** One claim at a time on this node, each after the cursor the last one left. */
  private claim(): Promise<Claim> {
    const run = this.claims.then(() => this.claimNow());
    this.claims = run.catch(() => undefined);
    return run;
  }

  private async claimNow(): Promise<Claim> {
    if (!this.claiming) return { kind: "off" };
    const token = `${this.d.nodeId}/${randomUUID()}`;
    const params: unknown[] = [this.c.id, token, this.d.config.campaignLeaseMs, this.size];
    const from = this.cursor;
    const rows = await rawQuery<Claimed>(this.d.sequelize, from ? CLAIM_AFTER : CLAIM_FROM_START, from ? [...params, from.due, from.id] : params);
    if (rows.length === 0) return { kind: "off" };
    const taken = rows.filter((r) => r.contact_id !== null);
    if (taken.length === 0) {
      const slotWaitMs = Number(rows[0]!.slot_wait_ms);
      if (from && !(slotWaitMs > 0)) {
        this.cursor = null;
        return this.claimNow();
      }
      return { kind: "none", slotWaitMs: this.rate ? slotWaitMs : 0 };
    }
    // RETURNING comes in no particular order: the cursor is the greatest (due, contact) taken.
    let last = taken[0]!;
    for (const r of taken) if (r.due_key > last.due_key || (r.due_key === last.due_key && r.contact_id > last.contact_id)) last = r;
    this.cursor = { due: last.due_key, id: last.contact_id };
    return { kind: "batch", token, rows: taken };
  }

  /**
   * Nothing to claim now: ends the campaign when no recipient is PENDING (null), else answers how
   * long to wait (a retry not yet due, recipients other batches hold).
   */
  private async idle(): Promise<number | null> {
    const [left] = await rawQuery<{ n: number; wait_ms: number | null }>(
      this.d.sequelize,
      `SELECT count(*)::int AS n,
              (EXTRACT(EPOCH FROM min(CASE WHEN owner IS NULL OR leased_until < now() THEN due_at ELSE greatest(due_at, leased_until) END) - now()) * 1000)::int AS wait_ms
         FROM campaign_recipients WHERE campaign_id = $1 AND status = 'PENDING'`,
      [this.c.id],
    );
    if (Number(left!.n) === 0) {
      await this.finish();
      return null;
    }
    return Math.min(Math.max(Number(left!.wait_ms ?? 0), 10), this.d.config.campaignPollMs, SEND_WAIT_MAX_MS, this.d.config.campaignLeaseMs / 3);
  }

  private async send(token: string, rows: Claimed[]): Promise<void> {
    const { c } = this;
    const started = Date.now();
    const max = MAX_TEXT[c.channel];
    // Opted out, or deleted since the confirm: not sent, SKIPPED.
    const skipped = new Set(rows.filter((r) => r.skip).map((r) => r.contact_id));
    const all: OutboundMessage[] = rows.map((r) => ({
      companyId: c.company_id,
      channel: c.channel,
      customerMessageId: customerMessageIdOf(c.id, r.contact_id),
      destination: r.destination,
      text: render(this.parsed, r.vars, max),
      ...(c.media_ids.length ? { mediaIds: c.media_ids } : {}),
      campaignId: c.id,
      ...(r.simulation ? { simulation: true } : {}),
    }));
    // A text its placeholder values push past the channel's maximum is never cut nor sent: FAILED at once.
    const tooLong = new Map(
      all
        .filter((m) => !fits(m.text, max))
        .map((m) => [
          m.customerMessageId,
          `The rendered text has more than ${max} characters, the maximum on ${c.channel} (placeholder values too long); not sent, never cut.`,
        ]),
    );
    const messages = tooLong.size || skipped.size ? all.filter((m, i) => !tooLong.has(m.customerMessageId) && !skipped.has(rows[i]!.contact_id)) : all;
    const outcome = messages.length ? await this.d.upstream.send(messages) : { failed: [] };
    const failedIds = new Map(outcome.failed.map((f) => [f.customerMessageId, f]));
    const results = rows.map((r, i) => {
      const key = all[i]!.customerMessageId;
      const f = failedIds.get(key);
      if (skipped.has(r.contact_id)) return { id: r.contact_id, ok: false, skip: true, final: true, wait: 0, upstream: false, error: null };
      if (tooLong.has(key)) return { id: r.contact_id, ok: false, skip: false, final: true, wait: 0, upstream: false, error: tooLong.get(key)! };
      return { id: r.contact_id, ok: !f, skip: false, final: f?.final ?? false, wait: f?.retryAfterMs ?? 0, upstream: true, error: f?.error ?? null };
    });
    const counts = await this.record(token, results);
    const { metrics } = this.d;
    metrics.counted(c.channel, "sent", counts.sent);
    metrics.counted(c.channel, "failed", counts.failed);
    metrics.counted(c.channel, "retried", counts.retried);
    metrics.counted(c.channel, "skipped", counts.skipped);
    metrics.lagged(
      c.channel,
      rows.filter((_, i) => results[i]!.ok).map((r) => (started - new Date(r.was_due).getTime()) / 1000),
    );
    metrics.batchTook(this.d.upstream.mode, (Date.now() - started) / 1000);
    if (counts.lost > 0)
      this.d.log.warn({ campaignId: c.id, lost: counts.lost }, "campaign batch outlived its lease: outcomes of recipients claimed again elsewhere not written");
    if (counts.marked) this.d.marked();
    this.window.push(...results.filter((r) => r.upstream).map((r) => r.ok));
    this.window.splice(0, Math.max(0, this.window.length - this.windowSize));
    const failures = this.window.filter((ok) => !ok).length;
    if (this.window.length >= this.windowSize && failures * 2 > this.window.length) {
      const reason = `Paused by itself: ${failures} of the last ${this.window.length} messages failed at the upstream (last: ${outcome.failed[outcome.failed.length - 1]?.error ?? "?"}). Resume with PUT /campaigns/{id}/resume.`;
      const paused = await rawQuery(
        this.d.sequelize,
        `UPDATE campaigns SET status = 'PAUSED', pause_reason = $2, updated_at = now() WHERE id = $1 AND status = 'SENDING' RETURNING id`,
        [c.id, reason.slice(0, 1000)],
      );
      this.window.length = 0;
      if (paused.length) this.d.log.warn({ campaignId: c.id, failed: failures }, "campaign paused: most of a batch window failed");
      this.stopClaiming();
    }
  }

  /**
   * Outcomes of one batch and the progress counters, one statement, for the recipients its token
   * still holds (a batch that outlived its lease, its recipients claimed by another, writes nothing
   * for them); the hold ends with the outcome. A held recipient is PENDING (only this statement
   * ends a hold with an outcome), so the statement names no status: the planner then reaches the
   * rows by the primary key, never through the PENDING index (a scan of every PENDING recipient of
   * the campaign per batch: seconds at 1,000,000, measured).
   */
  private async record(token: string, results: Array<{ id: string; ok: boolean; skip: boolean; final: boolean; wait: number; error: string | null }>) {
    const [row] = await rawQuery<{ sent: number; failed: number; skipped: number; retried: number; written: number; marked: number }>(
      this.d.sequelize,
      `WITH x AS (SELECT * FROM jsonb_to_recordset($2::jsonb) AS x(id uuid, ok boolean, skip boolean, final boolean, wait float8, error text)),
       upd AS (
         UPDATE campaign_recipients r
            SET status = CASE WHEN x.ok THEN 'SENT' WHEN x.skip THEN 'SKIPPED' WHEN x.final OR r.attempts + 1 >= ${MAX_ATTEMPTS} THEN 'FAILED' ELSE 'PENDING' END,
                attempts = r.attempts + CASE WHEN x.skip THEN 0 ELSE 1 END,
                sent_at = CASE WHEN x.ok THEN now() END,
                error = CASE WHEN x.ok THEN NULL ELSE x.error END,
                due_at = CASE WHEN x.ok THEN r.due_at ELSE now() + make_interval(secs => GREATEST($3::float8 * power(4, r.attempts), x.wait) / 1000) END,
                owner = NULL, leased_until = NULL
           FROM x WHERE r.campaign_id = $1 AND r.contact_id = x.id AND r.owner = $4
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
       SELECT sent, failed, skipped, retried, written, (SELECT count(*)::int FROM mark) AS marked FROM n`,
      [
        this.c.id,
        JSON.stringify(results.map(({ id, ok, skip, final, wait, error }) => ({ id, ok, skip, final, wait, error }))),
        RETRY_BASE_MS,
        token,
        this.c.company_id,
        this.c.channel,
      ],
    );
    return { ...row!, lost: results.length - Number(row!.written) };
  }

  /** Every recipient has its outcome: SENT (FAILED when none could be sent); one node's UPDATE wins. */
  private async finish(): Promise<void> {
    const [row] = await rawQuery<{ status: string; sent: number; failed: number }>(
      this.d.sequelize,
      `UPDATE campaigns SET status = CASE WHEN sent = 0 AND failed > 0 THEN 'FAILED' ELSE 'SENT' END, completed_at = now(), updated_at = now()
        WHERE id = $1 AND status = 'SENDING' AND NOT EXISTS (SELECT 1 FROM campaign_recipients WHERE campaign_id = $1 AND status = 'PENDING')
       RETURNING status, sent, failed`,
      [this.c.id],
    );
    if (row) {
      this.d.log.info({ campaignId: this.c.id, status: row.status, sent: row.sent, failed: row.failed }, "campaign ended");
      this.d.ended();
    }
  }
}
