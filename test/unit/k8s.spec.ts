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
const known = new Set(Object.keys(VARIABLES));

it("sets only variables the service reads", () => {
  const configMap = base.find((d) => d.kind === "ConfigMap");
  for (const name of Object.keys(configMap.data)) expect({ name, known: known.has(name) }).toEqual({ name, known: true });
  for (const d of base.filter((x) => ["Deployment", "StatefulSet"].includes(x.kind))) {
    for (const c of d.spec.template.spec.containers) {
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
