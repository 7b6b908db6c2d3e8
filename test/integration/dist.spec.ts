/**
 * The compiled build, as the image runs it: `npm run build` (tsconfig.build.json) emits JavaScript
 * that plain Node 22 runs without tsx. Here it is built into a directory of its own inside the
 * project (so that `node_modules` resolves as it does for dist/), then run as the container runs it:
 * the migration entry point, then `node dist/scripts/start.js` on the embedded defaults, its
 * readiness, an export (a piscina worker thread loading its compiled .js module), SIGTERM and a
 * clean exit. The Dockerfile is read too, for what must hold whether or not docker is at hand.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import { builtinModules } from "node:module";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { migrations } from "../../migrations";
import { createPgDatabase, itWithPostgres } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { Http } from "../helpers/http";
import { freePort } from "../helpers/ports";

const ROOT = path.join(__dirname, "../..");
/** The project's Node 22 (the node@22 devDependency), whatever node is on PATH. */
const NODE = path.join(ROOT, "node_modules/.bin/node");
const API_PREFIX = "/api/partner-gateway/v1";
const run = promisify(execFile);

/** The environment of a container: nothing of this test run's own configuration leaks in. */
const cleanEnv = (extra: Record<string, string>) => ({
  ...Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|DATA_DIR|TRANSPORTER|SERVICES|PORT|INTERNAL_|TEST_|LOG_|NODE_OPTIONS)/.test(k)),
  ),
  LOG_LEVEL: "warn",
  ...extra,
});

let dist: string;
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "pgw-dist-data-"));
let child: ChildProcess | null = null;

beforeAll(async () => {
  expect((await run(NODE, ["--version"])).stdout.trim()).toMatch(/^v22\./);
  dist = fs.mkdtempSync(path.join(ROOT, ".dist-test-"));
  // The build script itself, with only the output directory moved and its type check skipped
  // (--noCheck: the same files, byte for byte, in half the CPU; `npx tsc --noEmit` checks the types
  // before the tests in CI).
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, "package.json"), "utf8"));
  expect(pkg.scripts.build).toBe("tsc -p tsconfig.build.json");
  await run(NODE, [path.join(ROOT, "node_modules/typescript/bin/tsc"), "-p", path.join(ROOT, "tsconfig.build.json"), "--outDir", dist, "--noCheck"], {
    cwd: ROOT,
  });
}, 180_000);

afterAll(async () => {
  if (child && child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  if (dist) fs.rmSync(dist, { recursive: true, force: true });
  fs.rmSync(dataDir, { recursive: true, force: true });
});

it("emits every runtime file as JavaScript: entry points, migrations, services and their worker modules", () => {
  for (const f of [
    "scripts/start.js",
    "scripts/migrate.js",
    "scripts/admin.js",
    "moleculer.config.js",
    "app/start-app.js",
    "lib/jobs/worker-pool.js",
    "services/exports/exports.worker.js",
    "services/contacts/contacts.worker.js",
    ...migrations.map((m) => `migrations/${m.name}.js`),
  ])
    expect({ f, exists: fs.existsSync(path.join(dist, f)) }).toEqual({ f, exists: true });
  // Nothing of the tests or benches is shipped.
  expect(fs.existsSync(path.join(dist, "test"))).toBe(false);
  expect(fs.existsSync(path.join(dist, "bench"))).toBe(false);
});

it("needs no development package at run time (the image keeps only the production ones)", () => {
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, "package.json"), "utf8"));
  const production = new Set(Object.keys(pkg.dependencies));
  const builtins = new Set<string>(builtinModules);
  const needed = new Map<string, string>();
  const walk = (dir: string): void => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith(".js"))
        for (const m of fs.readFileSync(p, "utf8").matchAll(/require\("([^".][^"]*)"\)|import\("([^".][^"]*)"\)/g)) {
          const spec = (m[1] ?? m[2])!;
          const name = spec.startsWith("@") ? spec.split("/").slice(0, 2).join("/") : spec.split("/")[0]!;
          if (!spec.startsWith("node:") && !builtins.has(name)) needed.set(name, path.relative(dist, p));
        }
    }
  };
  walk(dist);
  expect(needed.size).toBeGreaterThan(5);
  for (const [name, file] of needed) expect({ name, file, production: production.has(name) }).toEqual({ name, file, production: true });
});

it("applies every migration with the migrate-only entry point, and none the second time", async () => {
  const first = await run(NODE, [path.join(dist, "scripts/migrate.js")], { cwd: ROOT, env: cleanEnv({ DATA_DIR: dataDir }) });
  expect(JSON.parse(first.stdout)).toEqual({ applied: migrations.map((m) => m.name) });
  const second = await run(NODE, [path.join(dist, "scripts/migrate.js")], { cwd: ROOT, env: cleanEnv({ DATA_DIR: dataDir }) });
  expect(JSON.parse(second.stdout)).toEqual({ applied: [] });
}, 120_000);

