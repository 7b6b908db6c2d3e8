/**
 * What `npm start` writes to stdout, as a person or a log collector sees it: JSON lines when stdout
 * is not a terminal (every line parses), human lines with LOG_FORMAT=pretty, and one start-up
 * banner with the URLs of the ports it really listens on.
 */
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { migrations } from "../../migrations";
import { ALL_SERVICES } from "../../lib/config";
import { waitForRoutes } from "../helpers/app";
import { eventually } from "../helpers/eventually";
import { freePort } from "../helpers/ports";
import { seededDataDir } from "../helpers/template-db";

const ROOT = path.join(__dirname, "../..");

/** Starts `npm start`'s script with stdout on a pipe, sends one request, stops it; answers its stdout. */
async function startAndStop(
  env: Record<string, string>,
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "pgw-start-out-")),
): Promise<{ stdout: string; port: number; internalPort: number; code: number | null }> {
  const port = await freePort();
  const internalPort = await freePort();
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|DATA_DIR|TRANSPORTER|SERVICES|PORT|TEST_|LOG_|NODE_ID)/.test(k)),
  );
  const child = spawn(process.execPath, ["--import", "tsx", path.join(ROOT, "scripts/start.ts")], {
    cwd: ROOT,
    env: { ...clean, DATA_DIR: dir, PORT: String(port), INTERNAL_PORT: String(internalPort), LOG_LEVEL: "info", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  child.stdout.on("data", (d) => (stdout += d));
  child.stderr.resume();
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  try {
    await waitForRoutes(`http://127.0.0.1:${port}`, 60000);
    await fetch(`http://127.0.0.1:${port}/api/partner-gateway/v1/authentication/me`);
    // The buffered log is flushed at least every 250 ms: wait for the request's access line.
    await eventually(() => expect(stdout).toContain("/api/partner-gateway/v1/authentication/me"), { timeoutMs: 5000 });
  } finally {
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 15000);
    await exited;
    clearTimeout(timer);
  }
  return { stdout, port, internalPort, code: await exited };
}

describe("npm start's output", () => {
  let json: Awaited<ReturnType<typeof startAndStop>>;
  let pretty: Awaited<ReturnType<typeof startAndStop>>;

  beforeAll(async () => {
    // The JSON one is a first start on an empty DATA_DIR; the pretty one starts where one has run.
    [json, pretty] = await Promise.all([startAndStop({}), seededDataDir("pgw-start-out-").then((dir) => startAndStop({ LOG_FORMAT: "pretty" }, dir))]);
  }, 120000);

  it("is JSON lines when stdout is not a terminal, the banner one record carrying the real ports", () => {
    expect(json.code).toBe(0);
    const lines = json.stdout.split("\n").filter(Boolean);
    expect(lines.length).toBeGreaterThan(10);
    const records = lines.map((l) => JSON.parse(l) as Record<string, any>);
    const banners = records.filter((r) => /^Partner gateway running/.test(r.msg));
    expect(banners).toHaveLength(1);
    expect(banners[0]!.urls).toEqual({
      api: `http://localhost:${json.port}/api/partner-gateway/v1`,
      docs: `http://localhost:${json.port}/docs`,
      metrics: `http://localhost:${json.port}/metrics`,
      ingress: `http://127.0.0.1:${json.internalPort}/internal/v1`,
    });
    expect(banners[0]!.firstKey).toBe("npm run admin -- keys:create --company <companyId> --operations ALL");
    // What it is doing, from its first line: a first start creates the database, runs every migration
    // as "k of n", starts the services, then the banner.
    const starts = records.filter((r) => r.mod === "start").map((r) => r.msg as string);
    expect(records[0]!.msg).toMatch(/^Starting the partner gateway \(one process\): gateway, auth, .* on embedded PostgreSQL \(PGlite\) in /);
    expect(starts[1]).toMatch(/^Creating the embedded database in /);
    const migrating = starts.filter((m) => m.startsWith("Migrating the database: "));
    expect(migrating).toEqual(migrations.map((m, i) => `Migrating the database: ${i + 1} of ${migrations.length} (${m.name})`));
    expect(starts.at(-1)).toBe(`Starting ${ALL_SERVICES.length} service(s): ${ALL_SERVICES.join(", ")}`);
    expect(records.findIndex((r) => r.mod === "start" && r.msg === starts.at(-1))).toBeLessThan(records.indexOf(banners[0]!));
    // The access log stays a record with its fields.
    expect(records).toContainEqual(expect.objectContaining({ msg: "request", method: "GET", status: 401, path: "/api/partner-gateway/v1/authentication/me" }));
  });

  it("is human lines with LOG_FORMAT=pretty (no colours on a pipe), with the banner once", () => {
    expect(pretty.code).toBe(0);
    const out = pretty.stdout;
    expect(out).not.toMatch(/\u001b\[/);
    const lines = out.split("\n").filter(Boolean);
    for (const line of lines) expect(() => JSON.parse(line)).toThrow();
    expect(out).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: broker: ✔ ServiceBroker with \d+ service\(s\) started/m);
    expect(out).toMatch(
      /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: gateway: request GET \/api\/partner-gateway\/v1\/authentication\/me 401 [\d.]+ms \[[0-9a-f-]{36}\]$/m,
    );
    expect(out.match(/Partner gateway running/g)).toHaveLength(1);
    // On a DATA_DIR that has run: opened, nothing to migrate.
    expect(out).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: start: Opening the embedded database in /m);
    expect(out).not.toContain("Migrating the database");
    expect(out).toMatch(new RegExp(`^ {2}API +http://localhost:${pretty.port}/api/partner-gateway/v1$`, "m"));
    expect(out).toMatch(new RegExp(`^ {2}Docs +http://localhost:${pretty.port}/docs$`, "m"));
    expect(out).toMatch(new RegExp(`^ {2}Metrics +http://localhost:${pretty.port}/metrics$`, "m"));
    expect(out).toMatch(new RegExp(`^ {2}Ingress +http://127\\.0\\.0\\.1:${pretty.internalPort}/internal/v1 `, "m"));
    expect(out).toMatch(/^ {2}First key +npm run admin -- keys:create --company <companyId> --operations ALL$/m);
  });
});
