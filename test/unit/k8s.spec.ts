/**
 * Keeps k8s/ deployable and in step with the code. Both overlays are rendered as an operator
 * applies them (`kubectl kustomize`), every object is validated against the Kubernetes API's
 * schemas (kubernetes-models, in a Node process of its own: the package is ESM-only), and then what
 * the design asks of each is checked: the service groups and their SERVICES, secrets only from
 * Secrets, probes, resources, the security context, grace periods, disruption budgets,
 * autoscalers, the migration Job, Services and the Ingress, who may reach whom (the
 * NetworkPolicies, evaluated for a few kinds of peer), NATS as a 3-server JetStream cluster that
 * requires a login, and the volumes. Every variable a manifest sets is one lib/config.ts reads.
 */
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseAllDocuments } from "yaml";
import { ALL_SERVICES, loadConfig, VARIABLES } from "../../lib/config";

const ROOT = path.join(__dirname, "../..");
const K8S = path.join(ROOT, "k8s");
const NODE = path.join(ROOT, "node_modules/.bin/node");
const KUBECTL = process.env.KUBECTL ?? "kubectl";

/** The service groups of the design: one workload each, named as here, with SERVICES as here. */
const GROUPS: Record<string, { kind: "Deployment" | "StatefulSet"; services: string[] }> = {
  gateway: { kind: "Deployment", services: ["gateway"] },
  tracking: { kind: "Deployment", services: ["tracking"] },
  notifier: { kind: "Deployment", services: ["notifier"] },
  exports: { kind: "StatefulSet", services: ["exports"] },
  contacts: { kind: "Deployment", services: ["contacts"] },
  campaigns: { kind: "Deployment", services: ["campaigns"] },
  inbox: { kind: "Deployment", services: ["inbox"] },
  media: { kind: "StatefulSet", services: ["media"] },
  "auth-profiles": { kind: "Deployment", services: ["auth", "profiles"] },
};
const DEMO_ONLY: typeof GROUPS = { simulator: { kind: "Deployment", services: ["simulator"] } };
const AUTOSCALED = ["campaigns", "gateway", "notifier", "tracking"];
const SECRET_VARIABLES = [
  "DATABASE_URL",
  "INTERNAL_TOKEN",
  "EXPORT_SIGNING_KEY",
  "SECRETS_KEY",
  "SECRETS_KEY_PREVIOUS",
  "NATS_USER",
  "NATS_PASSWORD",
  "NATS_TOKEN",
];
const known = new Set(Object.keys(VARIABLES));