itWithPostgres(
  "applies each migration once when the Job and starting nodes migrate the same PostgreSQL at once",
  async () => {
    const pg = await createPgDatabase();
    try {
      const runs = await Promise.all(
        [1, 2, 3].map(() => run(NODE, [path.join(dist, "scripts/migrate.js")], { cwd: ROOT, env: cleanEnv({ DATABASE_URL: pg.url }) })),
      );
      const applied = runs.flatMap((r) => JSON.parse(r.stdout).applied as string[]);
      expect(applied).toEqual(migrations.map((m) => m.name));
    } finally {
      await pg.drop();
    }
  },
  120_000,
);

it("refuses a bad variable in one line, exit 2", async () => {
  const err = await run(NODE, [path.join(dist, "scripts/migrate.js")], { cwd: ROOT, env: cleanEnv({ DATABASE_URL: "mysql://x" }) }).catch((e) => e);
  expect(err.code).toBe(2);
  expect(err.stderr.trim().split("\n")).toEqual([expect.stringMatching(/^migrate: Invalid configuration: DATABASE_URL=/)]);
});

it("starts with plain node, answers /healthz/ready, runs an export on a worker thread, and exits 0 on SIGTERM", async () => {
  const port = await freePort();
  const internalPort = await freePort();
  // As the image's CMD runs it (the flag included), from a directory that is not the project's.
  child = spawn(NODE, ["--experimental-async-context-frame", path.join(dist, "scripts/start.js")], {
    cwd: dataDir,
    env: cleanEnv({ DATA_DIR: dataDir, PORT: String(port), INTERNAL_PORT: String(internalPort), EXPORT_WORKERS: "1" }),
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr!.on("data", (d) => (stderr += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child!.on("exit", (code, signal) => resolve({ code, signal })),
  );
  const base = `http://127.0.0.1:${port}`;
  await eventually(
    async () => {
      if (child!.exitCode !== null) throw new Error(`dist/scripts/start.js exited ${child!.exitCode}: ${stderr}`);
      const r = await fetch(`${base}/healthz/ready`);
      if (r.status !== 200) throw new Error(`/healthz/ready answered ${r.status}: ${await r.text()}`);
    },
    { timeoutMs: 60_000 },
  );

  // A key through the compiled admin command (it joins the running service's embedded database).
  const created = await run(NODE, [path.join(dist, "scripts/admin.js"), "keys:create", "--company", "acme", "--operations", "CONTACTS,EXPORTS"], {
    cwd: ROOT,
    env: cleanEnv({ DATA_DIR: dataDir }),
  });
  const api = new Http(base + API_PREFIX, { "x-api-key": JSON.parse(created.stdout).apiKey });
  expect((await api.post("/contacts", { phoneNumber: "+14155550100", firstName: "Ada" })).status).toBe(201);
  const job = await api.post("/exports/contacts", {});
  expect(job.status).toBe(202);
  const done = await eventually(
    async () => {
      const r = await api.get(`/exports/${job.body.exportId}`);
      if (r.status !== 200) throw new Error(`export not available yet: ${r.status} ${r.text}`);
      return r;
    },
    { timeoutMs: 60_000 },
  );
  const file = await fetch(`${base}${new URL(done.body.downloadUrl).pathname}`);
  expect(file.status).toBe(200);
  expect(await file.text()).toContain("+14155550100");

  child.kill("SIGTERM");
  expect(await exited).toEqual({ code: 0, signal: null });
  expect(fs.existsSync(path.join(dataDir, "embedded-db.json"))).toBe(false);
}, 150_000);

describe("Dockerfile", () => {
  const dockerfile = fs.readFileSync(path.join(ROOT, "Dockerfile"), "utf8");
  const stages = dockerfile.split(/^FROM /m).slice(1);
  const runtime = stages[stages.length - 1]!;

  it("compiles in a build stage and runs the compiled entry point, without tsx", () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    expect(stages[0]).toMatch(/RUN npm run build/);
    expect(runtime).toMatch(/COPY --from=build \/app\/dist/);
    expect(runtime).toMatch(/^CMD \["node", .*"dist\/scripts\/start\.js"\]$/m);
    expect(runtime).not.toMatch(/tsx|\.ts"/);
  });

  it("runs as a numeric non-root user, with tini forwarding SIGTERM", () => {
    const user = /^USER (\d+)(?::(\d+))?$/m.exec(runtime);
    expect(Number(user?.[1])).toBeGreaterThan(0);
    expect(runtime).toMatch(/^ENTRYPOINT \["\/usr\/bin\/tini", "--"\]$/m);
  });

  it("leaves the sources, tests and local data out of the build context", () => {
    const ignored = fs.readFileSync(path.join(ROOT, ".dockerignore"), "utf8").split("\n");
    for (const p of ["node_modules", "dist", "data", "test", ".git"]) expect(ignored).toContain(p);
  });
});
