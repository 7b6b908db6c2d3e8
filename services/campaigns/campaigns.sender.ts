/**
 * One campaign being sent on this node: CAMPAIGN_CONCURRENCY workers, each claiming a batch of the
 * campaign's PENDING recipients (a range of them under one lease row with a claim token of its own:
 * campaigns.sender.queries.ts), rendering it, handing it to the upstream adapter and recording every
 * recipient's outcome and the progress counters in one statement guarded by the lease. Other
 * campaigns nodes run the same workers on the same campaign: a claim never takes a recipient another
 * batch holds.
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
 *
 * Its statements are in campaigns.sender.queries.ts.
 */
import { randomUUID } from "node:crypto";
import type { Sequelize } from "sequelize";
import type { Config } from "../../lib/config";
import type { OutboundMessage, SendOutcome, Upstream } from "../../lib/http/upstream";
import type { CampaignMetrics } from "./campaigns.metrics";
import { customerMessageIdOf, type CampaignRow } from "./campaigns.models";
import {
  claimRecipients,
  finishCampaign,
  pauseSending,
  pendingLeft,
  recordOutcomes,
  type ClaimedRecipient,
  type RecipientOutcome,
} from "./campaigns.sender.queries";
import { fits, MAX_TEXT, parseText, render, type Parsed } from "./campaigns.text";
import type { Pacer } from "../../lib/jobs/pacer";

export const MAX_ATTEMPTS = 3;
/**
 * A failed message waits RETRY_BASE_MS, then 4x that, before its next attempt (longer when a 429's
 * Retry-After asks; a permanent failure, a 4xx other than 408 and 429, is not tried again).
 */
export const RETRY_BASE_MS = 2000;
/** The batch window of the auto-pause: the last attempts judged together (at most this many). */
export const PAUSE_WINDOW = 100;

/** What a claim gave: recipients, nothing (yet), or the campaign is no longer SENDING. */
type Claim = { kind: "batch"; token: string; rows: ClaimedRecipient[] } | { kind: "none"; slotWaitMs: number } | { kind: "off" };

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
  /** Ends a batch's lease at once, counting no attempt (any node claims its recipients again). */
  giveBack(token: string): Promise<unknown>;
  /** The node's rate for all its campaigns (CAMPAIGN_NODE_RATE), null: none. */
  pacer: Pacer | null;
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
    // A batch is at most one second's worth of the campaign's rate and of the node's.
    this.size = Math.min(d.config.campaignBatchSize, this.rate ?? Infinity, d.config.campaignNodeRate || Infinity);
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
    const run = this.claims.then(() => this.pacedClaim());
    this.claims = run.catch(() => undefined);
    return run;
  }

  /**
   * The node's rate (CAMPAIGN_NODE_RATE) is waited for before the claim, so that no lease is held
   * meanwhile, in the campaign's chain of claims (one wait per campaign at a time); what the claim
   * did not take is given back.
   */
  private async pacedClaim(): Promise<Claim> {
    const pacer = this.d.pacer;
    if (!pacer) return this.claimNow();
    if (!(await pacer.take(this.size, this.abort.signal))) return { kind: "off" };
    let used = 0;
    try {
      const got = await this.claimNow();
      if (got.kind === "batch") used = got.rows.length;
      return got;
    } finally {
      pacer.refund(this.size - used);
    }
  }

  private async claimNow(): Promise<Claim> {
    if (!this.claiming) return { kind: "off" };
    const token = `${this.d.nodeId}/${randomUUID()}`;
    const from = this.cursor;
    const rows = await claimRecipients(this.d.sequelize, {
      campaignId: this.c.id,
      token,
      leaseMs: this.d.config.campaignLeaseMs,
      size: this.size,
      cursor: from,
    });
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
    const left = await pendingLeft(this.d.sequelize, this.c.id);
    if (Number(left.n) === 0) {
      await this.finish();
      return null;
    }
    return Math.min(Math.max(Number(left.wait_ms ?? 0), 10), this.d.config.campaignPollMs, SEND_WAIT_MAX_MS, this.d.config.campaignLeaseMs / 3);
  }

  private async send(token: string, rows: ClaimedRecipient[]): Promise<void> {
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
    const outcome: SendOutcome = messages.length ? await this.d.upstream.send(messages) : { failed: [] };
    if (outcome.unavailable) {
      // No node serves the upstream adapter (a cluster starting, the simulator's node restarting): not
      // the upstream's verdict, so no attempt and no auto-pause. The batch is given back and claimed again.
      await this.d.giveBack(token);
      this.d.log.warn({ campaignId: c.id, recipients: rows.length }, "no node serves the upstream adapter now; the batch is given back and claimed again");
      await sleep(SEND_WAIT_MAX_MS, this.abort.signal);
      return;
    }
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
      const paused = await pauseSending(this.d.sequelize, c.id, reason.slice(0, 1000));
      this.window.length = 0;
      if (paused) this.d.log.warn({ campaignId: c.id, failed: failures }, "campaign paused: most of a batch window failed");
      this.stopClaiming();
    }
  }

  /**
   * Outcomes of one batch and the progress counters, one statement, while its lease row is still
   * its own (a batch that outlived its lease, ended by another node's claim, writes nothing); the
   * lease ends with the outcome. The rows are reached by the primary key, never through the PENDING
   * index (a scan of every PENDING recipient of the campaign per batch: seconds at 1,000,000,
   * measured).
   */
  private async record(token: string, results: RecipientOutcome[]) {
    const row = await recordOutcomes(this.d.sequelize, {
      campaignId: this.c.id,
      companyId: this.c.company_id,
      channel: this.c.channel,
      token,
      results,
      retryBaseMs: RETRY_BASE_MS,
      maxAttempts: MAX_ATTEMPTS,
    });
    return { ...row, lost: results.length - Number(row.written) };
  }

  /** Every recipient has its outcome: SENT (FAILED when none could be sent); one node's UPDATE wins. */
  private async finish(): Promise<void> {
    const row = await finishCampaign(this.d.sequelize, this.c.id);
    if (row) {
      this.d.log.info({ campaignId: this.c.id, status: row.status, sent: row.sent, failed: row.failed }, "campaign ended");
      this.d.ended();
    }
  }
}
