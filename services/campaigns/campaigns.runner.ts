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
 * - shares its MAX_ACTIVE slots fairly between accounts (`yieldFor`): campaigns are taken in turns
 *   (every account's oldest, then every account's next); when no slot is free and an account with
 *   none here has a campaign waiting, a send of the account holding the most gives its slot up
 *   at once if that account holds more than its share, else (every account within its share: more
 *   accounts sending than slots) the send that has held its slot longest gives it up once it has
 *   held it CAMPAIGN_SLICE_MS. A send that gives up claims no more, records its batches in flight
 *   and ends; its campaign stays SENDING and is taken up again, after the waiting ones;
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
import { Pacer } from "../../lib/jobs/pacer";
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
  /** When each send here took its slot. */
  private readonly since = new Map<CampaignSend, number>();
  /** Sends giving their slot up (to an account waiting with none), until they end. */
  private readonly yielding = new Set<CampaignSend>();
  /** Campaigns whose send here gave its slot up, and when: they come after the waiting ones. */
  private readonly yielded = new Map<string, number>();
  /** CAMPAIGN_NODE_RATE: the rate of every campaign this node sends, together (null: none). */
  private readonly pacer: Pacer | null;
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
    this.pacer = config.campaignNodeRate > 0 ? new Pacer(config.campaignNodeRate) : null;
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
    const now = Date.now();
    for (const [id, at] of this.yielded) if (now - at >= this.config.campaignSliceMs) this.yielded.delete(id);
    const listed = await sendingCampaigns(q(this.sequelize), MAX_ACTIVE * 4);
    // Campaigns that just gave their slot up here wait behind the others (a stable sort keeps the turns).
    const due = [...listed].sort((x, y) => Number(this.yielded.has(x.id)) - Number(this.yielded.has(y.id)));
    const waiting = due.filter((c) => !this.sends.has(c.id));
    for (const c of waiting) {
      if (this.stopping) return;
      if (this.sends.size < MAX_ACTIVE) this.begin(c);
      else this.yieldFor(c, waiting, now);
    }
  }

  /** The sends here that keep their slot, by account. */
  private holders(): Map<string, CampaignSend[]> {
    const by = new Map<string, CampaignSend[]>();
    for (const s of this.sends.values()) if (!this.yielding.has(s)) by.set(s.c.company_id, [...(by.get(s.c.company_id) ?? []), s]);
    return by;
  }

  /**
   * No slot is free and `c` waits: if its account holds none here, one send gives its slot up (at
   * most one per account waiting with none): one of the account holding the most if it holds more
   * than its share, else the one that has held its slot longest once that is CAMPAIGN_SLICE_MS.
   */
  private yieldFor(c: CampaignRow, waiting: CampaignRow[], now: number): void {
    const holders = this.holders();
    if (holders.has(c.company_id)) return;
    const starved = new Set(waiting.map((w) => w.company_id).filter((a) => !holders.has(a)));
    if (this.yielding.size >= starved.size) return;
    const accounts = new Set([...holders.keys(), ...starved]);
    const share = Math.max(1, Math.floor(MAX_ACTIVE / accounts.size));
    const [, most] = [...holders].sort((x, y) => y[1].length - x[1].length)[0] ?? [];
    let give: CampaignSend | undefined;
    if (most && most.length > share) give = most.reduce((x, y) => (this.since.get(x)! >= this.since.get(y)! ? x : y));
    else {
      const oldest = [...holders.values()]
        .flat()
        .reduce<CampaignSend | undefined>((x, y) => (!x || this.since.get(y)! < this.since.get(x)! ? y : x), undefined);
      if (oldest && now - this.since.get(oldest)! >= this.config.campaignSliceMs) give = oldest;
    }
    if (!give) return;
    this.yielding.add(give);
    this.yielded.set(give.c.id, now);
    this.log.info({ campaignId: give.c.id, companyId: give.c.company_id, for: c.company_id }, "campaign gives its sending slot here to another account's");
    give.stopClaiming();
  }

  /** Starts sending `c` on this node. */
  private begin(c: CampaignRow): void {
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
      pacer: this.pacer,
    });
    this.sends.set(c.id, send);
    this.since.set(send, Date.now());
    this.log.info({ campaignId: c.id, audience: c.audience, sent: c.sent }, "campaign sending here");
    void send.done.finally(() => {
      if (this.sends.get(c.id) === send) this.sends.delete(c.id);
      this.since.delete(send);
      this.yielding.delete(send);
      this.kick();
    });
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
