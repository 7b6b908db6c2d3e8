/**
 * What an operator watches on a media node: uploads stored or refused here by outcome, and, read
 * from the database at each scrape (the same on every replica), the bytes and files stored for all
 * accounts (`storedTotals`, media.queries.ts). Uploads the gateway refuses before they reach a media
 * node (too large, wrong kind, malformed) are the gateway's `upload_rejections_total{action="media.upload"}`.
 */
import { Counter, Gauge, Registry } from "prom-client";
import type { Sequelize } from "sequelize";
import { onePerScrape } from "../../lib/observability/http-metrics";
import { storedTotals } from "./media.queries";

/** stored; quota (the account's MEDIA_ACCOUNT_MAX_BYTES); rejected (another 4xx); failed (5xx: disk, database). */
export type UploadOutcome = "stored" | "quota" | "rejected" | "failed";

export class MediaMetrics {
  readonly registry = new Registry();
  private readonly uploads = new Counter({
    name: "media_uploads_total",
    help: "Media uploads that reached this media node, by outcome (stored, quota, rejected, failed)",
    labelNames: ["outcome"] as const,
    registers: [this.registry],
  });

  constructor(sequelize: Sequelize) {
    const read = onePerScrape(() => storedTotals(sequelize), { bytes: Number.NaN, files: Number.NaN });
    const bytes: Gauge = new Gauge({
      name: "media_stored_bytes",
      help: "Bytes of media stored, all accounts and nodes",
      registers: [this.registry],
      async collect() {
        bytes.set((await read()).bytes);
      },
    });
    const files: Gauge = new Gauge({
      name: "media_stored_files",
      help: "Media files stored, all accounts and nodes",
      registers: [this.registry],
      async collect() {
        files.set((await read()).files);
      },
    });
  }

  upload(outcome: UploadOutcome): void {
    this.uploads.labels(outcome).inc();
  }
}
