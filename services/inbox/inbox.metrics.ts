/**
 * What an operator watches on an inbox node (GET /metrics): inbound messages stored, by channel, the
 * grouped transactions that store them (messages per transaction, time per transaction), and replies
 * by outcome (sent, closed: WhatsApp outside its window, failed: the upstream refused, optedOut: the
 * number opted out of the channel, nothing sent).
 */
import { Counter, Histogram, Registry } from "prom-client";

export type ReplyOutcome = "sent" | "closed" | "failed" | "optedOut";

export class InboxMetrics {
  readonly registry = new Registry();
  private readonly inbound = new Counter({
    name: "inbox_inbound_total",
    help: "Inbound messages stored (a repeated messageId is not counted), by channel",
    labelNames: ["channel"] as const,
    registers: [this.registry],
  });
  private readonly replies = new Counter({
    name: "inbox_replies_total",
    help: "Replies by channel and outcome: sent (handed to the upstream), closed (WhatsApp window closed), failed (upstream refused), optedOut (the number opted out: 409, nothing sent)",
    labelNames: ["channel", "outcome"] as const,
    registers: [this.registry],
  });

  private readonly groupSize = new Histogram({
    name: "inbox_ingest_transaction_messages",
    help: "Inbound messages written per transaction (inbox.ingest: concurrent calls grouped; the inbound feed: a round's batch)",
    buckets: [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2000],
    registers: [this.registry],
  });
  private readonly groupTime = new Histogram({
    name: "inbox_ingest_transaction_duration_seconds",
    help: "Time per inbound transaction (inbox.ingest or a round of the inbound feed), retries included",
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [this.registry],
  });

  private readonly refusedRows = new Counter({
    name: "inbox_inbound_refused_total",
    help: "Inbound messages of tracking's inbound feed the database refused, skipped (logged with account and messageId), by channel",
    labelNames: ["channel"] as const,
    registers: [this.registry],
  });

  refused(channel: string): void {
    this.refusedRows.labels(channel).inc();
  }

  stored(channel: string, n: number): void {
    if (n > 0) this.inbound.labels(channel).inc(n);
  }

  transaction(messages: number, seconds: number): void {
    this.groupSize.observe(messages);
    this.groupTime.observe(seconds);
  }

  replied(channel: string, outcome: ReplyOutcome): void {
    this.replies.labels(channel, outcome).inc();
  }
}
