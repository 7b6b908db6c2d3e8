/**
 * What an operator watches on an exports node (GET /metrics of whichever listener the node has):
 * runs by type and outcome, rows written, how long runs take, and, read from the database at each
 * scrape (the same on every replica), the jobs waiting and running and the age of the oldest one
 * waiting.
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { Sequelize } from "sequelize";
import { onePerScrape } from "../../lib/observability/http-metrics";
import { jobCounts } from "./exports.queries";
import type { ExportType } from "./exports.schemas";

export type RunOutcome = "COMPLETED" | "RETRIED" | "FAILED";

export class ExportMetrics {
  readonly registry = new Registry();
  private readonly runs = new Counter({
    name: "export_runs_total",
    help: "Export runs ended on this node, by type and outcome (COMPLETED, RETRIED, FAILED)",
    labelNames: ["type", "outcome"] as const,
    registers: [this.registry],
  });
  private readonly rows = new Counter({
    name: "export_rows_total",
    help: "Rows written to export files on this node, by type",
    labelNames: ["type"] as const,
    registers: [this.registry],
  });
  private readonly seconds = new Histogram({
    name: "export_run_duration_seconds",
    help: "Time of a completed run, from its claim to its file in place",
    labelNames: ["type"] as const,
    buckets: [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600],
    registers: [this.registry],
  });

  constructor(sequelize: Sequelize) {
    // Every gauge comes from one query per scrape; with the database away they read NaN.
    const read = onePerScrape(() => jobCounts(sequelize), { queued: Number.NaN, processing: Number.NaN, oldest: Number.NaN });
    const jobs: Gauge<"status"> = new Gauge({
      name: "export_jobs",
      help: "Export jobs waiting (QUEUED) and running (PROCESSING), all nodes",
      labelNames: ["status"] as const,
      registers: [this.registry],
      async collect() {
        const r = await read();
        jobs.labels("QUEUED").set(Number(r.queued));
        jobs.labels("PROCESSING").set(Number(r.processing));
      },
    });
    const oldest: Gauge = new Gauge({
      name: "export_queue_oldest_age_seconds",
      help: "How long the oldest QUEUED job has waited (0 when none)",
      registers: [this.registry],
      async collect() {
        const age = (await read()).oldest;
        oldest.set(age === null ? 0 : Number.isNaN(age) ? Number.NaN : Math.max(0, age));
      },
    });
  }

  ended(type: ExportType, outcome: RunOutcome, result?: { rows: number; seconds: number }): void {
    this.runs.labels(type, outcome).inc();
    if (result) {
      this.rows.labels(type).inc(result.rows);
      this.seconds.labels(type).observe(result.seconds);
    }
  }
}
