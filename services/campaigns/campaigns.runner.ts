/**
 * Sends campaigns on this campaigns node, on lib/jobs/jobs.ts's loops. The recipients are the jobs
 * (campaigns.sender.ts): any number of campaigns nodes work on the same campaign, each with
 * CAMPAIGN_CONCURRENCY batches in flight, every batch claimed under a token of its own with one
 * lease row (campaign_batches, campaigns.sender.queries.ts).
 * This node:
 * - polls when woken (a campaign was confirmed or resumed on any node: the CAMPAIGN_DUE broadcast;
 *   a send of its own ended; the earliest scheduled_at of a SCHEDULED campaign has come) and, as a
 *   safety net for a lost broadcast, every CAMPAIGN_POLL_MS: a SCHEDULED campaign whose time has
 *   come becomes SENDING (one guarded UPDATE; whichever node runs it, they all then work on it),
 *   and every SENDING campaign it does not yet work on (up to MAX_ACTIVE) gets a CampaignSend;
 * - renews the leases of its batches in flight for a third of CAMPAIGN_LEASE_MS or more;
 * - at stop (SIGTERM) claims no more, waits (at most SHUTDOWN_TIMEOUT_MS) for the batches in flight to be
 *   handed over and recorded, then gives back whatever it still holds.
 * A node killed with SIGKILL gives nothing back: its batches' leases run out and any node claims
 * those recipients again. Their customerMessageId is derived from campaign and contact, so a batch
 * handed to the upstream but not recorded is, sent again, a repeat the ingress ignores.
 */
import type { Sequelize } from "sequelize";
import type { Config } from "../../lib/config";
import { Coalesced, EarliestWake } from "../../lib/jobs/coalesce";
import { Jobs, Loops, type ClaimSpec, type JobTable } from "../../lib/jobs/jobs";
import type { Upstream } from "../../lib/http/upstream";
import type { CampaignMetrics } from "./campaigns.metrics";
import type { CampaignRow } from "./campaigns.models";
import { deleteMark, q, sendingCampaigns, startDueCampaigns } from "./campaigns.queries";
import { CampaignSend, type SenderDeps } from "./campaigns.sender";
import { giveBackBatch, renewBatch } from "./campaigns.sender.queries";

export { MAX_ATTEMPTS, PAUSE_WINDOW, RETRY_BASE_MS } from "./campaigns.sender";

/**
 * Broadcast by the node where a campaign was confirmed or resumed, after the commit: every
 * campaigns node polls at once (the poll every CAMPAIGN_POLL_MS is only the safety net for a lost
 * broadcast). Only the campaigns service emits and hears it.
 */
export const CAMPAIGN_DUE = "campaigns.due";

/** Campaigns one node sends at once. */
const MAX_ACTIVE = 4;
type Log = SenderDeps["log"] & { error(o: object, m: string): void };

export interface RunnerHooks extends Pick<SenderDeps, "ended"> {
  /** contacts.markContacted for the account's contacts just sent a campaign message. */
  markContacted(companyId: string, contactIds: string[], channel: CampaignRow["channel"]): Promise<unknown>;
}

/** Rows of contacts to mark contacted (campaign_contact_marks), taken by one node at a time. */
const MARK_JOBS: JobTable = { table: "campaign_contact_marks", alias: "m", key: "id", keyType: "bigint", owner: "owner", lease: { until: "leased_until" } };
/** $1: this node, $2: the lease (ms). */
const MARK_CLAIM: ClaimSpec = {
  candidates: { where: "m.due_at <= now() AND (m.owner IS NULL OR m.leased_until < now())", orderBy: "m.due_at, m.id", limit: 20 },
  owner: "$1",
  leaseMs: "$2",
  returning: "m.id, m.company_id, m.channel, m.contact_ids, m.attempts",
};
/** A mark contacts refused waits 2^attempts seconds (at most this long) before the next try. */
const MARK_RETRY_MAX_S = 300;

export class CampaignRunner {
  private readonly marks: Jobs;
  private readonly loops: Loops;
  private readonly marking = new Coalesced(
    () => this.mark(),
    (err) => this.log.warn({ err }, "marking contacts contacted failed"),
  );
  private readonly sends = new Map<string, CampaignSend>();
  private readonly polls = new Coalesced(
    () => this.poll(),
    (err) => this.log.warn({ err }, "campaign poll failed"),
  );
  private stopping = false;
  private beating = false;
  /** A wake when the earliest SCHEDULED campaign falls due (so a schedule never waits for the slow poll). */
  private readonly scheduled = new EarliestWake(() => this.kick());

  constructor(
    private readonly config: Config,
    private readonly sequelize: Sequelize,
    private readonly nodeId: string,
    private readonly upstream: Upstream,
    private readonly log: Log,
    private readonly metrics: CampaignMetrics,
    private readonly hooks: RunnerHooks,
  ) {
    this.marks = new Jobs(sequelize, MARK_JOBS, MARK_CLAIM);
    this.loops = new Loops(log);
  }

