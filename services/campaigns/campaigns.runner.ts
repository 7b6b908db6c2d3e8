/**
 * Sends campaigns on one campaigns node, on lib/jobs.ts. The campaign row is the job: a node claims
 * a campaign that is due (SCHEDULED past its scheduledAt, or SENDING with no live holder: its node
 * died or gave it back) and holds it by a lease it renews. Holding it, the node takes the
 * campaign's PENDING recipients in batches (due time, then contact), renders each text, hands the
 * batch to the upstream adapter and records every recipient's outcome and the progress counters in
 * one statement. A recipient's customerMessageId is derived from campaign and contact, so a batch
 * handed over again after a crash (its outcome never written) is a repeat the ingress ignores:
 * nobody gets a campaign twice. A failed message is tried again after a backoff and ends FAILED
 * after MAX_ATTEMPTS; a batch mostly failed pauses the campaign with a pauseReason.
 */
import type { Sequelize } from "sequelize";
import type { Config } from "../../lib/config";
import { Coalesced } from "../../lib/coalesce";
import { rawQuery } from "../../lib/db";
import { Jobs, Loops, type ClaimSpec, type JobTable } from "../../lib/jobs";
import type { OutboundMessage, Upstream } from "../../lib/upstream";
import type { CampaignMetrics } from "./campaigns.metrics";
import { CAMPAIGN_COLUMNS, customerMessageIdOf, type CampaignRow, type RecipientRow } from "./campaigns.models";
import { fits, MAX_TEXT, parseText, render } from "./campaigns.text";

export const MAX_ATTEMPTS = 3;
/**
 * A failed message waits RETRY_BASE_MS, then 4x that, before its next attempt (longer when a 429's
 * Retry-After asks; a permanent failure, a 4xx other than 408 and 429, is not tried again).
 */
export const RETRY_BASE_MS = 2000;
/** The batch window of the auto-pause: the last attempts judged together (at most this many). */
export const PAUSE_WINDOW = 100;
/** Campaigns one node sends at once. */
const MAX_ACTIVE = 4;

const CAMPAIGN_JOBS: JobTable = { table: "campaigns", alias: "c", key: "id", keyType: "uuid", owner: "node_id", lease: { until: "leased_until" } };

/** $1: this node, $2: the lease (ms). */
const CAMPAIGN_CLAIM: ClaimSpec = {
  candidates: {
    where: `c.status IN ('SCHEDULED', 'SENDING')
            AND ((c.status = 'SCHEDULED' AND c.scheduled_at <= now()) OR (c.status = 'SENDING' AND (c.leased_until IS NULL OR c.leased_until < now())))`,
    orderBy: "c.scheduled_at, c.id",
    limit: 1,
  },
  owner: "$1",
  leaseMs: "$2",
  set: "status = 'SENDING', updated_at = now()",
  returning: CAMPAIGN_COLUMNS.split(",")
    .map((col) => `c.${col.trim()}`)
    .join(", "),
};

type Log = { info(o: object, m: string): void; warn(o: object, m: string): void; error(o: object, m: string): void };

export interface RunnerHooks {
  /** contacts.markContacted for the account's contacts just sent a campaign message. */
  markContacted(companyId: string, contactIds: string[], channel: CampaignRow["channel"]): Promise<unknown>;
  /** A campaign became final (its media references can go). */
  ended(): void;
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
  });

export class CampaignRunner {
  private readonly jobs: Jobs;
  private readonly loops: Loops;
  private readonly active = new Map<string, AbortController>();
  private readonly claims = new Coalesced(
    () => this.claimAll(),
    (err) => this.log.warn({ err }, "campaign claim failed"),
  );
  private stopping = false;

  constructor(
    private readonly config: Config,
    private readonly sequelize: Sequelize,
    private readonly nodeId: string,
    private readonly upstream: Upstream,
    private readonly log: Log,
    private readonly metrics: CampaignMetrics,
    private readonly hooks: RunnerHooks,
  ) {
    this.jobs = new Jobs(sequelize, CAMPAIGN_JOBS, CAMPAIGN_CLAIM);
    this.loops = new Loops(log);
  }

  start(): void {
    this.loops.every(this.config.campaignPollMs, "campaign claim", () => this.kick(), { runNow: true });
    this.loops.every(Math.floor(this.config.campaignLeaseMs / 3), "campaign heartbeat", () => this.heartbeat());
  }

  /** Looks for campaigns due now (one was just confirmed or resumed here). */
  kick(): void {
    if (!this.stopping) this.claims.request();
  }

  private async claimAll(): Promise<void> {
    while (!this.stopping && this.active.size < MAX_ACTIVE) {
      const [c] = await this.jobs.claim<CampaignRow>([this.nodeId, this.config.campaignLeaseMs]);
      if (!c) return;
      const abort = new AbortController();
      this.active.get(c.id)?.abort();
      this.active.set(c.id, abort);
      this.log.info({ campaignId: c.id, audience: c.audience, sent: c.sent }, "campaign sending");
      this.send(c, abort.signal)
        .catch((err) => this.log.error({ err, campaignId: c.id }, "campaign send failed; another round takes it up after its lease"))
        .finally(() => {
          if (this.active.get(c.id)?.signal === abort.signal) this.active.delete(c.id);
          this.kick();
        });
    }
  }

