/**
 * What an operator watches on a campaigns node (GET /metrics of its listener): recipients handed to
 * the upstream, failed and retried, by channel; the send lag (from when a recipient was due, the
 * campaign's start or its retry time, to the upstream taking it); how long a batch takes; and, from
 * the database on each scrape, the campaigns sending (all nodes) and how long the one that has gone
 * longest without progress has been still (the "campaign stalled" alert, k8s/base/monitoring).
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { Sequelize } from "sequelize";
import type { Channel } from "../../lib/messaging/channels";
import { onePerScrape } from "../../lib/observability/http-metrics";
import { sendingStill } from "./campaigns.queries";

export class CampaignMetrics {
  readonly registry = new Registry();
  private readonly recipients = new Counter({
    name: "campaign_recipients_total",
    help: "Campaign recipients by outcome of an attempt (sent, retried, failed after 3 attempts, skipped: opted out or deleted) and channel, on this node",
    labelNames: ["channel", "outcome"] as const,
    registers: [this.registry],
  });
  private readonly lag = new Histogram({
    name: "campaign_send_lag_seconds",
    help: "From when a recipient was due (campaign start or retry time) to the upstream taking its message",
    labelNames: ["channel"] as const,
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600],
    registers: [this.registry],
  });
  private readonly batch = new Histogram({
    name: "campaign_batch_duration_seconds",
    help: "Time of one batch: rendering, the upstream's answer and the outcome write",
    labelNames: ["mode"] as const,
    buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });

  constructor(sequelize: Sequelize) {
    const read = onePerScrape(() => sendingStill(sequelize), { sending: Number.NaN, still: Number.NaN });
    const sending: Gauge = new Gauge({
      name: "campaigns_sending",
      help: "Campaigns in SENDING (all nodes)",
      registers: [this.registry],
      async collect() {
        sending.set(Number((await read()).sending));
      },
    });
    const still: Gauge = new Gauge({
      name: "campaign_sending_still_seconds",
      help: "How long the SENDING campaign longest without progress has made none (0 when none sends)",
      registers: [this.registry],
      async collect() {
        const s = (await read()).still;
        still.set(s === null ? 0 : Number.isNaN(s) ? Number.NaN : Math.max(0, s));
      },
    });
  }

  counted(channel: Channel, outcome: "sent" | "retried" | "failed" | "skipped", n: number): void {
    if (n > 0) this.recipients.labels(channel, outcome).inc(n);
  }

  lagged(channel: Channel, seconds: number[]): void {
    for (const s of seconds) this.lag.labels(channel).observe(Math.max(0, s));
  }

  batchTook(mode: string, seconds: number): void {
    this.batch.labels(mode).observe(seconds);
  }
}
