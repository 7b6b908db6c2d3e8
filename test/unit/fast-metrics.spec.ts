/**
 * lib/observability/fast-metrics.ts renders exactly what prom-client's own Counter and Histogram render for the
 * same observations (dashboards, alerts and scrapers read these lines).
 */
import { Counter, Histogram, Registry } from "prom-client";
import { FastCounter, FastHistogram } from "../../lib/observability/fast-metrics";

describe("fast metrics", () => {
  it("render as prom-client's Counter and Histogram", async () => {
    const ours = new Registry();
    const theirs = new Registry();
    const counter = { labelNames: ["method", "route", "status"], name: "x_requests_total", help: "Requests" };
    const histogram = { labelNames: ["method", "route"], name: "x_duration_seconds", help: "Latency", buckets: [0.002, 0.005, 0.01, 1] };
    const c1 = new Counter({ ...counter, registers: [theirs] });
    const h1 = new Histogram({ ...histogram, registers: [theirs] });
    const c2 = new FastCounter({ ...counter, registers: [ours] });
    const h2 = new FastHistogram({ ...histogram, registers: [ours] });
    const seen: Array<[string, string, string, number]> = [
      ["GET", "/a", "200", 0.001],
      ["GET", "/a", "401", 0.003],
      ["POST", '/b"\\x\n', "202", 5],
      ["GET", "/a", "200", 0.002],
      ["GET", "/a", "200", 1],
    ];
    for (const [m, r, s, v] of seen) {
      c1.labels(m, r, s).inc();
      c2.labels(m, r, s).inc();
      h1.labels(m, r).observe(v);
      h2.labels(m, r).observe(v);
    }
    c1.labels("GET", "/a", "200").inc(3);
    c2.labels("GET", "/a", "200").inc(3);
    expect(await ours.metrics()).toBe(await theirs.metrics());
    expect(await ours.metrics()).toContain('x_duration_seconds_bucket{le="0.002",method="GET",route="/a"} 2');
  });

  it("renders a histogram without labels as prom-client does, before and after observations", async () => {
    const ours = new Registry();
    const theirs = new Registry();
    const o = { name: "z_seconds", help: "Latency", buckets: [0.1, 1] };
    const h1 = new Histogram({ ...o, registers: [theirs] });
    const h2 = new FastHistogram({ ...o, labelNames: [], registers: [ours] }).labels();
    expect(await ours.metrics()).toBe(await theirs.metrics());
    for (const v of [0.05, 0.5, 3]) {
      h1.observe(v);
      h2.observe(v);
    }
    expect(await ours.metrics()).toBe(await theirs.metrics());
  });

  it("ignores a value that is not a finite number instead of corrupting the sum", async () => {
    const r = new Registry();
    const h = new FastHistogram({ name: "y_seconds", help: "h", labelNames: ["a"], buckets: [1], registers: [r] });
    h.labels("x").observe(Number.NaN);
    h.labels("x").observe(0.5);
    expect(await r.metrics()).toContain('y_seconds_sum{a="x"} 0.5');
    expect(await r.metrics()).toContain('y_seconds_count{a="x"} 1');
  });
});
