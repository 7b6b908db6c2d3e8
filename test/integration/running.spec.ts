/**
 * The ways of running: embedded PGlite under DATA_DIR (data survives a restart, one process per
 * directory), the admin command with and without the service running, the refusal of cluster mode
 * without DATABASE_URL, and migrations that replicas may run at the same time.
 */
import { spawn } from "node:child_process";
import { createServer, type AddressInfo } from "node:net";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { QueryTypes } from "sequelize";
import { migrations } from "../../migrations";
import { startApp } from "../../app/start-app";
import { migrate, openDatabase } from "../../lib/db/db";
import { openEmbedded } from "../../lib/db/embedded-db";
import { testConfig, waitForRoutes } from "../helpers/app";
import { createPgDatabase, itWithPostgres, REQUIRE_REAL, TEST_DATABASE_URL } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { freePort } from "../helpers/ports";
import { seededDataDir } from "../helpers/template-db";
import { Http } from "../helpers/http";

const ROOT = path.join(__dirname, "../..");
const TSX = path.join(ROOT, "node_modules/tsx/dist/cli.mjs");
const tmpDir = () => fs.mkdtempSync(path.join(os.tmpdir(), "pgw-data-"));

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs one of the project's scripts as a user would (own process, own environment). */
function runScript(script: string, args: string[], env: Record<string, string>, timeoutMs = 150_000): Promise<Run> {
  return new Promise((resolve, reject) => {
    const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|DATA_DIR|TRANSPORTER|SERVICES|PORT|TEST_|LOG_)/.test(k)));
    const child = spawn(process.execPath, [TSX, path.join(ROOT, script), ...args], { cwd: ROOT, env: { ...clean, LOG_LEVEL: "warn", ...env } });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

const admin = (args: string[], env: Record<string, string>) => runScript("scripts/admin.ts", args, env);

async function startEmbedded(dataDir: string) {
  const config = testConfig({ dataDir, databaseUrl: null });
  const app = await startApp(config, { services: ["gateway", "auth"] });
  const base = `http://127.0.0.1:${app.port}`;
  await waitForRoutes(base);
  return { app, api: new Http(`${base}/api/partner-gateway/v1`) };
}

// Each case starts `npm start` (tsx, embedded PGlite, migrations on an empty DATA_DIR): beside three
// other test workers on a 2-core machine a start alone has taken over a minute.
jest.setTimeout(180_000);

