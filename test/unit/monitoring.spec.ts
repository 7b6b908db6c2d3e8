/**
 * k8s/base/monitoring: the alert rules and the Grafana dashboard name only metrics the code
 * registers, so they cannot rot when a metric is renamed; every alert the operations issue asks for
 * is there, with docs/operating.md saying what it means and what to do.
 */
import fs from "node:fs";
import path from "node:path";
import { collectDefaultMetrics, Registry } from "prom-client";
import { parse } from "yaml";

const ROOT = path.join(__dirname, "../..");
const MONITORING = path.join(ROOT, "k8s/base/monitoring");

/** Every metric name the sources register (`name: "..."` next to a prom-client metric), and Node's defaults. */
function registeredNames(): Set<string> {
  const names = new Set<string>();
  const walk = (dir: string) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (p.endsWith(".ts")) for (const m of fs.readFileSync(p, "utf8").matchAll(/\bname: "([a-z_][a-z0-9_]*)",\s*help:/g)) names.add(m[1]!);
    }
  };
  walk(path.join(ROOT, "app"));
  walk(path.join(ROOT, "lib"));
  walk(path.join(ROOT, "services"));
  const defaults = new Registry();
  collectDefaultMetrics({ register: defaults });
  for (const m of defaults.getMetricsAsArray()) names.add((m as unknown as { name: string }).name);
  return names;
}

/** The metric names a PromQL expression reads (identifiers followed by a selector, a range or the end of a call). */
function metricsIn(expr: string): string[] {
  const functions = new Set(["sum", "max", "min", "rate", "increase", "histogram_quantile", "clamp_min", "by", "le", "avg"]);
  const out = [...expr.replace(/"[^"]*"/g, '""').matchAll(/\b([a-z_][a-z0-9_]*)\b(?!\s*\()/g)].map((m) => m[1]!);
  return out.filter((n) => !functions.has(n) && /_/.test(n) && !/^(status|route|outcome|action|pool|state|le|instance)$/.test(n));
}

const stem = (n: string) => n.replace(/_(bucket|count|sum)$/, "");

const alerts = parse(fs.readFileSync(path.join(MONITORING, "alerts.yaml"), "utf8")) as {
  groups: { name: string; rules: { alert: string; expr: string; for: string; labels: { severity: string }; annotations: Record<string, string> }[] }[];
};
const rules = alerts.groups.flatMap((g) => g.rules);
const dashboard = JSON.parse(fs.readFileSync(path.join(MONITORING, "dashboard.json"), "utf8")) as {
  panels: { title: string; targets: { expr: string }[] }[];
};

describe("alert rules and dashboard", () => {
  const known = registeredNames();

  it("finds the metrics of the code (the check itself reads names)", () => {
    for (const n of [
      "http_requests_total",
      "webhook_outbox_oldest_due_age_seconds",
      "campaign_sending_still_seconds",
      "db_pool_waiting",
      "nodejs_eventloop_lag_p99_seconds",
    ]) {
      expect(known.has(n)).toBe(true);
    }
    expect(metricsIn('sum(rate(http_requests_total{status=~"5.."}[5m])) / clamp_min(sum(rate(http_requests_total[5m])), 1e-9)')).toEqual([
      "http_requests_total",
      "http_requests_total",
    ]);
  });

  it("covers outbox lag, webhook failure ratio, campaign stalled, export queue age and the 5xx ratio, each with severity, duration and words", () => {
    const byMetric = (m: string) => rules.filter((r) => r.expr.includes(m)).map((r) => r.alert);
    expect(byMetric("webhook_outbox_oldest_due_age_seconds")).toHaveLength(1);
    expect(byMetric("webhook_attempts_total")).toHaveLength(1);
    expect(byMetric("campaign_sending_still_seconds")).toHaveLength(1);
    expect(byMetric("export_queue_oldest_age_seconds")).toHaveLength(1);
    expect(rules.filter((r) => /http_requests_total\{status=~"5\.\."\}/.test(r.expr))).toHaveLength(1);
    for (const r of rules) {
      expect({ alert: r.alert, severity: ["warning", "critical"].includes(r.labels.severity), for: /^\d+m$/.test(r.for) }).toEqual({
        alert: r.alert,
        severity: true,
        for: true,
      });
      expect(r.annotations.summary?.length).toBeGreaterThan(10);
      expect(r.annotations.description?.length).toBeGreaterThan(10);
    }
  });

  it("names only registered metrics, in every alert and every panel", () => {
    const used = [
      ...rules.map((r) => ({ where: r.alert, expr: r.expr })),
      ...dashboard.panels.flatMap((p) => p.targets.map((t) => ({ where: p.title, expr: t.expr }))),
    ];
    expect(used.length).toBeGreaterThan(15);
    for (const u of used) {
      const names = metricsIn(u.expr);
      expect({ where: u.where, some: names.length > 0 }).toEqual({ where: u.where, some: true });
      for (const n of names) expect({ where: u.where, metric: n, registered: known.has(stem(n)) }).toEqual({ where: u.where, metric: n, registered: true });
    }
  });

  it("has docs/operating.md explain every alert", () => {
    const page = fs.readFileSync(path.join(ROOT, "docs/operating.md"), "utf8");
    const operating = page.slice(page.indexOf("## Operating it"));
    expect(page.indexOf("## Operating it")).toBeGreaterThan(0);
    for (const r of rules) expect({ alert: r.alert, explained: operating.includes(`\`${r.alert}\``) }).toEqual({ alert: r.alert, explained: true });
  });
});
