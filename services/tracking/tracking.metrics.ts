/**
 * What an operator watches on a tracking node (GET /metrics on the ingress port): objects accepted
 * by path, and the grouped transactions that store them (objects per transaction, time per
 * transaction), beside the listener's HTTP metrics and Moleculer's own.
 */
import { Counter, Histogram, Registry } from "prom-client";

export class IngestMetrics {
  readonly registry = new Registry();
  private readonly accepted = new Counter({
    name: "ingest_objects_total",
    help: "Objects stored through the internal ingress, by path",
    labelNames: ["path"] as const,
    registers: [this.registry],
  });
  private readonly size = new Histogram({
    name: "ingest_transaction_objects",
    help: "Objects written per ingress transaction (concurrent posts are grouped)",
    buckets: [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2000],
    registers: [this.registry],
  });
  private readonly time = new Histogram({
    name: "ingest_transaction_duration_seconds",
    help: "Time per ingress transaction, retries included",
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [this.registry],
  });
  private readonly byPath = new Map<string, ReturnType<IngestMetrics["accepted"]["labels"]>>();

  stored(path: string, n: number): void {
    let c = this.byPath.get(path);
    if (!c) this.byPath.set(path, (c = this.accepted.labels(path)));
    c.inc(n);
  }

  transaction(objects: number, seconds: number): void {
    this.size.observe(objects);
    this.time.observe(seconds);
  }
}
