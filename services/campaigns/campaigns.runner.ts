/**
 * Sends campaigns on this campaigns node, on lib/jobs.ts. The recipients are the jobs
 * (campaigns.sender.ts): any number of campaigns nodes work on the same campaign, each with
 * CAMPAIGN_CONCURRENCY batches in flight, every batch claimed under a token of its own with a lease.
 * This node:
 * - polls (every CAMPAIGN_POLL_MS, and at once when a campaign was confirmed or resumed here): a
 *   SCHEDULED campaign whose time has come becomes SENDING (one guarded UPDATE; whichever node
 *   runs it, they all then work on it), and every SENDING campaign it does not yet work on (up to
 *   MAX_ACTIVE) gets a CampaignSend;
 * - renews the leases of its batches in flight (every third of CAMPAIGN_LEASE_MS);
 * - at stop (SIGTERM) claims no more, waits (at most STOP_WAIT_MS) for the batches in flight to be
 *   handed over and recorded, then gives back whatever it still holds.
 * A node killed with SIGKILL gives nothing back: its batches' leases run out and any node claims
 * those recipients again. Their customerMessageId is derived from campaign and contact, so a batch
 * handed to the upstream but not recorded is, sent again, a repeat the ingress ignores.
 */
import type { Sequelize } from "sequelize";
import type { Config } from "../../lib/config";
import { Coalesced } from "../../lib/coalesce";
import { rawQuery } from "../../lib/db";
import { Jobs, Loops } from "../../lib/jobs";
import type { Upstream } from "../../lib/upstream";
import type { CampaignMetrics } from "./campaigns.metrics";
import { CAMPAIGN_COLUMNS, type CampaignRow } from "./campaigns.models";
import { CampaignSend, RECIPIENT_JOBS, type SenderDeps } from "./campaigns.sender";

export { MAX_ATTEMPTS, PAUSE_WINDOW, RETRY_BASE_MS } from "./campaigns.sender";

/** Campaigns one node sends at once. */
const MAX_ACTIVE = 4;
/** How long stop() waits for batches in flight before giving back what is left. */
export const STOP_WAIT_MS = 10_000;

type Log = SenderDeps["log"] & { error(o: object, m: string): void };

export type RunnerHooks = Pick<SenderDeps, "markContacted" | "ended">;

export class CampaignRunner {
  private readonly recipients: Jobs;
  private readonly loops: Loops;
  private readonly sends = new Map<string, CampaignSend>();
  private readonly polls = new Coalesced(
    () => this.poll(),
    (err) => this.log.warn({ err }, "campaign poll failed"),
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
    this.recipients = new Jobs(sequelize, RECIPIENT_JOBS);
    this.loops = new Loops(log);
  }

  start(): void {
    this.loops.every(this.config.campaignPollMs, "campaign poll", () => this.kick(), { runNow: true });
    this.loops.every(Math.floor(this.config.campaignLeaseMs / 3), "campaign heartbeat", () => this.heartbeat());
  }

  /** Looks for campaigns to send now (one was just confirmed or resumed here). */
  kick(): void {
    if (!this.stopping) this.polls.request();
  }

  private async poll(): Promise<void> {
    await rawQuery(
      this.sequelize,
      `UPDATE campaigns SET status = 'SENDING', updated_at = now() WHERE status = 'SCHEDULED' AND scheduled_at <= now() RETURNING id`,
    );
    if (this.sends.size >= MAX_ACTIVE) return;
    const due = await rawQuery<CampaignRow>(
      this.sequelize,
      `SELECT ${CAMPAIGN_COLUMNS} FROM campaigns WHERE status = 'SENDING' ORDER BY scheduled_at, id LIMIT ${MAX_ACTIVE * 4}`,
    );
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
        ...this.hooks,
      });
      this.sends.set(c.id, send);
      this.log.info({ campaignId: c.id, audience: c.audience, sent: c.sent }, "campaign sending here");
      void send.done.finally(() => {
        if (this.sends.get(c.id) === send) this.sends.delete(c.id);
        this.kick();
      });
    }
  }

  /** Renews the leases of this node's batches in flight; a batch that lost some (it outlived its lease) writes no outcome for them. */
  private async heartbeat(): Promise<void> {
    for (const send of this.sends.values()) {
      for (const [token, ids] of send.batches) {
        const held = await this.recipients.renew(
          { group: send.c.id, ids, owner: token },
          { leaseMs: this.config.campaignLeaseMs, where: "r.status = 'PENDING'" },
        );
        if (held.length < ids.length && send.batches.has(token))
          this.log.warn({ campaignId: send.c.id, lost: ids.length - held.length }, "campaign batch lost recipients it held (lease ran out)");
      }
    }
  }

  /** Claims no more, waits (bounded) for the batches in flight to be recorded, then gives back what this node still holds. */
  async stop(): Promise<void> {
    this.stopping = true;
    await this.polls.close();
    const sends = [...this.sends.values()];
    for (const s of sends) s.stopClaiming();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(sends.map((s) => s.done)), new Promise((r) => (timer = setTimeout(r, STOP_WAIT_MS)))]);
    clearTimeout(timer);
    this.loops.stop();
    for (const s of sends) {
      for (const [token, ids] of s.batches) {
        await this.recipients
          .giveBack({ group: s.c.id, ids, owner: token }, { where: "r.status = 'PENDING'" })
          .catch((err) => this.log.warn({ err, campaignId: s.c.id }, "could not give recipients back"));
      }
    }
    await this.upstream.close();
  }
}