  start(): void {
    this.loops.every(this.config.campaignPollMs, "campaign poll", () => this.kick(), { runNow: true });
    this.loops.every(Math.floor(this.config.campaignLeaseMs / 6), "campaign heartbeat", () => this.heartbeat());
    this.loops.every(this.config.campaignPollMs, "campaign contact marks", () => this.marking.request(), { runNow: true });
  }

  /**
   * Hands the recorded contact marks that are due to contacts.markContacted, a few rows a round: a
   * row answered is deleted, a refused one is put off (2^attempts s, at most MARK_RETRY_MAX_S).
   */
  private async mark(): Promise<void> {
    for (;;) {
      const rows = await this.marks.claim<{ id: string; company_id: string; channel: CampaignRow["channel"]; contact_ids: string[]; attempts: number }>([
        this.nodeId,
        this.config.campaignLeaseMs,
      ]);
      for (const m of rows) {
        try {
          await this.hooks.markContacted(m.company_id, m.contact_ids, m.channel);
          await deleteMark(q(this.sequelize), m.id, this.nodeId);
        } catch (err) {
          this.log.warn({ err, contacts: m.contact_ids.length, attempts: m.attempts + 1 }, "could not mark contacts contacted; trying again later");
          await this.marks.giveBack(
            { ids: [m.id], owner: this.nodeId },
            { set: `attempts = m.attempts + 1, due_at = now() + make_interval(secs => least(power(2, m.attempts + 1), ${MARK_RETRY_MAX_S}))` },
          );
        }
      }
      if (rows.length < 20 || this.stopping) return;
    }
  }

  /** A poll at `at` (ms since the epoch), unless one is set earlier already; past the safety poll's period the poll itself comes first. */
  private wakeAt(at: number): void {
    if (!this.stopping && at - Date.now() <= this.config.campaignPollMs) this.scheduled.at(at);
  }

  /** Looks for campaigns to send now (one was just confirmed or resumed, here or on another node). */
  kick(): void {
    if (!this.stopping) this.polls.request();
  }

  private async poll(): Promise<void> {
    // The campaigns now due become SENDING; in the same statement, how long until the next one is
    // (the campaigns the UPDATE took still read SCHEDULED in its snapshot: only later ones count).
    const next = await startDueCampaigns(q(this.sequelize));
    if (next?.ms != null) this.wakeAt(Date.now() + Math.max(0, Number(next.ms)));
    if (this.sends.size >= MAX_ACTIVE) return;
    const due = await sendingCampaigns(q(this.sequelize), MAX_ACTIVE * 4);
    for (const c of due) {
      if (this.stopping || this.sends.size >= MAX_ACTIVE) return;
      if (this.sends.has(c.id)) continue;
      const send = new CampaignSend(c, {
        config: this.config,
        sequelize: this.sequelize,
        nodeId: this.nodeId,
        upstream: this.upstream,
        metrics: this.metrics,
        log: this.log,
        ended: this.hooks.ended,
        marked: () => this.marking.request(),
        giveBack: (token) => giveBackBatch(this.sequelize, c.id, token),
      });
      this.sends.set(c.id, send);
      this.log.info({ campaignId: c.id, audience: c.audience, sent: c.sent }, "campaign sending here");
      void send.done.finally(() => {
        if (this.sends.get(c.id) === send) this.sends.delete(c.id);
        this.kick();
      });
    }
  }

  /**
   * Renews the leases of this node's batches in flight for a third of the lease or more (most are
   * recorded well before and never renewed), by primary key, one round at a time; a batch that lost
   * some (it outlived its lease) writes no outcome for them.
   */
  private async heartbeat(): Promise<void> {
    if (this.beating) return;
    this.beating = true;
    try {
      const due = Date.now() - this.config.campaignLeaseMs / 3;
      for (const send of this.sends.values()) {
        for (const [token, b] of send.batches) {
          if (b.leasedAt > due) continue;
          const at = Date.now();
          const held = await renewBatch(this.sequelize, send.c.id, token, this.config.campaignLeaseMs);
          b.leasedAt = at;
          if (!held && send.batches.has(token))
            this.log.warn({ campaignId: send.c.id, lost: b.ids.length }, "campaign batch lost the recipients it held (its lease ran out and a claim ended it)");
        }
      }
    } finally {
      this.beating = false;
    }
  }

  /** Claims no more, waits (bounded) for the batches in flight to be recorded, then gives back what this node still holds. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.scheduled.clear();
    await this.polls.close();
    const sends = [...this.sends.values()];
    for (const s of sends) s.stopClaiming();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(sends.map((s) => s.done)), new Promise((r) => (timer = setTimeout(r, this.config.shutdownTimeoutMs)))]);
    clearTimeout(timer);
    this.loops.stop();
    await this.marking.close();
    for (const s of sends) {
      for (const token of s.batches.keys()) {
        await giveBackBatch(this.sequelize, s.c.id, token).catch((err) => this.log.warn({ err, campaignId: s.c.id }, "could not give recipients back"));
      }
    }
    await this.upstream.close();
  }
}