describe("embedded mode (PGlite under DATA_DIR)", () => {
  it("keeps its data across a restart", async () => {
    const dir = await seededDataDir();
    const created = await admin(["keys:create", "--company", "acme", "--operations", "AUTHENTICATION"], { DATA_DIR: dir });
    expect(created.code).toBe(0);
    const key = JSON.parse(created.stdout).apiKey as string;
    const first = await startEmbedded(dir);
    expect((await first.api.get("/authentication/me", { headers: { "x-api-key": key } })).status).toBe(200);
    const made = await first.api.post("/authentication", { operations: ["AUTHENTICATION"] }, { headers: { "x-api-key": key } });
    expect(made.status).toBe(201);
    await first.app.stop();
    const second = await startEmbedded(dir);
    try {
      const me = await second.api.get("/authentication/me", { headers: { "x-api-key": made.body.apiKey } });
      expect(me.status).toBe(200);
      expect(me.body.id).toBe(made.body.id);
    } finally {
      await second.app.stop();
    }
  });

  it("admits one service per data directory, and the admin command beside it", async () => {
    const dir = await seededDataDir();
    const running = await startEmbedded(dir);
    try {
      await expect(openEmbedded(dir, "service", 1000)).rejects.toThrow(/in use by another running service/);
      const created = await admin(
        ["keys:create", "--company", "beta", "--user", "ops-1", "--traffic-type", "MARKETING", "--operations", "SMS,AUTHENTICATION"],
        { DATA_DIR: dir },
      );
      expect(created.stderr).toBe("");
      expect(created.code).toBe(0);
      const body = JSON.parse(created.stdout);
      expect(body).toMatchObject({ companyId: "beta", userId: "ops-1", username: null, operations: ["SMS", "AUTHENTICATION"], trafficType: "MARKETING" });
      // The running service sees the key at once: the admin command wrote through the service's own database.
      const me = await running.api.get("/authentication/me", { headers: { "x-api-key": body.apiKey } });
      expect(me.status).toBe(200);
      expect(me.body.id).toBe(body.id);
    } finally {
      await running.app.stop();
    }
    expect(fs.existsSync(path.join(dir, "embedded-db.json"))).toBe(false);
  });

  it("takes over a data directory left locked by a process that died", async () => {
    const dir = await seededDataDir();
    fs.writeFileSync(path.join(dir, "embedded-db.json"), JSON.stringify({ pid: 2 ** 22 + 12345, role: "service", port: 1, startedAt: "x" }));
    // The lock of a holder that died stops being refreshed; once stale it is taken over.
    fs.mkdirSync(path.join(dir, "embedded.lock"));
    const old = new Date(Date.now() - 60_000);
    fs.utimesSync(path.join(dir, "embedded.lock"), old, old);
    const created = await admin(["keys:create", "--company", "gamma", "--operations", "ALL"], { DATA_DIR: dir });
    expect(created.code).toBe(0);
    expect(JSON.parse(created.stdout).operations).toHaveLength(11);
  });
});

describe("stopping", () => {
  it("closes the embedded database and lets go of the data directory on SIGTERM", async () => {
    const dir = await seededDataDir();
    const port = await freePort();
    const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|TRANSPORTER|SERVICES|TEST_|LOG_)/.test(k)));
    const child = spawn(process.execPath, ["--import", "tsx", path.join(ROOT, "scripts/start.ts")], {
      cwd: ROOT,
      // Both listeners on ports of this test's own (the internal one defaults to 3001, which another process may hold).
      env: { ...clean, DATA_DIR: dir, PORT: String(port), INTERNAL_PORT: String(await freePort()), LOG_LEVEL: "warn", LOG_FORMAT: "json" },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr!.on("data", (d) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    // Ready, or the start's own words when it ends first.
    await Promise.race([
      waitForRoutes(`http://127.0.0.1:${port}`, 150_000).catch((err: Error) => Promise.reject(new Error(`${err.message}; its stderr: ${stderr.slice(-3000)}`))),
      exited.then((code) => Promise.reject(new Error(`the start exited with ${code} before it was ready: ${stderr.slice(-2000)}`))),
    ]);
    expect(fs.existsSync(path.join(dir, "embedded-db.json"))).toBe(true);
    expect(fs.existsSync(path.join(dir, "repl.json"))).toBe(true);
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
    expect(fs.existsSync(path.join(dir, "embedded-db.json"))).toBe(false);
    expect(fs.existsSync(path.join(dir, "embedded.lock"))).toBe(false);
    // The REPL's socket (lib/repl/repl-link.ts) is closed too: nothing left for a REPL to find.
    expect(fs.existsSync(path.join(dir, "repl.json"))).toBe(false);
  });

  it("stops gracefully on a SIGTERM that arrives while it is still starting", async () => {
    const dir = await seededDataDir();
    const port = await freePort();
    const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|TRANSPORTER|SERVICES|TEST_|LOG_)/.test(k)));
    const child = spawn(process.execPath, ["--import", "tsx", path.join(ROOT, "scripts/start.ts")], {
      cwd: ROOT,
      env: { ...clean, DATA_DIR: dir, PORT: String(port), INTERNAL_PORT: String(await freePort()), LOG_LEVEL: "warn" },
      stdio: "ignore",
    });
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    // The embedded database is open, the services are on their way: the default action would kill it here (143).
    await eventually(() => expect(fs.existsSync(path.join(dir, "embedded-db.json"))).toBe(true), { timeoutMs: 60_000, intervalMs: 20 });
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
    expect(fs.existsSync(path.join(dir, "embedded-db.json"))).toBe(false);
    expect(fs.existsSync(path.join(dir, "embedded.lock"))).toBe(false);
  });
});

