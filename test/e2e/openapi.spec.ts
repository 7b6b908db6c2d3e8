import { execFile } from "node:child_process";
import { promisify } from "node:util";
import fs from "node:fs";
import { API_ROUTES } from "../../lib/http/api-routes";
import { API_ROUTES_FILE, apiRoutesSource } from "../../lib/http/api-routes-source";
import os from "node:os";
import path from "node:path";
import { ALL_SERVICES } from "../../lib/config";
import { OPENAPI_TAGS } from "../../lib/http/openapi";
import { startTestApp, type TestApp } from "../helpers/app";

let t: TestApp;
let doc: any;
beforeAll(async () => {
  t = await startTestApp({ services: ALL_SERVICES, config: { publicBaseUrl: "http://localhost:3000" } });
  const res = await t.api.get("/openapi.json");
  expect(res.status).toBe(200);
  doc = res.body;
});
afterAll(() => t?.stop());

/** Every route the gateway serves under the API prefix, as "METHOD /openapi/{path}". */
function servedRoutes(): string[] {
  // The gateway's own routing table (services/gateway/gateway.routes.ts), from which its partner route is built.
  const gw = t.app.broker.getLocalService("gateway") as unknown as { routeTable: Array<{ method: string; fullPath: string }> };
  return gw.routeTable
    .filter((a) => a.fullPath.startsWith("/api/partner-gateway/v1/"))
    .map((a) => `${a.method} ${a.fullPath.slice("/api/partner-gateway/v1".length).replace(/:([A-Za-z0-9_]+)/g, "{$1}")}`);
}

it("documents every route the gateway serves, and nothing it does not", () => {
  const documented = Object.entries(doc.paths as Record<string, Record<string, unknown>>).flatMap(([p, ops]) =>
    Object.keys(ops).map((m) => `${m.toUpperCase()} ${p}`),
  );
  const served = servedRoutes();
  expect(served.length).toBeGreaterThanOrEqual(6);
  expect(documented.sort()).toEqual([...new Set(served)].sort());
});

it("gives every operation its required key operation, its errors and an example", () => {
  for (const [p, ops] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
    for (const [method, op] of Object.entries(ops)) {
      const where = `${method.toUpperCase()} ${p}`;
      expect({ where, has: "x-required-operation" in op }).toEqual({ where, has: true });
      const success = Object.entries(op.responses as Record<string, any>).filter(([s]) => s.startsWith("2"));
      expect(success.length).toBeGreaterThan(0);
      for (const [, r] of success)
        if (r.content) expect({ where, example: Object.values(r.content as Record<string, any>)[0].example !== undefined }).toEqual({ where, example: true });
      expect(op.responses["500"]).toBeDefined();
      if (op["x-required-operation"]) {
        expect({ where, r401: !!op.responses["401"], r429: !!op.responses["429"] }).toEqual({ where, r401: true, r429: true });
        expect(op.security).toEqual([{ ApiKey: [] }]);
      }
      if (op.requestBody?.content["multipart/form-data"]) {
        // Uploads: a binary file part, the other params as text fields.
        const form = op.requestBody.content["multipart/form-data"].schema;
        expect(Object.values(form.properties)).toContainEqual(expect.objectContaining({ type: "string", format: "binary" }));
      } else if (op.requestBody) expect(op.requestBody.content["application/json"].example).toBeDefined();
    }
  }
  expect(doc.paths["/authentication"].post["x-required-operation"]).toBe("AUTHENTICATION");
  expect(Object.keys(doc.paths["/authentication"].post.responses)).toEqual(
    expect.arrayContaining(["201", "400", "401", "403", "409", "413", "415", "422", "429", "500"]),
  );
  expect(Object.keys(doc.paths["/authentication/{id}"].delete.responses)).toEqual(expect.arrayContaining(["204", "404"]));
});

