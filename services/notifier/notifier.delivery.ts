/**
 * Delivery from the outbox (contract "Event delivery"; spec part 6 "Delivery to the callback").
 *
 * The schedule lives in the database, nowhere else:
 * - Claim: due rows of accounts that have a webhook, per account at most its free slots (a
 *   look-ahead over the per-endpoint concurrency limit), under `FOR UPDATE SKIP LOCKED`; the claim
 *   sets `leased_until` (NOTIFIER_LEASE_MS, longer than any attempt can take) and stamps a token of
 *   this claim. Any number of replicas share the work and none takes a row another holds; a claimant
 *   that dies leaves rows that fall due again when the lease ends (at least once).
 * - Attempt: at once, never queued behind another account's (a slow endpoint fills only its own
 *   slots; its account's fresh events still flow while failed ones wait for their retry).
 * - Outcome, written in groups (one statement for many attempts) and only while the claim is still
 *   ours: DELIVERED, FAILED (5th attempt) and EXPIRED (a retry that would fall more than 10 days
 *   after the message was sent) delete the row; RETRYING sets its next due time,
 *   base * 2^(n-1) + 0-20 % jitter after attempt n failed, base per channel. Every attempt is logged
 *   in webhook_attempts.
 * Housekeeping (any replica, bounded batches): attempts older than 7 days, events of accounts that
 * have no webhook any more (written while they had one: tracking and inbox write none for an account
 * without one), and signing secrets whose rotation overlap is over.
 */
import { randomBytes } from "node:crypto";
import type { Service } from "moleculer";
import type { Sequelize } from "sequelize";
import type { Config } from "../../lib/config";
import { queryRows } from "../../lib/db/db";
import { Coalesced, EarliestWake } from "../../lib/jobs/coalesce";
import { Jobs, Loops } from "../../lib/jobs/jobs";
import { DEADLINE_MS, type AttemptResult, type CallbackClient } from "./notifier.client";
import type { NotifierMetrics } from "./notifier.metrics";
import { ATTEMPTS_KEPT_DAYS, OUTBOX, OUTBOX_CLAIM, PURGE_ORPHAN_EVENTS, PURGE_REPLACED_SECRETS, RECORD } from "./notifier.queries";
import { dropDaysBefore, ensureDays } from "../../lib/db/partitions";
import { afterFailure, RETRY_WINDOW_MS, type ClaimedEvent, type Endpoint, type OutcomeRow, type Pace } from "./notifier.schedule";
import type { Signer } from "./notifier.signing";

export { MAX_ATTEMPTS, RETRY_WINDOW_MS, afterFailure, nextAttemptAt, type ClaimedEvent } from "./notifier.schedule";

const FLUSH_AT = 500;
const FLUSH_DELAY_MS = 20;
const HOUSEKEEPING_MS = 60_000;
const CLAIM_GATHER_MS = 5;
/** The longest an attempt can take (the client's overall deadline) plus a margin. */
const ATTEMPT_MAX_MS = DEADLINE_MS + 500;
/** Events held per endpoint (running or waiting), in multiples of its concurrency: at least... */
const LOOK_AHEAD = 4;
/** ...and, for an endpoint that answers fast, what it takes in LOOK_AHEAD_S at its recent pace, up to this multiple. */
const LOOK_AHEAD_MAX = 64;
const LOOK_AHEAD_S = 0.25;
/** Events held by the replica, in multiples of NOTIFIER_MAX_IN_FLIGHT. */
const REPLICA_LOOK_AHEAD = 16;
/** The pace of an endpoint is measured over at least this long (ms). */
const PACE_WINDOW_MS = 100;

const BATCH = 5000;

export interface DelivererOptions {
  config: Config;
  sequelize: Sequelize;
  client: CallbackClient;
  signer: Signer;
  metrics: NotifierMetrics;
  logger: Service["logger"];
}

export class Deliverer {
  private readonly endpoints = new Map<string, Endpoint>();
  /** Accounts' recent paces (kept while an endpoint comes and goes between claims). */
  private readonly paces = new Map<string, Pace>();
  /** Accounts with queued events waiting for a slot of the replica, in turn. */
  private readonly waiting = new Set<string>();
  /** Events this replica holds a claim on (running or queued). */
  private held = 0;
  private active = 0;
  private readonly aborts = new Map<string, { abort: AbortController; token: string }>();
  private outcomes: OutcomeRow[] = [];
  private flushing: Promise<void> | null = null;
  private flushTimer: NodeJS.Timeout | null = null;
  private readonly claims = new Coalesced(
    () => this.claim(),
    (err) => this.o.logger.warn({ err }, "notifier claim failed; retrying at the next poll"),
  );
  private stopped = true;
  private readonly loops: Loops;
  private readonly outbox: Jobs;
  private soonTimer: NodeJS.Timeout | null = null;
  /** The earliest retry this replica scheduled: a wake then, so a retry never waits for the poll. */
  private readonly retries = new EarliestWake(() => this.wake());
  private readonly attempts = new Set<Promise<void>>();

