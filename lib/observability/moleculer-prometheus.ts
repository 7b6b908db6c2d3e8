/**
 * Moleculer's own metrics (process, OS, event loop, transporter) in the Prometheus text format,
 * line for line what Moleculer's Prometheus reporter serves, read through the registry's public
 * `broker.metrics.list()`. The reporter itself would start an HTTP server on a port of its own;
 * here the lines are part of each listener's /metrics instead (test/unit/moleculer-prometheus.spec.ts
 * compares both).
 */
import type { ServiceBroker } from "moleculer";

type Labels = Record<string, unknown>;

interface Snapshot {
  labels?: Labels;
  value?: unknown;
  rate?: number;
  buckets?: Record<string, number>;
  quantiles?: Record<string, number>;
  count?: number;
  sum?: number;
  min?: number;
  mean?: number;
  variance?: number;
  stdDev?: number;
  max?: number;
}

const val = (value: unknown) => (value == null ? "NaN" : String(value));
const escapeLabel = (v: unknown) => (typeof v === "string" ? v.replace(/\\/g, "\\\\").replace(/"/g, '\\"') : String(v));

/** Every metric of the broker's registry as Moleculer's Prometheus reporter writes it (default options). */
export function moleculerPrometheusText(broker: ServiceBroker): string {
  const defaults: Labels = { namespace: broker.namespace, nodeID: broker.nodeID };
  const labelStr = (item: Labels | undefined, extra?: Labels) => {
    const labels = { ...defaults, ...item, ...extra };
    const keys = Object.keys(labels);
    return keys.length === 0 ? "" : `{${keys.map((k) => `${k}="${escapeLabel(labels[k])}"`).join(",")}}`;
  };
  const content: string[] = [];
  for (const metric of broker.metrics.list()) {
    // Moleculer leaves out the clock metrics (a label per second).
    if (metric.name.startsWith("os.datetime")) continue;
    const values = metric.values as unknown as Snapshot[];
    if (values.length === 0) continue;
    const name = metric.name.replace(/[.-]/g, "_");
    const help = metric.description ? metric.description : metric.name + (metric.unit ? ` (${metric.unit})` : "");
    const head = (type: string) => content.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    if (metric.type === "counter" || metric.type === "gauge") {
      head(metric.type);
      for (const item of values) {
        const labels = labelStr(item.labels);
        content.push(`${name}${labels} ${val(item.value)}`);
        if (item.rate) content.push(`${name}_rate${labels} ${val(item.rate)}`);
      }
    } else if (metric.type === "info") {
      head("gauge");
      for (const item of values) content.push(`${name}${labelStr(item.labels, { value: item.value })} 1`);
    } else if (metric.type === "histogram") {
      head("histogram");
      for (const item of values) histogramLines(content, name, item, labelStr);
    } else continue;
    content.push("");
  }
  return content.join("\n");
}

function histogramLines(content: string[], name: string, item: Snapshot, labelStr: (item: Labels | undefined, extra?: Labels) => string): void {
  if (item.buckets) {
    for (const le of Object.keys(item.buckets)) content.push(`${name}_bucket${labelStr(item.labels, { le })} ${val(item.buckets[le])}`);
    content.push(`${name}_bucket${labelStr(item.labels, { le: "+Inf" })} ${val(item.count)}`);
  }
  if (item.quantiles) {
    for (const q of Object.keys(item.quantiles)) content.push(`${name}${labelStr(item.labels, { quantile: q })} ${val(item.quantiles[q])}`);
    const labels = labelStr(item.labels);
    content.push(
      `${name}_sum${labels} ${val(item.sum)}`,
      `${name}_count${labels} ${val(item.count)}`,
      `${name}_min${labels} ${val(item.min)}`,
      `${name}_mean${labels} ${val(item.mean)}`,
      `${name}_variance${labels} ${val(item.variance)}`,
      `${name}_stddev${labels} ${val(item.stdDev)}`,
      `${name}_max${labels} ${val(item.max)}`,
    );
  }
  if (item.rate) content.push(`${name}_rate${labelStr(item.labels)} ${val(item.rate)}`);
}