it("groups every operation under one of its listed tags, in the reference's fixed order", () => {
  const listed = (doc.tags as Array<{ name: string; description: string }>).map((t) => t.name);
  expect(listed).toEqual(OPENAPI_TAGS.map((t) => t.name));
  for (const [p, ops] of Object.entries(doc.paths as Record<string, Record<string, any>>))
    for (const [method, op] of Object.entries(ops))
      expect({ where: `${method} ${p}`, tags: op.tags.filter((t: string) => !listed.includes(t)) }).toEqual({ where: `${method} ${p}`, tags: [] });
  expect(doc.paths["/contacts/list"].post.tags).toEqual(["lists"]);
  expect(doc.paths["/contacts/list"].post.operationId).toBe("contacts_createList");
  expect(doc.info.description).toContain("## Problem types");
});

it("keeps the gateway's table of the API's routes (lib/http/api-routes.ts) what the committed openapi.json generates (run `npm run openapi`)", () => {
  const committed = JSON.parse(fs.readFileSync(path.join(__dirname, "../../openapi.json"), "utf8"));
  expect(fs.readFileSync(API_ROUTES_FILE, "utf8")).toBe(apiRoutesSource(committed));
  expect(API_ROUTES).toContainEqual(["GET", "/contacts/{id}"]);
});

it("documents an outage's 503 with Retry-After on every operation (the routes are fixed, whichever node serves them)", () => {
  const without = Object.entries(doc.paths as Record<string, Record<string, { responses: Record<string, unknown> }>>).flatMap(([p, ops]) =>
    Object.entries(ops)
      .filter(([, op]) => !op.responses["503"])
      .map(([m]) => `${m.toUpperCase()} ${p}`),
  );
  expect(without).toEqual([]);
  for (const name of ["Problem503", "PublicProblem503"]) expect(doc.components.responses[name].headers).toHaveProperty("Retry-After");
});

it("is the same document as the committed openapi.json (run `npm run openapi` after changing an action)", () => {
  const committed = JSON.parse(fs.readFileSync(path.join(__dirname, "../../openapi.json"), "utf8"));
  expect(doc).toEqual(committed);
});

/** Runs Spectral in a child process, asynchronously: the gateway in this process keeps serving meanwhile. */
async function spectral(document: unknown) {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "oas-")), "openapi.json");
  fs.writeFileSync(file, JSON.stringify(document));
  const cli = require.resolve("@stoplight/spectral-cli/dist/index.js");
  const run = await promisify(execFile)(
    process.execPath,
    [cli, "lint", "--ruleset", path.join(__dirname, "../../.spectral.yaml"), "--format", "json", "--quiet", file],
    {
      encoding: "utf8",
      timeout: 60000,
      maxBuffer: 64 * 1024 * 1024,
    },
  ).catch((err: { stdout?: string; code?: number }) => {
    // Spectral exits 1 when it reports errors; its report is still on stdout.
    if (typeof err.stdout === "string" && err.stdout.trim().startsWith("[")) return { stdout: err.stdout };
    throw err;
  });
  expect(run.stdout.trim()).toMatch(/^\[/); // Spectral ran and reported (an empty list is "no findings")
  return JSON.parse(run.stdout) as Array<{ severity: number; code: string; message: string; path: string[] }>;
}

it("passes Spectral's OpenAPI ruleset with zero errors (and zero warnings)", async () => {
  const results = await spectral(doc);
  expect(results.filter((r) => r.severity === 0).map((r) => `${r.code}: ${r.message} at ${r.path.join(".")}`)).toEqual([]);
  expect(results.filter((r) => r.severity === 1).map((r) => `${r.code} at ${r.path.join(".")}`)).toEqual([]);
  // The same check does find errors in a broken document.
  const broken = { ...doc, paths: { ...doc.paths, "/broken": { get: { responses: { 200: { description: 1 } } } } } };
  expect((await spectral(broken)).some((r) => r.severity === 0)).toBe(true);
}, 120_000);

it("serves the document without a key", async () => {
  const res = await t.api.get("/openapi.json");
  expect(res.status).toBe(200);
  expect(res.body.openapi).toBe("3.1.0");
});
