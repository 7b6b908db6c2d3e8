/**
 * What an operator watches on a notifier node (GET /metrics of whichever listener the node has):
 * attempts by outcome, how long an event took from its receipt to its delivery, and, read from the
 * database at each scrape (the same on every replica), the outbox depth and the age of the oldest
 * due event (`outboxGauges`, notifier.queries.ts).
 */
import { Gauge, Registry } from "prom-client";
import { FastCounter, FastHistogram, type CounterChild, type HistogramChild } from "../../lib/observability/fast-metrics";
import type { Sequelize } from "sequelize";
import { onePerScrape } from "../../lib/observability/http-metrics";
import { outboxGauges } from "./notifier.queries";

export type Outcome = "DELIVERED" | "RETRYING" | "FAILED" | "EXPIRED";

export class NotifierMetrics {
  readonly registry = new Registry();
  private readonly attempts = new FastCounter({
    name: "webhook_attempts_total",
    help: "Webhook attempts made by this notifier, by outcome (DELIVERED, RETRYING, FAILED, EXPIRED)",
    labelNames: ["outcome"] as const,
    registers: [this.registry],
  });
  private readonly byOutcome = new Map<Outcome, CounterChild>();
  /** Observed once per attempt: plain numbers (lib/observability/fast-metrics.ts), no label hashing. */
  readonly latency: HistogramChild = new FastHistogram({
    name: "webhook_delivery_latency_seconds",
    help: "From the event's creation (the receipt accepted) to its successful delivery",
    labelNames: [],
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200, 86400],
    registers: [this.registry],
  }).labels();
  readonly duration: HistogramChild = new FastHistogram({
    name: "webhook_attempt_duration_seconds",
    help: "Time of one attempt (connection and answer)",
    labelNames: [],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 3, 5, 8.5],
    registers: [this.registry],
  }).labels();

  constructor(sequelize: Sequelize) {
    // Both gauges come from one query per scrape; with the database away they read NaN.
    const read = onePerScrape(() => outboxGauges(sequelize), { depth: "NaN", oldest: Number.NaN });
    const depth: Gauge = new Gauge({
      name: "webhook_outbox_depth",
      help: "Events in the outbox not yet delivered, failed or expired (all replicas)",
      registers: [this.registry],
      async collect() {
        depth.set(Number((await read()).depth));
      },
    });
    const oldest: Gauge = new Gauge({
      name: "webhook_outbox_oldest_due_age_seconds",
      help: "How long the oldest due, unclaimed event has been due (0 when none)",
      registers: [this.registry],
      async collect() {
        const age = (await read()).oldest;
        oldest.set(age === null ? 0 : Number.isNaN(age) ? Number.NaN : Math.max(0, age));
      },
    });
  }

  attempt(outcome: Outcome): void {
    let c = this.byOutcome.get(outcome);
    if (!c) this.byOutcome.set(outcome, (c = this.attempts.labels(outcome)));
    c.inc();
  }
}