  constructor(private readonly o: DelivererOptions) {
    this.loops = new Loops(o.logger);
    this.outbox = new Jobs(o.sequelize, OUTBOX, OUTBOX_CLAIM);
  }

  /**
   * Claims run ahead of the attempts: LOOK_AHEAD times an endpoint's concurrency is held, and for an
   * endpoint that answers fast, what it takes in LOOK_AHEAD_S at its recent pace (up to
   * LOOK_AHEAD_MAX times its concurrency), so a freed slot starts the next event at once instead of
   * waiting for a claim round trip, and one claim serves many attempts (every statement costs system
   * calls on both sides). With 4 times the concurrency a fast receiver drained the look-ahead faster
   * than a claim came back (bench/notifier: 7,000 events/s; 11,000 to 13,700 holding more). A slow
   * endpoint keeps the small look-ahead, so its held events do not outlive their lease; a held event
   * that could no longer finish inside its lease is handed back, never attempted late.
   */
  private lookAhead(company?: string): number {
    const concurrency = this.o.config.notifierEndpointConcurrency;
    const base = LOOK_AHEAD * concurrency;
    const pace = company === undefined ? 0 : (this.paces.get(company)?.pace ?? 0);
    return Math.min(LOOK_AHEAD_MAX * concurrency, Math.max(base, Math.ceil(pace * LOOK_AHEAD_S)));
  }

  /** An attempt for the account ended: its endpoint's pace, smoothed over windows of PACE_WINDOW_MS or more. */
  private paced(company: string): void {
    const now = performance.now();
    let p = this.paces.get(company);
    if (!p) this.paces.set(company, (p = { ended: 0, since: now, pace: 0 }));
    p.ended++;
    const ms = now - p.since;
    if (ms < PACE_WINDOW_MS) return;
    const pace = (p.ended * 1000) / ms;
    p.pace = p.pace === 0 ? pace : (p.pace + pace) / 2;
    p.ended = 0;
    p.since = now;
  }

  /** Forgets the paces of accounts without an attempt for a minute (the housekeeping's round). */
  private forgetPaces(): void {
    const before = performance.now() - HOUSEKEEPING_MS;
    for (const [company, p] of this.paces) if (p.since < before && !this.endpoints.has(company)) this.paces.delete(company);
  }

  start(): void {
    this.stopped = false;
    this.loops.every(
      this.o.config.notifierPollMs,
      "notifier poll",
      () => {
        for (const company of this.endpoints.keys()) this.schedule(company);
        this.wake();
      },
      { unref: false },
    );
    this.loops.every(HOUSEKEEPING_MS, "notifier housekeeping", () => {
      this.forgetPaces();
      return this.housekeeping();
    });
    this.wake();
  }