  /** Renews this node's campaigns; one no longer held (paused, cancelled, taken over) stops. */
  private async heartbeat(): Promise<void> {
    if (this.active.size === 0) return;
    const ids = [...this.active.keys()];
    const held = new Set(
      (await this.jobs.renew({ ids, owner: this.nodeId }, { leaseMs: this.config.campaignLeaseMs, where: "c.status = 'SENDING'" })).map((r) => r.id),
    );
    for (const id of ids) if (!held.has(id)) this.active.get(id)?.abort();
  }

  private async stillHeld(id: string): Promise<boolean> {
    const rows = await this.jobs.renew({ ids: [id], owner: this.nodeId }, { leaseMs: this.config.campaignLeaseMs, where: "c.status = 'SENDING'" });
    return rows.length === 1;
  }

  private async send(c: CampaignRow, signal: AbortSignal): Promise<void> {
    const parsed = parseText(c.text);
    const max = MAX_TEXT[c.channel];
    const rate = c.send_rate_per_second ? Number(c.send_rate_per_second) : null;
    const size = Math.min(this.config.campaignBatchSize, rate ?? Infinity);
    // The window: the outcomes of the last attempts (at most PAUSE_WINDOW); judged once it holds as
    // many as it can (a small campaign fills it with its whole audience).
    const window: boolean[] = [];
    const windowSize = Math.max(1, Math.min(PAUSE_WINDOW, this.config.campaignBatchSize, Number(c.audience) || 1));
    // Where the last batch ended (due time, contact): the next one starts after it, so the scan of
    // the PENDING index never walks again over the entries of recipients already recorded (dead
    // until vacuumed); retries are due later, so they come after it. Once nothing is after it, one
    // scan from the start.
    let after: { due: string; id: string } | null = null;
    while (!signal.aborted && !this.stopping) {
      if (!(await this.stillHeld(c.id))) return;
      const rows: Array<RecipientRow & { due_at: Date; due_key: string }> = await rawQuery<RecipientRow & { due_at: Date; due_key: string }>(
        this.sequelize,
        `SELECT contact_id, destination, vars, simulation, attempts, due_at, due_at::text AS due_key FROM campaign_recipients
          WHERE campaign_id = $1 AND status = 'PENDING' AND due_at <= now()${after ? " AND (due_at, contact_id) > ($3::timestamptz, $4::uuid)" : ""}
          ORDER BY due_at, contact_id LIMIT $2`,
        after ? [c.id, size, after.due, after.id] : [c.id, size],
      );
      if (rows.length === 0 && after) {
        after = null;
        continue;
      }
      if (rows.length > 0) after = { due: rows[rows.length - 1]!.due_key, id: rows[rows.length - 1]!.contact_id };
      if (rows.length === 0) {
        const [left] = await rawQuery<{ n: number; wait_ms: number | null }>(
          this.sequelize,
          `SELECT count(*)::int AS n, (EXTRACT(EPOCH FROM min(due_at) - now()) * 1000)::int AS wait_ms FROM campaign_recipients WHERE campaign_id = $1 AND status = 'PENDING'`,
          [c.id],
        );
        if (Number(left!.n) === 0) return this.finish(c);
        await sleep(Math.min(Math.max(Number(left!.wait_ms ?? 0), 10), this.config.campaignLeaseMs / 3), signal);
        continue;
      }
      const started = Date.now();
      const all: OutboundMessage[] = rows.map((r) => ({
        companyId: c.company_id,
        channel: c.channel,
        customerMessageId: customerMessageIdOf(c.id, r.contact_id),
        destination: r.destination,
        text: render(parsed, r.vars, max),
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
      const messages = tooLong.size ? all.filter((m) => !tooLong.has(m.customerMessageId)) : all;
      const outcome = messages.length ? await this.upstream.send(messages) : { failed: [] };
      const failedIds = new Map(outcome.failed.map((f) => [f.customerMessageId, f]));
      const results = rows.map((r, i) => {
        const key = all[i]!.customerMessageId;
        const f = failedIds.get(key);
        if (tooLong.has(key)) return { id: r.contact_id, ok: false, final: true, wait: 0, upstream: false, error: tooLong.get(key)! };
        return { id: r.contact_id, ok: !f, final: f?.final ?? false, wait: f?.retryAfterMs ?? 0, upstream: true, error: f?.error ?? null };
      });
      const counts = await this.record(c.id, results);
      this.metrics.counted(c.channel, "sent", counts.sent);
      this.metrics.counted(c.channel, "failed", counts.failed);
      this.metrics.counted(c.channel, "retried", counts.retried);
      this.metrics.lagged(
        c.channel,
        rows.filter((_, i) => results[i]!.ok).map((r) => (Date.now() - new Date(r.due_at).getTime()) / 1000),
      );
      this.metrics.batchTook(this.upstream.mode, (Date.now() - started) / 1000);
      const reached = rows.filter((r, i) => results[i]!.ok && !r.simulation).map((r) => r.contact_id);
      if (reached.length) {
        this.hooks
          .markContacted(c.company_id, reached, c.channel)
          .catch((err) => this.log.warn({ err, campaignId: c.id }, "could not mark contacts contacted"));
      }
      window.push(...results.filter((r) => r.upstream).map((r) => r.ok));
      window.splice(0, Math.max(0, window.length - windowSize));
      const failures = window.filter((ok) => !ok).length;
      if (window.length >= windowSize && failures * 2 > window.length) {
        const reason = `Paused by itself: ${failures} of the last ${window.length} messages failed at the upstream (last: ${outcome.failed[outcome.failed.length - 1]?.error ?? "?"}). Resume with PUT /campaigns/{id}/resume.`;
        await rawQuery(
          this.sequelize,
          `UPDATE campaigns SET status = 'PAUSED', pause_reason = $3, node_id = NULL, leased_until = NULL, updated_at = now()
            WHERE id = $1 AND node_id = $2 AND status = 'SENDING'`,
          [c.id, this.nodeId, reason.slice(0, 1000)],
        );
        this.log.warn({ campaignId: c.id, failed: failures, window: window.length }, "campaign paused: most of a batch window failed");
        return;
      }
      if (rate) await sleep(Math.max(0, (rows.length / rate) * 1000 - (Date.now() - started)), signal);
    }
  }

  /** Outcomes of one batch and the progress counters, one statement; a recipient already recorded (a repeat) is left alone. */
  private async record(campaignId: string, results: Array<{ id: string; ok: boolean; final: boolean; wait: number; error: string | null }>) {
    const [row] = await rawQuery<{ sent: number; failed: number; retried: number }>(
      this.sequelize,
      `WITH x AS (SELECT * FROM jsonb_to_recordset($2::jsonb) AS x(id uuid, ok boolean, final boolean, wait float8, error text)),
       upd AS (
         UPDATE campaign_recipients r
            SET status = CASE WHEN x.ok THEN 'SENT' WHEN x.final OR r.attempts + 1 >= ${MAX_ATTEMPTS} THEN 'FAILED' ELSE 'PENDING' END,
                attempts = r.attempts + 1,
                sent_at = CASE WHEN x.ok THEN now() END,
                error = CASE WHEN x.ok THEN NULL ELSE x.error END,
                due_at = CASE WHEN x.ok THEN r.due_at ELSE now() + make_interval(secs => GREATEST($3::float8 * power(4, r.attempts), x.wait) / 1000) END
           FROM x WHERE r.campaign_id = $1 AND r.contact_id = x.id AND r.status = 'PENDING'
         RETURNING r.status),
       n AS (SELECT count(*) FILTER (WHERE status = 'SENT')::int AS sent, count(*) FILTER (WHERE status = 'FAILED')::int AS failed,
                    count(*) FILTER (WHERE status = 'PENDING')::int AS retried FROM upd),
       bump AS (UPDATE campaigns k SET sent = k.sent + n.sent, failed = k.failed + n.failed, updated_at = now() FROM n WHERE k.id = $1 AND (n.sent > 0 OR n.failed > 0))
       SELECT sent, failed, retried FROM n`,
      [campaignId, JSON.stringify(results.map(({ id, ok, final, wait, error }) => ({ id, ok, final, wait, error }))), RETRY_BASE_MS],
    );
    return row!;
  }

  /** Every recipient has its outcome: SENT (FAILED when none could be sent), while this node still holds it. */
  private async finish(c: CampaignRow): Promise<void> {
    const [row] = await rawQuery<{ status: string; sent: number; failed: number }>(
      this.sequelize,
      `UPDATE campaigns SET status = CASE WHEN sent = 0 AND failed > 0 THEN 'FAILED' ELSE 'SENT' END, completed_at = now(),
              node_id = NULL, leased_until = NULL, updated_at = now()
        WHERE id = $1 AND node_id = $2 AND status = 'SENDING'
          AND NOT EXISTS (SELECT 1 FROM campaign_recipients WHERE campaign_id = $1 AND status = 'PENDING')
       RETURNING status, sent, failed`,
      [c.id, this.nodeId],
    );
    if (row) {
      this.log.info({ campaignId: c.id, status: row.status, sent: row.sent, failed: row.failed }, "campaign ended");
      this.hooks.ended();
    }
  }

  /** Stops claiming and hands this node's campaigns back at once (SENDING, no holder: any node takes them up). */
  async stop(): Promise<void> {
    this.stopping = true;
    this.loops.stop();
    await this.claims.close();
    const ids = [...this.active.keys()];
    for (const a of this.active.values()) a.abort();
    await this.jobs
      .giveBack({ ids, owner: this.nodeId }, { where: "c.status = 'SENDING'" })
      .catch((err) => this.log.warn({ err }, "could not hand campaigns back"));
    await this.upstream.close();
  }
}
