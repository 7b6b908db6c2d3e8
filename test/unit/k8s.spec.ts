/**
 * Keeps k8s/ in step with the code: every variable a manifest sets is one the service reads, every
 * SERVICES value names existing services, and the overlay's resources come from the base.
 */
import fs from "node:fs";
import path from "node:path";
import { parseAllDocuments } from "yaml";
import { ALL_SERVICES, VARIABLES } from "../../lib/config";

const K8S = path.join(__dirname, "../../k8s");
const docsIn = (dir: string) =>
  fs
    .readdirSync(dir)
    .filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml")
    .flatMap((f) => parseAllDocuments(fs.readFileSync(path.join(dir, f), "utf8")).map((d) => d.toJS() as any));

const base = docsIn(path.join(K8S, "base"));
/** The containers of a workload that run this product (not NATS). */
const productContainers = (d: any): any[] => d.spec.template.spec.containers.filter((c: any) => c.image === "partner-gateway");
const nodes = base.filter((d) => ["Deployment", "StatefulSet"].includes(d.kind) && productContainers(d).length > 0);
const secretRef = (c: any, name: string) => (c.env ?? []).find((e: any) => e.name === name)?.valueFrom?.secretKeyRef;
const known = new Set(Object.keys(VARIABLES));

it("sets only variables the service reads", () => {
  const configMap = base.find((d) => d.kind === "ConfigMap" && d.metadata.name === "partner-gateway");
  for (const name of Object.keys(configMap.data)) expect({ name, known: known.has(name) }).toEqual({ name, known: true });
  for (const d of base.filter((x) => ["Deployment", "StatefulSet"].includes(x.kind))) {
    for (const c of productContainers(d)) {
      for (const e of c.env ?? []) expect({ name: e.name, known: known.has(e.name) }).toEqual({ name: e.name, known: true });
    }
  }
});

it("runs every service somewhere, and only services that exist", () => {
  const run = base
    .filter((d) => ["Deployment", "StatefulSet"].includes(d.kind))
    .flatMap((d) =>
      d.spec.template.spec.containers.flatMap((c: any) =>
        (c.env ?? []).filter((e: any) => e.name === "SERVICES").flatMap((e: any) => String(e.value).split(",")),
      ),
    );
  for (const s of run) expect(ALL_SERVICES).toContain(s);
  expect([...new Set(run)].sort()).toEqual([...ALL_SERVICES].sort());
});

it("lists every base manifest in the kustomization", () => {
  const kust = parseAllDocuments(fs.readFileSync(path.join(K8S, "base/kustomization.yaml"), "utf8"))[0]!.toJS() as { resources: string[] };
  const files = fs.readdirSync(path.join(K8S, "base")).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml");
  expect([...kust.resources].sort()).toEqual(files.sort());
});

it("runs NATS requiring a login and with the max_payload the product needs; every node logs in from the same Secret", () => {
  const natsConf = base.find((d) => d.kind === "ConfigMap" && d.metadata.name === "nats-config").data["nats.conf"] as string;
  expect(natsConf).toMatch(/authorization\s*\{[^}]*user:\s*\$NATS_USER[^}]*password:\s*\$NATS_PASSWORD/);
  const maxPayload = /max_payload:\s*(\d+)MB/.exec(natsConf);
  const configMap = base.find((d) => d.kind === "ConfigMap" && d.metadata.name === "partner-gateway");
  expect(Number(maxPayload![1]) * 1024 * 1024).toBeGreaterThanOrEqual(Number(configMap.data.NATS_MAX_PAYLOAD ?? VARIABLES.NATS_MAX_PAYLOAD.default));
  const nats = base.find((d) => d.kind === "Deployment" && d.metadata.name === "nats").spec.template.spec.containers[0];
  const natsSecret = secretRef(nats, "NATS_USER");
  expect(natsSecret).toEqual({ name: "partner-gateway-nats", key: "user" });
  expect(nodes.length).toBeGreaterThan(0);
  for (const d of nodes) {
    for (const c of productContainers(d)) {
      expect({ node: d.metadata.name, user: secretRef(c, "NATS_USER"), password: secretRef(c, "NATS_PASSWORD") }).toEqual({
        node: d.metadata.name,
        user: natsSecret,
        password: secretRef(nats, "NATS_PASSWORD"),
      });
    }
  }
});

it("gives every node that runs the internal ingress INTERNAL_TOKEN from a Secret", () => {
  const withTracking = nodes.filter((d) =>
    productContainers(d).some((c) => (c.env ?? []).some((e: any) => e.name === "SERVICES" && String(e.value).split(",").includes("tracking"))),
  );
  expect(withTracking.length).toBeGreaterThan(0);
  for (const d of withTracking) for (const c of productContainers(d)) expect(secretRef(c, "INTERNAL_TOKEN")).toMatchObject({ key: expect.any(String) });
});

it("keeps the upload budgets under their volumes' size limits, so a full disk answers 503 instead of an eviction", () => {
  const gib = (q: string) => {
    const m = /^(\d+)(Gi|Mi)$/.exec(q)!;
    return Number(m[1]) * (m[2] === "Gi" ? 1024 ** 3 : 1024 ** 2);
  };
  for (const [name, variable, volume] of [
    ["gateway", "SPOOL_MAX_BYTES", "spool"],
    ["contacts", "IMPORT_QUEUE_MAX_BYTES", "imports"],
  ] as const) {
    const d = nodes.find((x) => x.metadata.name === name);
    const env = (productContainers(d)[0].env ?? []).find((e: any) => e.name === variable);
    const limit = d.spec.template.spec.volumes.find((v: any) => v.name === volume).emptyDir.sizeLimit as string;
    expect({ name, budget: Number(env?.value) < gib(limit) }).toEqual({ name, budget: true });
  }
});