describe("stopping through npm", () => {
  /** `npm start` as a user runs it (npm's own process, its script), on a migrated DATA_DIR; answers npm's child and the node it runs. */
  async function npmStart(dir: string) {
    const port = await freePort();
    const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|TRANSPORTER|SERVICES|TEST_|LOG_|npm_)/.test(k)));
    const npm = spawn("npm", ["start"], {
      cwd: ROOT,
      env: { ...clean, DATA_DIR: dir, PORT: String(port), INTERNAL_PORT: String(await freePort()), LOG_LEVEL: "warn", LOG_FORMAT: "json" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    npm.stdout!.on("data", (d) => (output += d));
    npm.stderr!.on("data", (d) => (output += d));
    const exited = new Promise<number | null>((resolve) => npm.on("exit", (code) => resolve(code)));
    // Ready, or npm's and the start's own words when it ends first, or when it is late.
    await Promise.race([
      waitForRoutes(`http://127.0.0.1:${port}`, 150_000).catch((err: Error) => Promise.reject(new Error(`${err.message}; its output: ${output.slice(-3000)}`))),
      exited.then((code) => Promise.reject(new Error(`npm start exited with ${code} before it was ready: ${output.slice(-3000)}`))),
    ]);
    // npm's script execs node (package.json): the node process is npm's own child, no shell between.
    const children = fs.readFileSync(`/proc/${npm.pid}/task/${npm.pid}/children`, "utf8").trim().split(/\s+/).map(Number);
    expect(children).toHaveLength(1);
    const node = children[0]!;
    expect(fs.readFileSync(`/proc/${node}/cmdline`, "utf8").split("\0")).toContain(path.join("scripts", "start.ts"));
    return { npm, node, port };
  }

  const gone = (pid: number) => !fs.existsSync(`/proc/${pid}`) || /^State:\s+Z/m.test(fs.readFileSync(`/proc/${pid}/status`, "utf8"));

  it.each([["SIGTERM"], ["SIGINT"], ["SIGKILL"]] as const)("drains and exits, releasing DATA_DIR, when npm's pid gets %s", async (signal) => {
    const dir = await seededDataDir();
    const { npm, node } = await npmStart(dir);
    expect(fs.existsSync(path.join(dir, "embedded-db.json"))).toBe(true);
    // SIGTERM and SIGINT: npm forwards them to its child, node itself. SIGKILL: npm dies at once, and
    // the node it leaves behind sees its parent gone and stops as if signalled.
    process.kill(npm.pid!, signal);
    await eventually(() => expect(gone(node)).toBe(true), { timeoutMs: 60_000, intervalMs: 100 });
    expect(fs.existsSync(path.join(dir, "embedded-db.json"))).toBe(false);
    expect(fs.existsSync(path.join(dir, "embedded.lock"))).toBe(false);
  });
});

describe("a port already taken", () => {
  it.each([["PORT"], ["INTERNAL_PORT"]] as const)("stops the start before the database is opened, naming %s", async (variable) => {
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", resolve));
    const taken = (holder.address() as AddressInfo).port;
    try {
      const dir = tmpDir();
      const ports = { PORT: String(await freePort()), INTERNAL_PORT: String(await freePort()), [variable]: String(taken) };
      const run = await runScript("scripts/start.ts", [], { DATA_DIR: dir, HOST: "127.0.0.1", ...ports });
      expect(run.code).toBe(2);
      expect(run.stderr.trim()).toBe(
        `Port ${taken} on 127.0.0.1 (${variable}) is already in use (another process listens there). Stop that process, or choose another port: ${variable}=${taken + 100} npm start`,
      );
      // Named before anything was opened: no database, no lock in DATA_DIR.
      expect(fs.readdirSync(dir)).toEqual([]);
    } finally {
      holder.close();
    }
  });
});

