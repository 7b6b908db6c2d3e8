/**
 * A listener's /metrics carries Moleculer's own metrics (lib/observability/moleculer-prometheus.ts,
 * read through `broker.metrics.list()`): they must be the lines Moleculer's Prometheus reporter
 * serves for the same registry, escaping, rates, histograms and info metrics included.
 */
import { ServiceBroker } from "moleculer";
import { moleculerPrometheusText } from "../../lib/observability/moleculer-prometheus";
import { eventually } from "../helpers/eventually";
import { freePort } from "../helpers/ports";

describe("Moleculer's metrics in the Prometheus format", () => {
  let broker: ServiceBroker;
  let port: number;

  beforeAll(async () => {
    port = await freePort();
    broker = new ServiceBroker({
      nodeID: 'node-"1"',
      namespace: "ns\\x",
      logger: false,
      transporter: null,
      metrics: {
        enabled: true,
        collectProcessMetrics: true,
        // No collection between the two reads below.
        collectInterval: 3600,
        reporter: [{ type: "Prometheus", options: { port, host: "127.0.0.1" } }],
      },
    });
    await broker.start();
    const m = broker.metrics;
    m.register({ type: "counter", name: "test.calls-total", labelNames: ["route"], description: "Calls", rate: true });
    m.register({ type: "gauge", name: "test.depth", labelNames: [], unit: "item" });
    m.register({ type: "histogram", name: "test.latency", labelNames: ["action"], buckets: [1, 5, 10], quantiles: [0.5, 0.99] });
    m.register({ type: "info", name: "test.version", labelNames: [] });
    m.increment("test.calls-total", { route: '/a"b\\c' }, 3);
    m.increment("test.calls-total", { route: "/d" });
    m.set("test.depth", 7);
    for (const v of [0.5, 3, 8, 40]) m.observe("test.latency", v, { action: "x.y" });
    m.set("test.version", "1.2.3");
  });
  afterAll(() => broker?.stop());

  it("are the lines Moleculer's Prometheus reporter serves", async () => {
    // The CPU metrics arrive a moment after the start (Moleculer measures them over an interval).
    await eventually(() => expect(moleculerPrometheusText(broker)).toContain("os_cpu_utilization{"), { timeoutMs: 10_000, intervalMs: 50 });
    const served = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    const ours = moleculerPrometheusText(broker);
    expect(ours).toBe(served);
    expect(ours).toContain('test_calls_total{namespace="ns\\\\x",nodeID="node-\\"1\\"",route="/a\\"b\\\\c"} 3');
    expect(ours).toContain('test_latency_bucket{namespace="ns\\\\x",nodeID="node-\\"1\\"",action="x.y",le="+Inf"} 4');
    expect(ours).toContain("# TYPE test_version gauge");
    expect(ours).toMatch(/^process_memory_heap_size_used\{[^}]*nodeID=/m);
  });
});