  /**
   * Stops claiming and hands queued events back (due again at once, for any replica); lets the
   * attempts in flight finish within SHUTDOWN_TIMEOUT_MS (an attempt cut short may already have
   * reached the partner, who would get it twice), then cuts the rest and hands them back too;
   * records every outcome.
   */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.loops.stop();
    if (this.soonTimer) clearTimeout(this.soonTimer);
    this.retries.clear();
    await this.claims.close();
    const abandoned: { id: string; token: string }[] = [];
    for (const e of this.endpoints.values()) for (const q of e.queue.splice(0)) abandoned.push({ id: q.ev.id, token: q.token });
    if (this.attempts.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([Promise.all(this.attempts), new Promise((r) => (timer = setTimeout(r, this.o.config.shutdownTimeoutMs)))]);
      clearTimeout(timer);
    }
    for (const [id, a] of this.aborts) abandoned.push({ id, token: a.token });
    for (const a of this.aborts.values()) a.abort.abort();
    await Promise.all(this.attempts);
    // The last outcomes: a few tries (an outcome not written means the event is sent again).
    for (let i = 0; i < 5 && (this.outcomes.length > 0 || this.flushing); i++) {
      await this.flush();
      if (this.outcomes.length > 0) await new Promise((r) => setTimeout(r, 200));
    }
    await this.release(abandoned);
  }

  /** Hands claimed events back: due at once, for any replica. */
  private async release(events: { id: string; token: string }[]): Promise<void> {
    if (events.length === 0) return;
    await this.outbox
      .giveBack({ each: events.map((e) => ({ id: e.id, owner: e.token })) })
      .catch((err) => this.o.logger.warn({ err }, "could not release claimed events; they fall due when their lease ends"));
  }

  /** Completions that come close together free their slots for one claim, not one claim each. */
  private soon(): void {
    if (this.soonTimer || this.stopped) return;
    this.soonTimer = setTimeout(() => {
      this.soonTimer = null;
      this.wake();
    }, CLAIM_GATHER_MS);
  }

  /** A wake at `at` (ms since the epoch), unless one is set earlier already. */
  private wakeAt(at: number): void {
    if (!this.stopped) this.retries.at(at);
  }

  /** Looks for due events now (a claim at a time; a wake during a claim runs one more after it). */
  wake(): void {
    if (!this.stopped) this.claims.request();
  }

  private async claim(): Promise<void> {
    const { config } = this.o;
    const free = REPLICA_LOOK_AHEAD * config.notifierMaxInFlight - this.held;
    if (free <= 0) return;
    const slots: Record<string, number> = {};
    for (const [company, e] of this.endpoints) slots[company] = Math.max(0, this.lookAhead(company) - e.active - e.queue.length);
    // Accounts with no event held here but a recent pace: their look-ahead too (the first claim after a pause).
    for (const company of this.paces.keys()) if (!(company in slots)) slots[company] = this.lookAhead(company);
    const token = randomBytes(9).toString("base64url");
    // The lease runs from the statement's start: measure from before it.
    const claimedAt = Date.now();
    // One statement, atomic by itself: no transaction round trips around it.
    const rows = await this.outbox.claim<ClaimedEvent>([JSON.stringify(slots), this.lookAhead(), free, config.notifierLeaseMs, token]);
    const touched = new Set<string>();
    for (const ev of rows) {
      let e = this.endpoints.get(ev.company_id);
      if (!e) this.endpoints.set(ev.company_id, (e = { active: 0, queue: [] }));
      e.queue.push({ ev, token, claimedAt });
      this.held++;
      touched.add(ev.company_id);
    }
    for (const company of touched) this.schedule(company);
    // A full claim means more may be due: look again at once.
    if (rows.length === free) this.claims.repeat();
  }

  /**
   * Puts an account with queued events in line for the replica's slots and serves the line: the
   * replica's limit (NOTIFIER_MAX_IN_FLIGHT) is shared in turn, so an account whose attempts hang
   * cannot keep every slot; an account already in line keeps its place.
   */
  private schedule(company: string): void {
    const e = this.endpoints.get(company);
    if (e && e.queue.length > 0) this.waiting.add(company);
    else if (e && e.active === 0) this.endpoints.delete(company);
    // (A Set iterated while entries go: pump may put the account back at the end, only when the
    // replica is full, and the loop stops there.)
    for (const next of this.waiting) {
      if (this.active >= this.o.config.notifierMaxInFlight) break;
      this.waiting.delete(next);
      this.pump(next);
    }
  }

  /** Starts the endpoint's queued events while it and the replica have free slots (called in turn by schedule). */
  private pump(company: string): void {
    const e = this.endpoints.get(company);
    if (!e) return;
    const { notifierEndpointConcurrency, notifierMaxInFlight, notifierLeaseMs } = this.o.config;
    const stale: { id: string; token: string }[] = [];
    while (e.queue.length > 0 && e.active < notifierEndpointConcurrency && !this.stopped) {
      if (this.active >= notifierMaxInFlight) {
        // The replica is full: back of the line, for the next free slot whoever frees it.
        this.waiting.add(company);
        break;
      }
      const q = e.queue.shift()!;
      // The lease must outlast the attempt: one that could not finish inside it is handed back instead.
      if (Date.now() - q.claimedAt > notifierLeaseMs - ATTEMPT_MAX_MS) {
        this.held--;
        stale.push({ id: q.ev.id, token: q.token });
        continue;
      }
      this.begin(e, q.ev, q.token);
    }
    if (e.active === 0 && e.queue.length === 0) this.endpoints.delete(company);
    void this.release(stale);
  }

  private begin(e: Endpoint, ev: ClaimedEvent, token: string): void {
    e.active++;
    this.active++;
    const abort = new AbortController();
    this.aborts.set(ev.id, { abort, token });
    const p = this.attempt(ev, token, abort)
      .catch((err) => this.o.logger.error({ err }, "notifier attempt failed unexpectedly"))
      .finally(() => {
        this.aborts.delete(ev.id);
        this.attempts.delete(p);
        e.active--;
        this.active--;
        this.held--;
        this.paced(ev.company_id);
        // The freed slot goes to the accounts already waiting first; this one queues behind them.
        this.schedule(ev.company_id);
        // Claim more once an endpoint's look-ahead has run half down.
        if (e.active + e.queue.length <= this.lookAhead(ev.company_id) / 2) this.soon();
      });
    this.attempts.add(p);
  }

  private async attempt(ev: ClaimedEvent, token: string, abort: AbortController): Promise<void> {
    const n = ev.attempts + 1;
    const sentAt = ev.sent_at_ms;
    const startedAt = Date.now();
    const base: OutcomeRow = {
      id: ev.id,
      c: ev.company_id,
      token,
      n,
      at: new Date(startedAt).toISOString(),
      hs: null,
      ms: null,
      err: null,
      delay: null,
      outcome: "EXPIRED",
    };
    // A retry (never a first attempt) of a message sent over 10 days ago is not made.
    if (n > 1 && startedAt - sentAt > RETRY_WINDOW_MS) {
      this.record({ ...base, err: "not attempted: the message was sent over 10 days ago" });
      return;
    }
    // A signed webhook's keys (held in memory, or read once): an unreadable secret fails the attempt unsent.
    const signing = ev.signing === null ? null : await this.o.signer.signing(ev);
    const r: AttemptResult =
      signing && "error" in signing
        ? { ok: false, httpStatus: null, error: signing.error, durationMs: 0 }
        : await this.o.client.post(ev.company_id, ev.callback_url, ev.payload, abort, signing);
    if (abort.signal.aborted && !r.ok) return; // abandoned at shutdown: released, not counted
    this.o.metrics.duration.observe(r.durationMs / 1000);
    if (r.ok) {
      this.o.metrics.latency.observe((Date.now() - ev.created_at_ms) / 1000);
      this.record({ ...base, hs: r.httpStatus, ms: r.durationMs, outcome: "DELIVERED" });
      return;
    }
    const baseMs = ev.channel === "SMS" ? this.o.config.notifierRetryDelaySmsMs : this.o.config.notifierRetryDelayRcsWhatsappMs;
    const failedAt = Date.now();
    const { outcome, next } = afterFailure(n, failedAt, sentAt, baseMs);
    const err = outcome === "EXPIRED" ? `${r.error}; not retried: the message was sent over 10 days ago` : r.error;
    this.record({ ...base, hs: r.httpStatus, ms: r.durationMs, err, delay: next === null ? null : next - failedAt, outcome });
  }

  private record(row: OutcomeRow): void {
    this.o.metrics.attempt(row.outcome);
    this.outcomes.push(row);
    if (this.outcomes.length >= FLUSH_AT) void this.flush();
    else this.flushTimer ??= setTimeout(() => void this.flush(), FLUSH_DELAY_MS);
  }

  /** Writes the recorded outcomes, a group per statement; on a database error they are kept and tried again. */
  flush(): Promise<void> {
    if (this.flushTimer) {
      clearTimeout(this.flushTimer);
      this.flushTimer = null;
    }
    if (this.flushing) return this.flushing.then(() => (this.outcomes.length > 0 ? this.flush() : undefined));
    if (this.outcomes.length === 0) return Promise.resolve();
    const batch = this.outcomes;
    this.outcomes = [];
    this.flushing = queryRows(this.o.sequelize, RECORD, [JSON.stringify(batch)])
      .then(
        () => {
          let next = Number.POSITIVE_INFINITY;
          for (const r of batch) if (r.outcome === "RETRYING" && r.delay !== null) next = Math.min(next, r.delay);
          if (next !== Number.POSITIVE_INFINITY) this.wakeAt(Date.now() + next);
        },
        (err) => {
          this.o.logger.warn({ err, outcomes: batch.length }, "could not record webhook outcomes; retrying");
          this.outcomes = batch.concat(this.outcomes);
          if (!this.stopped) this.flushTimer ??= setTimeout(() => void this.flush(), 1000);
        },
      )
      .finally(() => {
        this.flushing = null;
      });
    return this.flushing;
  }

  /**
   * The attempts log's days (made a week ahead; those wholly past 7 days dropped, migration 0025),
   * events of accounts without a webhook in bounded batches, replaced signing secrets past their overlap.
   */
  async housekeeping(): Promise<{ attemptDays: string[]; orphans: number }> {
    const seq = this.o.sequelize;
    const drain = async (sql: string) => {
      let total = 0;
      for (;;) {
        const [, meta] = await seq.query(sql, { bind: [BATCH] });
        const n = (meta as { rowCount?: number }).rowCount ?? 0;
        total += n;
        if (n < BATCH || this.stopped) return total;
      }
    };
    const orphans = await drain(PURGE_ORPHAN_EVENTS);
    await seq.query(PURGE_REPLACED_SECRETS);
    // The attempts log's days last: a lock they could not have now (a long reader) must not hold back the rest.
    await ensureDays(seq, "webhook_attempts");
    const attemptDays = await dropDaysBefore(seq, "webhook_attempts", new Date(Date.now() - ATTEMPTS_KEPT_DAYS * 86_400_000));
    return { attemptDays, orphans };
  }
}
