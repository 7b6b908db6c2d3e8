/**
 * /metrics of a listener (the partner gateway, the internal ingress, a node's ops listener): HTTP request counts by route
 * and status and a latency histogram (prom-client, in a registry of the listener's own), then any
 * registries the node's services added (addNodeRegistry), then Moleculer's own metrics in the Prometheus format.
 */
import type { ServiceBroker } from "moleculer";
import { Counter, Registry } from "prom-client";
import { FastCounter, FastHistogram, type CounterChild, type HistogramChild } from "./fast-metrics";
import { moleculerPrometheusText } from "./moleculer-prometheus";
import { requestMetricsOf } from "./request-metrics";

const nodeRegistries = new WeakMap<ServiceBroker, Registry[]>();

/** A service's own metrics (the notifier's, say), rendered by every listener of its node. */
export function addNodeRegistry(broker: ServiceBroker, registry: Registry): void {
  const list = nodeRegistries.get(broker) ?? [];
  if (!list.includes(registry)) list.push(registry);
  nodeRegistries.set(broker, list);
}

export const nodeRegistriesOf = (broker: ServiceBroker): Registry[] => nodeRegistries.get(broker) ?? [];

/**
 * A read shared by the gauges of one scrape (they collect at once: one query answers them all);
 * it never fails a scrape: on an error the gauges read `fallback` (NaN, say).
 */
export function onePerScrape<T>(read: () => Promise<T>, fallback: T): () => Promise<T> {
  let last: Promise<T> | null = null;
  return () =>
    (last ??= read()
      .catch(() => fallback)
      .finally(() => setTimeout(() => (last = null), 100)));
}

export class HttpMetrics {
  private readonly registry = new Registry();
  private readonly requests = new FastCounter({
    name: "http_requests_total",
    help: "HTTP requests answered by this listener, by method, route and status",
    labelNames: ["method", "route", "status"] as const,
    registers: [this.registry],
  });
  private readonly duration = new FastHistogram({
    name: "http_request_duration_seconds",
    help: "HTTP request latency at this listener, by method and route",
    labelNames: ["method", "route"] as const,
    buckets: [0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [this.registry],
  });
  private readonly uploadRejections = new Counter({
    name: "upload_rejections_total",
    help: "Uploads this gateway refused before their action ran (413 too large, 415 unsupported kind, 400 malformed, 408 too slow, 429 the account's share of the spool held, 503 spool full), by action and status",
    labelNames: ["action", "status"] as const,
    registers: [this.registry],
  });

  /** Everything else a listener renders comes from its broker: services may add registries after the listener starts. */
  constructor(private readonly broker: ServiceBroker) {}

  /** Children by route, then by method (and status): no string is built per request (lib/observability/fast-metrics.ts). */
  private readonly byRoute = new Map<string, Map<string, { timer: HistogramChild; counters: Map<number, CounterChild> }>>();

  observe(method: string, route: string, status: number, seconds: number): void {
    let byMethod = this.byRoute.get(route);
    if (!byMethod) this.byRoute.set(route, (byMethod = new Map()));
    let series = byMethod.get(method);
    if (!series) byMethod.set(method, (series = { timer: this.duration.labels(method, route), counters: new Map() }));
    let counter = series.counters.get(status);
    if (!counter) series.counters.set(status, (counter = this.requests.labels(method, route, String(status))));
    counter.inc();
    series.timer.observe(seconds);
  }

  /** An upload refused while the gateway received it. */
  uploadRejected(action: string, status: number): void {
    this.uploadRejections.labels(action, String(status)).inc();
  }

  async render(): Promise<string> {
    const own = await this.registry.metrics();
    const requests = requestMetricsOf(this.broker);
    const calls = requests ? await requests.metrics() : "";
    const extra = (await Promise.all(nodeRegistriesOf(this.broker).map((r) => r.metrics()))).join("\n");
    let mol = "";
    try {
      mol = this.broker.metrics?.isEnabled() ? moleculerPrometheusText(this.broker) : "";
    } catch {
      mol = "";
    }
    return `${own}\n${extra}\n${calls}\n${mol}`;
  }

  readonly contentType = this.registry.contentType;
}