function render(overlay: string): any[] {
  let out: string;
  try {
    out = execFileSync(KUBECTL, ["kustomize", path.join(K8S, "overlays", overlay)], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (e) {
    const err = e as NodeJS.ErrnoException & { stderr?: string };
    if (err.code === "ENOENT")
      throw new Error(`kubectl is needed to render k8s/overlays/${overlay} (\`kubectl kustomize\`, offline): install it or set KUBECTL to its path`);
    throw new Error(`kubectl kustomize k8s/overlays/${overlay} failed: ${err.stderr ?? err.message}`);
  }
  return parseAllDocuments(out)
    .map((d) => d.toJS())
    .filter(Boolean);
}

/** The pod template of a Deployment, StatefulSet or Job. */
const podSpec = (w: any) => w.spec.template.spec;
const isProduct = (c: any) => /(^|\/)partner-gateway(:|$)/.test(c.image);
const workloadsOf = (objs: any[]) => objs.filter((o) => ["Deployment", "StatefulSet", "Job"].includes(o.kind));
const productWorkloads = (objs: any[]) => objs.filter((o) => ["Deployment", "StatefulSet"].includes(o.kind) && podSpec(o).containers.some(isProduct));
const envOf = (c: any, name: string) => (c.env ?? []).find((e: any) => e.name === name);
const find = (objs: any[], kind: string, name: string) => objs.find((o) => o.kind === kind && o.metadata.name === name);
const configMap = (objs: any[]) => find(objs, "ConfigMap", "partner-gateway");

/** A variable's value in a container: its own env, else the shared ConfigMap, else lib/config.ts's default. */
function valueIn(objs: any[], c: any, name: string): unknown {
  const own = envOf(c, name);
  if (own && "value" in own) return own.value;
  const cm = configMap(objs).data as Record<string, string>;
  if (name in cm) return cm[name];
  return (VARIABLES as Record<string, { default: unknown }>)[name]?.default;
}

/** Bytes of a Kubernetes quantity (memory) or millicores (cpu). */
function quantity(q: string | number, kind: "cpu" | "memory"): number {
  const m = /^(\d+(?:\.\d+)?)(m|Ki|Mi|Gi|Ti|k|M|G)?$/.exec(String(q));
  if (!m) throw new Error(`unreadable quantity ${q}`);
  const n = Number(m[1]);
  const unit = m[2] ?? "";
  if (kind === "cpu") return unit === "m" ? n : n * 1000;
  const f: Record<string, number> = { "": 1, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4, k: 1e3, M: 1e6, G: 1e9 };
  return n * f[unit]!;
}

interface Selector {
  matchLabels?: Record<string, string>;
  matchExpressions?: Array<{ key: string; operator: string; values?: string[] }>;
}
function selects(sel: Selector | undefined, labels: Record<string, string>): boolean {
  if (!sel) return true;
  for (const [k, v] of Object.entries(sel.matchLabels ?? {})) if (labels[k] !== v) return false;
  for (const e of sel.matchExpressions ?? []) {
    const has = e.key in labels;
    if (e.operator === "In" && !(has && e.values!.includes(labels[e.key]!))) return false;
    if (e.operator === "NotIn" && has && e.values!.includes(labels[e.key]!)) return false;
    if (e.operator === "Exists" && !has) return false;
    if (e.operator === "DoesNotExist" && has) return false;
  }
  return true;
}

/** Who connects: a client outside the cluster, or a pod (with its labels) in this namespace or another. */
type Peer = { outside: true } | { pod: Record<string, string>; namespace?: Record<string, string> };
const NAMESPACE = { "kubernetes.io/metadata.name": "partner-gateway" };

/** Whether the NetworkPolicies let `peer` open a TCP connection to `port` of a pod with `labels`. */
function reachable(objs: any[], labels: Record<string, string>, port: number, peer: Peer): boolean {
  const policies = objs.filter(
    (o) => o.kind === "NetworkPolicy" && (o.spec.policyTypes ?? ["Ingress"]).includes("Ingress") && selects(o.spec.podSelector, labels),
  );
  if (policies.length === 0) return true;
  return policies.some((p) =>
    (p.spec.ingress ?? []).some((rule: any) => {
      const portOk = !rule.ports || rule.ports.some((pp: any) => pp.port === port && (pp.protocol ?? "TCP") === "TCP");
      const fromOk =
        !rule.from ||
        rule.from.some((f: any) => {
          if (f.ipBlock) return "outside" in peer;
          if ("outside" in peer) return false;
          const ns = peer.namespace ?? NAMESPACE;
          const nsOk = f.namespaceSelector ? selects(f.namespaceSelector, ns) : ns === NAMESPACE;
          return nsOk && selects(f.podSelector, peer.pod);
        });
      return portOk && fromOk;
    }),
  );
}

const overlays = { production: [] as any[], demo: [] as any[] };
beforeAll(() => {
  overlays.production = render("production");
  overlays.demo = render("demo");
});

describe.each(["production", "demo"] as const)("the %s overlay", (overlay) => {
  const objs = () => overlays[overlay];
  const groups = overlay === "demo" ? { ...GROUPS, ...DEMO_ONLY } : GROUPS;

  it("renders objects that are all valid against the Kubernetes schemas", () => {
    expect(objs().length).toBeGreaterThan(30);
    const out = execFileSync(NODE, [path.join(ROOT, "test/helpers/k8s-validate.mjs")], { cwd: ROOT, input: JSON.stringify(objs()), encoding: "utf8" });
    expect(JSON.parse(out)).toEqual([]);
    for (const o of objs())
      if (o.kind !== "Namespace")
        expect({ o: `${o.kind}/${o.metadata.name}`, ns: o.metadata.namespace }).toEqual({
          o: `${o.kind}/${o.metadata.name}`,
          ns: `partner-gateway${overlay === "demo" ? "-demo" : ""}`,
        });
  });

  it("runs one workload per service group, with SERVICES naming that group, and every service of the design", () => {
    const workloads = productWorkloads(objs());
    expect(workloads.map((w) => w.metadata.name).sort()).toEqual(Object.keys(groups).sort());
    const run: string[] = [];
    for (const w of workloads) {
      const [c, ...others] = podSpec(w).containers;
      expect(others).toEqual([]);
      const services = String(envOf(c, "SERVICES")?.value).split(",");
      expect({ name: w.metadata.name, kind: w.kind, services }).toEqual({ name: w.metadata.name, ...groups[w.metadata.name]! });
      run.push(...services);
    }
    for (const s of run) expect(ALL_SERVICES).toContain(s);
    const expected = ALL_SERVICES.filter((s) => overlay === "demo" || s !== "simulator");
    expect([...new Set(run)].sort()).toEqual([...expected].sort());
    expect(run).toHaveLength(new Set(run).size);
  });

  it("sets only variables the service reads, and takes every secret from a Secret", () => {
    const cm = configMap(objs());
    for (const name of Object.keys(cm.data)) {
      expect({ name, known: known.has(name) }).toEqual({ name, known: true });
      expect({ name, secret: SECRET_VARIABLES.includes(name) }).toEqual({ name, secret: false });
    }
    expect(cm.data.TRANSPORTER).toMatch(/^nats:\/\/nats:4222$/);
    for (const w of workloadsOf(objs()))
      for (const c of podSpec(w).containers.filter(isProduct)) {
        for (const e of c.env ?? []) {
          expect({ w: w.metadata.name, name: e.name, known: known.has(e.name) }).toEqual({ w: w.metadata.name, name: e.name, known: true });
          if (SECRET_VARIABLES.includes(e.name))
            expect({ w: w.metadata.name, name: e.name, ref: e.valueFrom?.secretKeyRef?.name }).toMatchObject({ ref: expect.any(String) });
        }
      }
    const nats = find(objs(), "StatefulSet", "nats").spec.template.spec.containers[0];
    for (const w of productWorkloads(objs())) {
      const c = podSpec(w).containers[0];
      expect(c.envFrom).toEqual([{ configMapRef: { name: "partner-gateway" } }]);
      expect({ w: w.metadata.name, db: envOf(c, "DATABASE_URL")?.valueFrom?.secretKeyRef }).toEqual({
        w: w.metadata.name,
        db: { name: "partner-gateway-db", key: "url" },
      });
      // The same login NATS requires.
      for (const v of ["NATS_USER", "NATS_PASSWORD"])
        expect({ w: w.metadata.name, v, ref: envOf(c, v)?.valueFrom?.secretKeyRef }).toEqual({
          w: w.metadata.name,
          v,
          ref: envOf(nats, v).valueFrom.secretKeyRef,
        });
      expect(envOf(c, "NODE_ID")?.valueFrom?.fieldRef?.fieldPath).toBe("metadata.name");
    }
    const c = (name: string) => podSpec(productWorkloads(objs()).find((w) => w.metadata.name === name)).containers[0];
    expect(envOf(c("tracking"), "INTERNAL_TOKEN").valueFrom.secretKeyRef).toEqual({ name: "partner-gateway-internal", key: "token" });
    expect(envOf(c("exports"), "EXPORT_SIGNING_KEY").valueFrom.secretKeyRef).toEqual({ name: "partner-gateway-exports", key: "signing-key" });
    expect(envOf(c("auth-profiles"), "SECRETS_KEY").valueFrom.secretKeyRef).toEqual({ name: "partner-gateway-secrets", key: "secrets-key" });
    // Webhook signing secrets are sealed under the same key.
    expect(envOf(c("notifier"), "SECRETS_KEY").valueFrom.secretKeyRef).toEqual({ name: "partner-gateway-secrets", key: "secrets-key" });
  });

  it("starts every node: lib/config.ts accepts each container's environment (ConfigMap, its own values, its Secrets)", () => {
    // Values of the right shape for each Secret key the manifests name (operators create the real ones).
    const secrets: Record<string, string> = {
      "partner-gateway-db/url": "postgres://pgw:pw@postgres:5432/pgw",
      "partner-gateway-nats/user": "pgw",
      "partner-gateway-nats/password": "p".repeat(24),
      "partner-gateway-internal/token": "t".repeat(24),
      "partner-gateway-exports/signing-key": "k".repeat(32),
      "partner-gateway-secrets/secrets-key": Buffer.alloc(32, 1).toString("base64"),
    };
    for (const w of workloadsOf(objs()))
      for (const c of podSpec(w).containers.filter(isProduct)) {
        const env: Record<string, string> = { ...configMap(objs()).data };
        for (const e of c.env ?? []) {
          const ref = e.valueFrom?.secretKeyRef;
          if ("value" in e) env[e.name] = String(e.value);
          else if (ref && `${ref.name}/${ref.key}` in secrets) env[e.name] = secrets[`${ref.name}/${ref.key}`]!;
          else if (ref && !ref.optional) throw new Error(`${w.metadata.name}: ${e.name} from an unknown Secret key ${ref.name}/${ref.key}`);
          else if (e.valueFrom?.fieldRef?.fieldPath === "metadata.name") env[e.name] = `${w.metadata.name}-7d9f8b6c5-x2x4q`;
        }
        const runsServices = w.kind !== "Job";
        expect({
          w: w.metadata.name,
          config: (() => {
            try {
              loadConfig(env, {}, { runsServices });
              return "ok";
            } catch (e) {
              return (e as Error).message;
            }
          })(),
        }).toEqual({ w: w.metadata.name, config: "ok" });
      }
  });

  it("probes every node: startup, readiness on /healthz/ready, liveness on /healthz/live, on a port the container declares and the node serves", () => {
    for (const w of productWorkloads(objs())) {
      const c = podSpec(w).containers[0];
      const ports = new Map<string, number>(c.ports.map((p: any) => [p.name, p.containerPort]));
      const services = String(envOf(c, "SERVICES").value).split(",");
      // The gateway serves PORT, tracking the ingress's INTERNAL_PORT, any other node its ops listener on PORT.
      const served = services.includes("gateway")
        ? valueIn(objs(), c, "PORT")
        : services.includes("tracking")
          ? valueIn(objs(), c, "INTERNAL_PORT")
          : valueIn(objs(), c, "PORT");
      for (const [probe, p] of [
        ["startupProbe", "/healthz/live"],
        ["readinessProbe", "/healthz/ready"],
        ["livenessProbe", "/healthz/live"],
      ] as const) {
        const get = c[probe]?.httpGet;
        expect({ w: w.metadata.name, probe, path: get?.path }).toEqual({ w: w.metadata.name, probe, path: p });
        expect({ w: w.metadata.name, probe, port: ports.get(get.port) }).toEqual({ w: w.metadata.name, probe, port: Number(served) });
      }
      // Migrations run before the listener opens: the startup probe waits minutes, not seconds.
      expect(c.startupProbe.periodSeconds * c.startupProbe.failureThreshold).toBeGreaterThanOrEqual(120);
    }
  });

  it("gives every container requests and limits (limits at least the requests)", () => {
    for (const w of workloadsOf(objs()))
      for (const c of podSpec(w).containers) {
        const r = c.resources ?? {};
        for (const kind of ["cpu", "memory"] as const) {
          const what = { w: w.metadata.name, c: c.name, kind };
          expect({ ...what, request: r.requests?.[kind] !== undefined, limit: r.limits?.[kind] !== undefined }).toEqual({
            ...what,
            request: true,
            limit: true,
          });
          expect(quantity(r.limits[kind], kind)).toBeGreaterThanOrEqual(quantity(r.requests[kind], kind));
        }
      }
  });

  it("runs every pod as non-root, on a read-only root filesystem, with no capabilities and the RuntimeDefault seccomp profile", () => {
    for (const w of workloadsOf(objs())) {
      const spec = podSpec(w);
      const who = w.metadata.name;
      expect({ who, pod: spec.securityContext }).toMatchObject({ who, pod: { runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } } });
      expect(spec.securityContext.runAsUser).toBeGreaterThan(0);
      expect(spec.automountServiceAccountToken).toBe(false);
      for (const c of [...(spec.initContainers ?? []), ...spec.containers]) {
        expect({ who, c: c.name, sc: c.securityContext }).toMatchObject({
          who,
          c: c.name,
          sc: { readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, runAsNonRoot: true, capabilities: { drop: ["ALL"] } },
        });
        expect(c.securityContext.privileged ?? false).toBe(false);
        expect(c.securityContext.capabilities.add ?? []).toEqual([]);
        // A read-only root: what the product writes goes to a volume (TMPDIR included).
        const volumes = new Set([...(spec.volumes ?? []).map((v: any) => v.name), ...(w.spec.volumeClaimTemplates ?? []).map((v: any) => v.metadata.name)]);
        for (const m of c.volumeMounts ?? []) expect({ who, mount: m.name, declared: volumes.has(m.name) }).toEqual({ who, mount: m.name, declared: true });
        if (isProduct(c)) expect((c.volumeMounts ?? []).map((m: any) => m.mountPath)).toContain("/tmp");
      }
    }
  });

  it("stops gracefully: preStop, then a grace period longer than preStop and the node's own stop", () => {
    for (const w of productWorkloads(objs())) {
      const c = podSpec(w).containers[0];
      const [cmd, seconds] = c.lifecycle?.preStop?.exec?.command ?? [];
      expect({ w: w.metadata.name, cmd }).toEqual({ w: w.metadata.name, cmd: "sleep" });
      // SHUTDOWN_TIMEOUT_MS bounds the node's own stop (app/start-app.ts).
      const stopMs = Number(seconds) * 1000 + Number(valueIn(objs(), c, "SHUTDOWN_TIMEOUT_MS"));
      const graceMs = Number(podSpec(w).terminationGracePeriodSeconds) * 1000;
      expect({ w: w.metadata.name, longer: graceMs > stopMs + 5000 }).toEqual({ w: w.metadata.name, longer: true });
    }
  });

  it("covers every workload with a PodDisruptionBudget and autoscales gateway, tracking, notifier and campaigns", () => {
    const pdbs = objs().filter((o) => o.kind === "PodDisruptionBudget");
    for (const w of workloadsOf(objs()).filter((x) => x.kind !== "Job")) {
      const labels = w.spec.template.metadata.labels;
      expect({ w: w.metadata.name, pdb: pdbs.filter((p) => selects(p.spec.selector, labels)).length }).toEqual({ w: w.metadata.name, pdb: 1 });
    }
    const hpas = objs().filter((o) => o.kind === "HorizontalPodAutoscaler");
    expect(hpas.map((h) => h.spec.scaleTargetRef.name).sort()).toEqual(AUTOSCALED);
    for (const h of hpas) {
      const target = find(objs(), h.spec.scaleTargetRef.kind, h.spec.scaleTargetRef.name);
      expect(target).toBeDefined();
      // The autoscaler owns the count: a replicas field would reset it at every apply.
      expect({ w: target.metadata.name, replicas: target.spec.replicas }).toEqual({ w: target.metadata.name, replicas: undefined });
      expect(h.spec.minReplicas).toBeGreaterThanOrEqual(1);
      expect(h.spec.maxReplicas).toBeGreaterThan(h.spec.minReplicas);
      expect(h.spec.metrics[0].resource.name).toBe("cpu");
    }
  });

  it("migrates in a Job with the migrate-only entry point", () => {
    const job = find(objs(), "Job", "migrate");
    const c = job.spec.template.spec.containers[0];
    expect(isProduct(c)).toBe(true);
    expect(c.command).toBeUndefined(); // the image's tini entrypoint stays
    expect(c.args).toEqual(["node", "dist/scripts/migrate.js"]);
    expect(fs.existsSync(path.join(ROOT, "scripts/migrate.ts"))).toBe(true);
    expect(envOf(c, "DATABASE_URL").valueFrom.secretKeyRef).toEqual({ name: "partner-gateway-db", key: "url" });
  });

  it("routes the Ingress to the gateway's partner port only, and keeps the internal ingress on its own ClusterIP Service", () => {
    const services = objs().filter((o) => o.kind === "Service");
    const pods = workloadsOf(objs()).map((w) => ({ labels: w.spec.template.metadata.labels, ports: podSpec(w).containers.flatMap((c: any) => c.ports ?? []) }));
    for (const s of services) {
      const backends = pods.filter((p) => selects({ matchLabels: s.spec.selector }, p.labels));
      expect({ s: s.metadata.name, backends: backends.length > 0 }).toEqual({ s: s.metadata.name, backends: true });
      for (const port of s.spec.ports)
        expect({
          s: s.metadata.name,
          port: port.name,
          served: backends.every((b) => b.ports.some((cp: any) => cp.name === port.targetPort || cp.containerPort === port.targetPort)),
        }).toEqual({
          s: s.metadata.name,
          port: port.name,
          served: true,
        });
    }
    const ingresses = objs().filter((o) => o.kind === "Ingress");
    expect(ingresses).toHaveLength(1);
    const paths = ingresses[0].spec.rules.flatMap((r: any) => r.http.paths);
    for (const p of paths) {
      expect(p.backend.service).toEqual({ name: "gateway", port: { name: "http" } });
      expect(p.path).toMatch(/^\/(api\/partner-gateway\/v1|docs)$/);
    }
    const gw = find(objs(), "Service", "gateway");
    expect(gw.spec.ports.map((p: any) => p.targetPort)).toEqual(["http"]);
    expect(podSpec(find(objs(), "Deployment", "gateway")).containers[0].ports).toEqual([
      { name: "http", containerPort: Number(valueIn(objs(), podSpec(find(objs(), "Deployment", "gateway")).containers[0], "PORT")) },
    ]);
    const internal = find(objs(), "Service", "tracking-ingress");
    expect(internal.spec.type).toBe("ClusterIP");
    expect(internal.spec.selector).toEqual({ app: "tracking" });
    expect(internal.spec.ports).toEqual([{ name: "ingress", port: 3001, targetPort: "ingress" }]);
  });

  it("lets only the gateway take outside traffic, only upstreams reach the ingress, only our pods reach NATS and PostgreSQL", () => {
    const o = objs();
    const labelsOf = (kind: string, name: string) => find(o, kind, name).spec.template.metadata.labels as Record<string, string>;
    const outside: Peer = { outside: true };
    const stranger: Peer = { pod: { app: "debug" } }; // a pod in the namespace that is not the product's
    const otherNamespace: Peer = { pod: { app: "x" }, namespace: { "kubernetes.io/metadata.name": "elsewhere" } };
    const upstream: Peer = { pod: { app: "sms-upstream", "partner-gateway/upstream": "true" }, namespace: { "kubernetes.io/metadata.name": "upstreams" } };
    // Outside traffic: the gateway's partner port, nothing else of any pod.
    for (const w of workloadsOf(o))
      for (const p of podSpec(w).containers.flatMap((c: any) => c.ports ?? [])) {
        const expected = w.metadata.name === "gateway" && p.name === "http";
        expect({ w: w.metadata.name, port: p.containerPort, outside: reachable(o, w.spec.template.metadata.labels, p.containerPort, outside) }).toEqual({
          w: w.metadata.name,
          port: p.containerPort,
          outside: expected,
        });
      }
    // The internal ingress: upstreams only.
    const tracking = labelsOf("Deployment", "tracking");
    expect(reachable(o, tracking, 3001, upstream)).toBe(true);
    for (const peer of [outside, stranger, otherNamespace, { pod: labelsOf("Deployment", "gateway") }]) expect(reachable(o, tracking, 3001, peer)).toBe(false);
    // NATS: every node of the product, nobody else; the routes only between NATS servers.
    const nats = labelsOf("StatefulSet", "nats");
    for (const w of productWorkloads(o))
      expect({ w: w.metadata.name, nats: reachable(o, nats, 4222, { pod: w.spec.template.metadata.labels }) }).toEqual({ w: w.metadata.name, nats: true });
    for (const peer of [outside, stranger, otherNamespace, upstream]) expect(reachable(o, nats, 4222, peer)).toBe(false);
    expect(reachable(o, nats, 6222, { pod: nats })).toBe(true);
    expect(reachable(o, nats, 6222, { pod: labelsOf("Deployment", "gateway") })).toBe(false);
    // PostgreSQL in the namespace (the demo's): the product's pods, the migration Job included.
    const postgres = { app: "postgres", "app.kubernetes.io/part-of": "partner-gateway" };
    expect(reachable(o, postgres, 5432, { pod: labelsOf("Deployment", "gateway") })).toBe(true);
    expect(reachable(o, postgres, 5432, { pod: labelsOf("Job", "migrate") })).toBe(true);
    for (const peer of [outside, stranger, otherNamespace, upstream]) expect(reachable(o, postgres, 5432, peer)).toBe(false);
    if (overlay === "demo") expect(labelsOf("StatefulSet", "postgres")).toMatchObject(postgres);
  });

  it("runs NATS as a 3-server JetStream cluster that requires the nodes' login, with the max_payload the product needs", () => {
    const sts = find(objs(), "StatefulSet", "nats");
    expect(sts.spec.replicas).toBe(3);
    const conf = find(objs(), "ConfigMap", "nats-config").data["nats.conf"] as string;
    expect(conf).toMatch(/authorization\s*\{[^}]*user:\s*\$NATS_USER[^}]*password:\s*\$NATS_PASSWORD/);
    const maxPayload = /max_payload:\s*(\d+)MB/.exec(conf);
    expect(Number(maxPayload![1]) * 1024 * 1024).toBeGreaterThanOrEqual(Number(valueIn(objs(), {}, "NATS_MAX_PAYLOAD")));
    const storeDir = /jetstream\s*\{[^}]*store_dir:\s*(\S+)/.exec(conf)?.[1];
    const c = sts.spec.template.spec.containers[0];
    const storeMount = c.volumeMounts.find((m: any) => m.mountPath === storeDir);
    expect(sts.spec.volumeClaimTemplates.map((v: any) => v.metadata.name)).toContain(storeMount?.name);
    // Each server routes to all three by their stable names.
    for (const i of [0, 1, 2]) expect(conf).toContain(`nats://nats-${i}.${sts.spec.serviceName}:6222`);
    expect(find(objs(), "Service", sts.spec.serviceName).spec).toMatchObject({ clusterIP: "None", publishNotReadyAddresses: true });
    for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) expect(c[probe]?.httpGet?.port).toBe("monitor");
    expect(envOf(c, "NATS_USER").valueFrom.secretKeyRef).toEqual({ name: "partner-gateway-nats", key: "user" });
  });

  it("gives exports and media a persistent volume each, contacts an imports volume, and keeps upload budgets under their volumes' size limits", () => {
    for (const [name, variable] of [
      ["exports", "EXPORT_DIR"],
      ["media", "MEDIA_DIR"],
    ] as const) {
      const sts = find(objs(), "StatefulSet", name);
      const c = sts.spec.template.spec.containers[0];
      const mount = c.volumeMounts.find((m: any) => m.mountPath === envOf(c, variable)?.value);
      expect({ name, claim: sts.spec.volumeClaimTemplates.some((v: any) => v.metadata.name === mount?.name) }).toEqual({ name, claim: true });
    }
    for (const [name, variable, dir] of [
      ["gateway", "SPOOL_MAX_BYTES", "/tmp"],
      ["contacts", "IMPORT_QUEUE_MAX_BYTES", null],
    ] as const) {
      const d = find(objs(), "Deployment", name);
      const c = d.spec.template.spec.containers[0];
      const mountPath = dir ?? envOf(c, "IMPORT_DIR").value;
      const volume = d.spec.template.spec.volumes.find((v: any) => v.name === c.volumeMounts.find((m: any) => m.mountPath === mountPath)?.name);
      expect({ name, budget: Number(valueIn(objs(), c, variable)) < quantity(volume.emptyDir.sizeLimit, "memory") }).toEqual({ name, budget: true });
    }
  });
});

