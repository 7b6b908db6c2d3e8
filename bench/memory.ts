/**
 * bench/memory: what an idle `npm start` holds on the embedded default (issue 34 item 4). Starts
 * `npm start` (the package's own command) on a fresh DATA_DIR and reads its node process's RSS
 * after SETTLE seconds and its peak (VmHWM: the first start creates the database and runs every
 * migration), stops it, then starts it again on the same DATA_DIR ROUNDS times and reads the idle
 * RSS each time. The floor, in the same run: a bare Node process that opens the same data directory
 * with PGlite (the same start parameters: lib/db/embedded-db.ts) and does nothing else, i.e. what
 * the embedded PostgreSQL alone costs; and the same with PGlite's own defaults (shared_buffers 128MB).
 *
 *   npm run bench:memory [-- --rounds 3 --settle 40]
 *
 * Target: an idle start on an existing DATA_DIR at most 350 MB. Last line:
 * RESULT idle_rss_mb=<median> first_start_peak_mb=<x> floor_rss_mb=<x> idle_vs_floor=<ratio>
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { ROOT } from "./service";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "3" }, settle: { type: "string", default: "40" } } });
const ROUNDS = Number(values.rounds);
const SETTLE_MS = Number(values.settle) * 1000;
const NODE = path.join(ROOT, "node_modules/.bin/node");

const mb = (pid: number, field: "VmRSS" | "VmHWM") => {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").match(new RegExp(`^${field}:\\s+(\\d+) kB`, "m"));
  return Math.round(Number(line?.[1] ?? 0) / 1024);
};

/** The node process `npm start` runs (its script execs node, so it is npm's one child). */
const nodeOf = (npm: ChildProcess) => Number(readFileSync(`/proc/${npm.pid}/task/${npm.pid}/children`, "utf8").trim().split(/\s+/)[0]);

const children = new Set<ChildProcess>();
process.on("exit", () => children.forEach((c) => c.kill("SIGKILL")));

/** `npm start` on `dataDir`; answers the node process (npm execs it) once /healthz/ready answers. */
async function start(dataDir: string, port: number): Promise<ChildProcess> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DATA_DIR: dataDir,
    PORT: String(port),
    INTERNAL_PORT: String(port + 1),
    LOG_FORMAT: "json",
    LOG_LEVEL: "warn",
  };
  delete env.DATABASE_URL;
  delete env.TRANSPORTER;
  const child = spawn("npm", ["start"], { cwd: ROOT, env, stdio: "ignore" });
  children.add(child);
  for (let i = 0; i < 600; i++) {
    if (child.exitCode !== null) throw new Error(`npm start exited with ${child.exitCode}`);
    const ok = await fetch(`http://127.0.0.1:${port}/healthz/ready`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return child;
    await sleep(200);
  }
  throw new Error("npm start was not ready within 120 s");
}

async function stop(child: ChildProcess): Promise<void> {
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  await exited;
  children.delete(child);
}

/** A bare Node process holding PGlite open on `dataDir` with `params` (null: PGlite's defaults). */
async function floor(dataDir: string, params: "ours" | "defaults"): Promise<number> {
  const script = `
    const { PGlite } = require("@electric-sql/pglite");
    const { pg_trgm } = require("@electric-sql/pglite/contrib/pg_trgm");
    const { EMBEDDED_SHARED_BUFFERS } = require(${JSON.stringify(path.join(ROOT, "lib/db/embedded-db.ts"))});
    const startParams = ${params === "ours" ? `[...PGlite.defaultStartParams, "-c", "shared_buffers=" + EMBEDDED_SHARED_BUFFERS]` : "undefined"};
    PGlite.create({ dataDir: process.argv[1], extensions: { pg_trgm }, ...(startParams ? { startParams } : {}) })
      .then((db) => db.query("SELECT count(*) FROM schema_migrations"))
      .then(() => { process.stdout.write("ready\\n"); setInterval(() => {}, 1000); });`;
  const child = spawn(NODE, ["--import", "tsx", "-e", script, path.join(dataDir, "pgdata")], { cwd: ROOT, stdio: ["ignore", "pipe", "inherit"] });
  children.add(child);
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on("data", (d: Buffer) => d.toString().includes("ready") && resolve());
    child.once("exit", (code) => reject(new Error(`floor exited with ${code}`)));
  });
  await sleep(SETTLE_MS);
  const rss = mb(child.pid!, "VmRSS");
  await stop(child);
  return rss;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main() {
  const dataDir = mkdtempSync(path.join(tmpdir(), "pgw-bench-memory-"));
  const port = 20000 + Math.floor(Math.random() * 20000);
  try {
    const first = await start(dataDir, port);
    await sleep(SETTLE_MS);
    const firstRss = mb(nodeOf(first), "VmRSS");
    const firstPeak = mb(nodeOf(first), "VmHWM");
    await stop(first);
    console.log(`first start (empty DATA_DIR): peak ${firstPeak} MB, ${firstRss} MB after ${SETTLE_MS / 1000} s`);
    const idle: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const child = await start(dataDir, port);
      await sleep(SETTLE_MS);
      idle.push(mb(nodeOf(child), "VmRSS"));
      console.log(`idle start ${i + 1} (existing DATA_DIR): ${idle.at(-1)} MB (peak ${mb(nodeOf(child), "VmHWM")} MB)`);
      await stop(child);
    }
    const ours = await floor(dataDir, "ours");
    const defaults = await floor(dataDir, "defaults");
    console.log(`floor: bare PGlite on the same DATA_DIR ${ours} MB (PGlite's own defaults: ${defaults} MB)`);
    const m = median(idle);
    console.log(`idle npm start ${m} MB (median of ${ROUNDS}); target <= 350 MB: ${m <= 350 ? "met" : "not met"}`);
    console.log(`RESULT idle_rss_mb=${m} first_start_peak_mb=${firstPeak} floor_rss_mb=${ours} idle_vs_floor=${(m / ours).toFixed(2)}`);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    console.error(e);
    process.exit(1);
  },
);