describe("admin command", () => {
  it.each([
    [[], "no command"],
    [["keys:delete"], "unknown command"],
    [["keys:create", "--operations", "SMS"], "--company is required"],
    [["keys:create", "--company", "acme"], "--operations is required"],
    [["keys:create", "--company", "acme", "--operations", "SMS,FAX"], "unknown operation(s) FAX"],
    [["keys:create", "--company", "acme", "--operations", "SMS", "--traffic-type", "BULK"], "--traffic-type must be"],
    [["keys:create", "--company", "a b", "--operations", "SMS"], "--company must be"],
    [["keys:create", "--company", "acme", "--operations", "SMS", "--colour", "red"], "Unknown option"],
  ])("exits 2 with a message for bad arguments %j", async (args, message) => {
    const dir = tmpDir();
    const run = await admin(args as string[], { DATA_DIR: dir });
    expect(run.code).toBe(2);
    expect(run.stdout).toBe("");
    expect(run.stderr).toContain(message);
    expect(fs.readdirSync(dir)).toEqual([]); // nothing was opened or written
  });

  itWithPostgres("creates a key in the PostgreSQL at DATABASE_URL", async () => {
    const pg = await createPgDatabase();
    try {
      const run = await admin(["keys:create", "--company", "delta", "--operations", "RCS"], { DATABASE_URL: pg.url });
      expect(run.code).toBe(0);
      const db = await openDatabase({ databaseUrl: pg.url, dataDir: null, migrate: false });
      const rows = await db.sequelize.query<{ company_id: string }>("SELECT company_id FROM api_keys", { type: QueryTypes.SELECT });
      await db.close();
      expect(rows).toEqual([{ company_id: "delta" }]);
    } finally {
      await pg.drop();
    }
  });
});

describe("start", () => {
  it("refuses cluster mode without DATABASE_URL, in one line", async () => {
    const run = await runScript("scripts/start.ts", [], { TRANSPORTER: "nats://127.0.0.1:4222" });
    expect(run.code).toBe(2);
    const lines = run.stderr.trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/TRANSPORTER is set but DATABASE_URL is not/);
  });

  it("refuses a bad variable naming it", async () => {
    const run = await runScript("scripts/start.ts", [], { PORT: "eighty", DATA_DIR: tmpDir() });
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/PORT/);
  });
});

describe("migrations", () => {
  it("run once when several replicas start at the same time", async () => {
    if (TEST_DATABASE_URL) {
      const pg = await createPgDatabase();
      try {
        const dbs = await Promise.all([1, 2, 3, 4].map(() => openDatabase({ databaseUrl: pg.url, dataDir: null })));
        const rows = await dbs[0]!.sequelize.query<{ name: string }>("SELECT name FROM schema_migrations ORDER BY name", { type: QueryTypes.SELECT });
        expect(rows.map((r) => r.name)).toEqual(migrations.map((m) => m.name));
        await Promise.all(dbs.map((d) => d.close()));
      } finally {
        await pg.drop();
      }
    } else {
      // Embedded: one process, the same calls at once. Under REQUIRE_REAL_SERVICES=1 the PostgreSQL case must run.
      if (REQUIRE_REAL) throw new Error("REQUIRE_REAL_SERVICES=1 but TEST_DATABASE_URL is not set: the concurrent migrations must run on PostgreSQL");
      const db = await openDatabase({ databaseUrl: null, dataDir: null, migrate: false });
      const results = await Promise.all([migrate(db), migrate(db), migrate(db)]);
      expect(results.flat().sort()).toEqual(migrations.map((m) => m.name));
      await db.close();
    }
  });
});