it("uses the production image in production", () => {
  for (const w of workloadsOf(overlays.production))
    for (const c of podSpec(w).containers.filter(isProduct)) expect(c.image).toBe("registry.example.com/partner-gateway:1.0.0");
});

it("keeps the simulator out of the base and out of production", () => {
  const simulator = (objs: any[]) => productWorkloads(objs).some((w) => String(envOf(podSpec(w).containers[0], "SERVICES").value).includes("simulator"));
  expect(simulator(overlays.production)).toBe(false);
  expect(simulator(overlays.demo)).toBe(true);
  expect(configMap(overlays.production).data.UPSTREAM_MODE).toBe("http");
  expect(configMap(overlays.demo).data.UPSTREAM_MODE).toBe("simulator");
});

it("lists every base manifest in the kustomization", () => {
  const kust = parseAllDocuments(fs.readFileSync(path.join(K8S, "base/kustomization.yaml"), "utf8"))[0]!.toJS() as { resources: string[] };
  const files = fs.readdirSync(path.join(K8S, "base")).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml");
  expect([...kust.resources].sort()).toEqual(files.sort());
});

it("writes a NATS configuration the NATS server accepts (where nats-server is installed)", () => {
  const server = ["/usr/sbin/nats-server", "/usr/local/bin/nats-server", "/usr/bin/nats-server"].find((p) => fs.existsSync(p));
  if (!server) {
    console.warn("nats-server not installed: its check of nats.conf is skipped");
    return;
  }
  const conf = (find(overlays.production, "ConfigMap", "nats-config").data["nats.conf"] as string)
    .replace(/pid_file: \S+/, "pid_file: /dev/null")
    .replace(/store_dir: \S+/, `store_dir: ${fs.mkdtempSync(path.join(os.tmpdir(), "nats-js-"))}`);
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "nats-conf-")), "nats.conf");
  fs.writeFileSync(file, conf);
  const run = spawnSync(server, ["-c", file, "-t"], { env: { ...process.env, POD_NAME: "nats-0", NATS_USER: "u", NATS_PASSWORD: "p" }, encoding: "utf8" });
  expect({ status: run.status, said: `${run.stdout}${run.stderr}`.trim() }).toEqual({ status: 0, said: expect.stringMatching(/is valid/) });
});
