/**
 * Counters and histograms for the per-request paths (every HTTP request, every action call), kept
 * as plain numbers in children resolved once per label values, and rendered by prom-client.
 *
 * prom-client's own `labels(...).inc()` / `.observe()` rebuild the label hash (a string) and check
 * the labels on every call, even on a child: at load that was ~1.5 KB of garbage and two hash
 * builds per request (bench/gateway). Here a child is a few numbers: `inc` adds, `observe` finds
 * the bucket and adds. The metric objects implement what a prom-client Registry asks of a metric
 * (`name`, `help`, `type`, `get()`), so /metrics renders them exactly as prom-client's own.
 */
import type { Registry } from "prom-client";

type LabelValues = Record<string, string>;

interface MetricValue {
  labels: LabelValues;
  value: number;
  metricName?: string;
}

abstract class FastMetric<C extends { labels: LabelValues }> {
  readonly aggregator = "sum";
  protected readonly children = new Map<string, C>();

  constructor(
    readonly name: string,
    readonly help: string,
    protected readonly labelNames: readonly string[],
    registers: Registry[],
  ) {
    for (const r of registers) r.registerMetric(this as never);
  }

  protected abstract create(labels: LabelValues): C;

  /** The child of these label values (in labelNames' order), made once. */
  labels(...values: string[]): C {
    const key = values.length === 1 ? values[0]! : values.join("\u0000");
    let child = this.children.get(key);
    if (!child) {
      const labels: LabelValues = {};
      this.labelNames.forEach((n, i) => (labels[n] = String(values[i] ?? "")));
      child = this.create(labels);
      this.children.set(key, child);
    }
    return child;
  }

  reset(): void {
    this.children.clear();
  }
}

export class CounterChild {
  value = 0;
  constructor(readonly labels: LabelValues) {}
  inc(by = 1): void {
    this.value += by;
  }
}

export class FastCounter extends FastMetric<CounterChild> {
  readonly type = "counter";

  constructor(o: { name: string; help: string; labelNames: readonly string[]; registers: Registry[] }) {
    super(o.name, o.help, o.labelNames, o.registers);
  }

  protected create(labels: LabelValues): CounterChild {
    return new CounterChild(labels);
  }

  get(): Promise<{ name: string; help: string; type: string; values: MetricValue[]; aggregator: string }> {
    const values = [...this.children.values()].map((c) => ({ labels: c.labels, value: c.value }));
    return Promise.resolve({ name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator });
  }
}

export class HistogramChild {
  readonly counts: Float64Array;
  sum = 0;
  count = 0;
  constructor(
    readonly labels: LabelValues,
    private readonly bounds: readonly number[],
  ) {
    this.counts = new Float64Array(bounds.length);
  }
  observe(value: number): void {
    if (!Number.isFinite(value)) return;
    const bounds = this.bounds;
    for (let i = 0; i < bounds.length; i++) {
      if (value <= bounds[i]!) {
        this.counts[i]!++;
        break;
      }
    }
    this.sum += value;
    this.count++;
  }
}

export class FastHistogram extends FastMetric<HistogramChild> {
  readonly type = "histogram";
  private readonly bounds: readonly number[];

  constructor(o: { name: string; help: string; labelNames: readonly string[]; buckets: readonly number[]; registers: Registry[] }) {
    super(o.name, o.help, o.labelNames, o.registers);
    this.bounds = [...o.buckets].sort((a, b) => a - b);
  }

  protected create(labels: LabelValues): HistogramChild {
    return new HistogramChild(labels, this.bounds);
  }

  /** As prom-client's histogram renders: cumulative buckets (`le` first), +Inf, then _sum and _count. */
  get(): Promise<{ name: string; help: string; type: string; values: MetricValue[]; aggregator: string }> {
    const values: MetricValue[] = [];
    for (const c of this.children.values()) {
      let cumulative = 0;
      this.bounds.forEach((le, i) => {
        cumulative += c.counts[i]!;
        values.push({ labels: { le: le as unknown as string, ...c.labels }, value: cumulative, metricName: `${this.name}_bucket` });
      });
      values.push({ labels: { le: "+Inf", ...c.labels }, value: c.count, metricName: `${this.name}_bucket` });
      values.push({ labels: c.labels, value: c.sum, metricName: `${this.name}_sum` });
      values.push({ labels: c.labels, value: c.count, metricName: `${this.name}_count` });
    }
    return Promise.resolve({ name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator });
  }
}
