/**
 * Counters and histograms for the per-request paths (every HTTP request, every action call): prom-client's
 * own Counter and Histogram, with each label child resolved once per label values and kept, so a
 * request costs one `inc` or `observe` on a child (prom-client's public API, a few hundred ns) and
 * never a `labels(...)` lookup. Earlier these were plain numbers passed to prom-client's Registry as
 * if they were its metrics, which leaned on how the Registry reads a metric (undocumented); the few
 * hundred ns per request this costs were measured with bench/gateway.
 */
import { Counter, Histogram, type Registry } from "prom-client";

/** A counter's child for one set of label values. */
export interface CounterChild {
  inc(by?: number): void;
}

/** A histogram's child for one set of label values. */
export interface HistogramChild {
  observe(value: number): void;
}

/** Children by their label values (joined), made once each. */
function memoized<C>(make: (values: string[]) => C): (values: string[]) => C {
  const children = new Map<string, C>();
  return (values) => {
    const key = values.length === 1 ? values[0]! : values.join("\u0000");
    let child = children.get(key);
    if (!child) children.set(key, (child = make(values)));
    return child;
  };
}

export class FastCounter {
  private readonly metric: Counter<string>;
  private readonly child: (values: string[]) => CounterChild;

  constructor(o: { name: string; help: string; labelNames: readonly string[]; registers: Registry[] }) {
    this.metric = new Counter({ name: o.name, help: o.help, labelNames: [...o.labelNames], registers: o.registers });
    this.child = memoized((values) => this.metric.labels(...values));
  }

  /** The child of these label values (in labelNames' order), made once. */
  labels(...values: string[]): CounterChild {
    return this.child(values);
  }
}

export class FastHistogram {
  private readonly metric: Histogram<string>;
  private readonly child: (values: string[]) => HistogramChild;

  constructor(o: { name: string; help: string; labelNames: readonly string[]; buckets: readonly number[]; registers: Registry[] }) {
    this.metric = new Histogram({ name: o.name, help: o.help, labelNames: [...o.labelNames], buckets: [...o.buckets], registers: o.registers });
    this.child = memoized((values) => {
      const child = values.length > 0 ? this.metric.labels(...values) : this.metric;
      // A value that is not a finite number (a clock read gone wrong) is dropped rather than turning the sum into NaN.
      return { observe: (value: number) => (Number.isFinite(value) ? child.observe(value) : undefined) };
    });
  }

  /** The child of these label values (in labelNames' order), made once. */
  labels(...values: string[]): HistogramChild {
    return this.child(values);
  }
}
