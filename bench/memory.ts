/**
 * bench/memory: what an idle `npm start` holds on the embedded default (issue 34 item 4). Starts
 * `npm start` (the package's own command) on a fresh DATA_DIR and reads its node process's RSS
 * after SETTLE seconds and its peak (VmHWM: the first start creates the database and runs every
 * migration), stops it, then starts it again on the same DATA_DIR ROUNDS times and reads the idle
 * RSS each time. The floor, in the same run: a bare Node process that opens the same data directory
 * with PGlite (the same start parameters: lib/db/embedded-db.ts) and does nothing else, i.e. what
 * the embedded PostgreSQL alone costs; and the same with PGlite's own defaults (shared_buffers 128MB).
 *
 * Then "without slowing requests" (a smaller buffer pool must not make a big embedded database
 * slow): CONTACTS contacts are written into the same DATA_DIR, and a deep page of `GET /contacts`
 * (page 150 of 1000, by name; and the same filtered by a channel) is timed through `npm start`;
 * beside it, in the same run, the same page's SQL in a bare PGlite with our start parameters and
 * with PGlite's defaults (128MB): the ratio is what the smaller pool costs a deep page.
 *
 *   npm run bench:memory [-- --rounds 3 --settle 40 --contacts 200000]   (--contacts 0: skip)
 *
 * Targets: an idle start on an existing DATA_DIR at most 350 MB; a deep page's SQL at most 1.1x
 * PGlite's defaults. Last line:
 * RESULT idle_rss_mb=<median> first_start_peak_mb=<x> floor_rss_mb=<x> idle_vs_floor=<ratio> deep_page_vs_default_pool=<ratio>
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { ROOT } from "./service";

const { values } = parseArgs({
  options: { rounds: { type: "string", default: "3" }, settle: { type: "string", default: "40" }, contacts: { type: "string", default: "200000" } },
});
const ROUNDS = Number(values.rounds);
const CONTACTS = Number(values.contacts);
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

/**
 * A bare Node process holding PGlite open on `dataDir` with our start parameters or PGlite's
 * defaults, running `work` (the body of an async function of `db`, its answer printed as JSON).
 */
async function bare(dataDir: string, params: "ours" | "defaults", work: string): Promise<{ child: ChildProcess; out: unknown }> {
  const script = `
    const { PGlite } = require("@electric-sql/pglite");
    const { pg_trgm } = require("@electric-sql/pglite/contrib/pg_trgm");
    const { EMBEDDED_SHARED_BUFFERS } = require(${JSON.stringify(path.join(ROOT, "lib/db/embedded-db.ts"))});
    const startParams = ${params === "ours" ? `[...PGlite.defaultStartParams, "-c", "shared_buffers=" + EMBEDDED_SHARED_BUFFERS]` : "undefined"};
    PGlite.create({ dataDir: process.argv[1], extensions: { pg_trgm }, ...(startParams ? { startParams } : {}) })
      .then(async (db) => { await db.query("SELECT count(*) FROM schema_migrations"); return (async (db) => { ${work} })(db); })
      .then((out) => { process.stdout.write("ready " + JSON.stringify(out ?? null) + "\\n"); setInterval(() => {}, 1000); });`;
  const child = spawn(NODE, ["--import", "tsx", "-e", script, path.join(dataDir, "pgdata")], { cwd: ROOT, stdio: ["ignore", "pipe", "inherit"] });
  children.add(child);
  const out = await new Promise<unknown>((resolve, reject) => {
    let buf = "";
    child.stdout!.on("data", (d: Buffer) => {
      buf += d.toString();
      const m = buf.match(/^ready (.*)$/m);
      if (m) resolve(JSON.parse(m[1]!));
    });
    child.once("exit", (code) => reject(new Error(`bare PGlite exited with ${code}`)));
  });
  return { child, out };
}

/** The floor: a bare PGlite on `dataDir`, idle, its RSS after SETTLE seconds. */
async function floor(dataDir: string, params: "ours" | "defaults"): Promise<number> {
  const { child } = await bare(dataDir, params, "return null;");
  await sleep(SETTLE_MS);
  const rss = mb(child.pid!, "VmRSS");
  await stop(child);
  return rss;
}

const COMPANY = "bench-memory-pages";
/** GET /contacts's page 150 of 1000 by name (contacts.queries.ts: the ids from the sort's index, then the rows). */
const pageSql = (filter: string) =>
  `SELECT c.* FROM contacts c JOIN (SELECT c.company_id, c.id FROM contacts c WHERE c.company_id = '${COMPANY}' ${filter}
     ORDER BY lower(nullif(c.full_name, '')) ASC NULLS LAST, c.id ASC LIMIT 1000 OFFSET 149000) page USING (company_id, id)
     ORDER BY lower(nullif(c.full_name, '')) ASC NULLS LAST, c.id ASC`;
const RCS = "AND 'RCS' = ANY (c.communication_supported)";

