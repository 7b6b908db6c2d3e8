/**
 * What an operator watches on an inbox node (GET /metrics): inbound messages stored, by channel,
 * and replies by outcome (sent, closed: WhatsApp outside its window, failed: the upstream refused).
 */
import { Counter, Registry } from "prom-client";

export type ReplyOutcome = "sent" | "closed" | "failed";

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
    help: "Replies by channel and outcome: sent (handed to the upstream), closed (WhatsApp window closed), failed (upstream refused)",
    labelNames: ["channel", "outcome"] as const,
    registers: [this.registry],
  });

  stored(channel: string, n: number): void {
    if (n > 0) this.inbound.labels(channel).inc(n);
  }

  replied(channel: string, outcome: ReplyOutcome): void {
    this.replies.labels(channel, outcome).inc();
  }
}