/** Writes CONTACTS contacts of COMPANY into the DATA_DIR's database (names and channels varied). */
async function seedContacts(dataDir: string): Promise<void> {
  const { child } = await bare(
    dataDir,
    "ours",
    `await db.query(\`INSERT INTO contacts (id, company_id, first_name, last_name, phone_number, email, communication_supported)
       SELECT gen_random_uuid(), '${COMPANY}', 'First' || (i * 7919 % ${CONTACTS}), 'Last' || (i % 997), '+4915' || lpad(i::text, 9, '0'),
              'c' || i || '@example.com', CASE WHEN i % 2 = 0 THEN ARRAY['SMS', 'RCS'] ELSE ARRAY['SMS'] END
       FROM generate_series(1, ${CONTACTS}) i\`);
     await db.query("ANALYZE contacts"); return null;`,
  );
  await stop(child);
}

/** The deep pages' SQL in a bare PGlite: milliseconds, median of 15 after 3 warm-ups, per query. */
async function pagesSql(dataDir: string, params: "ours" | "defaults"): Promise<{ byName: number; rcs: number }> {
  const time = (
    sql: string,
  ) => `(async () => { const t = []; for (let i = 0; i < 18; i++) { const s = performance.now(); await db.query(${JSON.stringify(sql)}); t.push(performance.now() - s); }
     t.splice(0, 3); t.sort((a, b) => a - b); return t[Math.floor(t.length / 2)]; })()`;
  const { child, out } = await bare(dataDir, params, `return { byName: await ${time(pageSql(""))}, rcs: await ${time(pageSql(RCS))} };`);
  await stop(child);
  return out as { byName: number; rcs: number };
}

/** The admin command's environment: the embedded database in `dataDir` (the running start's, through its socket). */
function adminEnv(dataDir: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: "warn" };
  delete env.DATABASE_URL;
  delete env.TRANSPORTER;
  return env;
}

/** The same deep pages through `npm start` (HTTP, an API key of COMPANY): median of 15 after 3 warm-ups. */
async function pagesHttp(dataDir: string, port: number): Promise<{ byName: number; rcs: number }> {
  const child = await start(dataDir, port);
  try {
    const apiKey = (
      JSON.parse(
        execFileSync("sh", ["-c", `exec node --import tsx scripts/admin.ts keys:create --company ${COMPANY} --operations ALL`], {
          cwd: ROOT,
          env: adminEnv(dataDir),
          encoding: "utf8",
        }),
      ) as { apiKey: string }
    ).apiKey;
    const time = async (query: string) => {
      const t: number[] = [];
      for (let i = 0; i < 18; i++) {
        const s = performance.now();
        const res = await fetch(`http://127.0.0.1:${port}/api/partner-gateway/v1/contacts?${query}`, { headers: { "x-api-key": apiKey } });
        if (!res.ok) throw new Error(`GET /contacts?${query}: ${res.status} ${await res.text()}`);
        await res.arrayBuffer();
        t.push(performance.now() - s);
      }
      return median(t.slice(3));
    };
    return { byName: await time("page=150&limit=1000"), rcs: await time("page=150&limit=1000&communicationSupported=RCS") };
  } finally {
    await stop(child);
  }
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
    let deep = "";
    if (CONTACTS > 0) {
      await seedContacts(dataDir);
      // Alternated, three processes each (the first one also warms the operating system's cache): the median of each.
      const runs: Record<"ours" | "defaults", { byName: number; rcs: number }[]> = { ours: [], defaults: [] };
      for (let i = 0; i < 3; i++) for (const params of ["defaults", "ours"] as const) runs[params].push(await pagesSql(dataDir, params));
      const mid = (xs: { byName: number; rcs: number }[]) => ({ byName: median(xs.map((x) => x.byName)), rcs: median(xs.map((x) => x.rcs)) });
      const sqlOurs = mid(runs.ours);
      const sqlDefaults = mid(runs.defaults);
      const http = await pagesHttp(dataDir, port);
      const f = (x: number) => x.toFixed(1);
      console.log(
        `${CONTACTS} contacts, GET /contacts page 150 of 1000 by name: npm start ${f(http.byName)} ms; its SQL ${f(sqlOurs.byName)} ms, ${f(sqlDefaults.byName)} ms with PGlite's 128MB pool`,
      );
      console.log(`the same filtered by RCS: npm start ${f(http.rcs)} ms; its SQL ${f(sqlOurs.rcs)} ms, ${f(sqlDefaults.rcs)} ms with PGlite's 128MB pool`);
      const ratio = Math.max(sqlOurs.byName / sqlDefaults.byName, sqlOurs.rcs / sqlDefaults.rcs);
      console.log(
        `deep page SQL, our pool against PGlite's default (the worse of the two): ${ratio.toFixed(2)}x; target <= 1.1x: ${ratio <= 1.1 ? "met" : "not met"}`,
      );
      deep = ` deep_page_vs_default_pool=${ratio.toFixed(2)}`;
    }
    console.log(`RESULT idle_rss_mb=${m} first_start_peak_mb=${firstPeak} floor_rss_mb=${ours} idle_vs_floor=${(m / ours).toFixed(2)}${deep}`);
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
