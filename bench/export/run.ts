/**
 * bench/export: the message-history export end to end, whole processes, on PostgreSQL.
 *
 * Seeds SMALL (100,000) and BIG (1,000,000) sent messages in two accounts with one set-based
 * INSERT each. Then, per size, fresh `npm start` processes as k8s runs them: a gateway node
 * (gateway, auth, tracking) and an exports node (EXPORT_WORKERS at its default), joined over the
 * NATS at BENCH_NATS_URL (default nats://127.0.0.1:4222); with `--together`, every service in one
 * process instead (embedded-style, the pool beside the gateway). Then:
 *  - export time: POST /messages/history/export to the moment GET /exports/{id} answers 200
 *    (polled every 20 ms), as rows/s;
 *  - floor, in the same run: `psql -c "\copy (<the same SELECT the export runs>) TO file CSV HEADER"`;
 *  - the exports process's peak RSS (VmHWM: main thread and worker threads), at each size;
 *  - at BIG: p99 of GET /messages/status (one request at a time) while idle, then during the export.
 * Targets: ratio >= 0.5; peak RSS < 250 MB and within 10 % between sizes; p99 during <= 2x idle.
 *
 *   npm run bench:export [-- --small 100000 --big 1000000] [--together]
 *   BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres (default)
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs, promisify } from "node:util";
import pg from "pg";
import { messageExportSelect } from "../../services/tracking/tracking.export";
import { createBenchDatabase } from "../database";
import { startService, type BenchService } from "../service";

const { values } = parseArgs({
  options: { small: { type: "string", default: "100000" }, big: { type: "string", default: "1000000" }, together: { type: "boolean", default: false } },
});
const TOGETHER = values.together;
const NATS = process.env.BENCH_NATS_URL ?? "nats://127.0.0.1:4222";
const SMALL = Number(values.small);
const BIG = Number(values.big);
const API = "/api/partner-gateway/v1";

function kib(pid: number, field: "VmRSS" | "VmHWM"): number {
  const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m![1]);
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

async function seed(db: pg.Client, company: string, rows: number) {
  await db.query(
    `INSERT INTO messages (company_id, channel, customer_message_id, destination, sent_at, total_parts, text, campaign_id, status_code, delivery_date, price)
     SELECT $1, (ARRAY['SMS','RCS','WHATSAPP'])[1 + i % 3], 'msg-' || i, '+35191' || lpad(i::text, 7, '0'),
            timestamptz '2026-11-01' + (i || ' seconds')::interval, 1 + (i % 4 = 0)::int,
            CASE WHEN i % 10 = 0 THEN '=SUM(A1)' ELSE 'Your order ' || i || ' has shipped, track it at https://ex.am/p/' || i END,
            CASE WHEN i % 5 = 0 THEN 'campaign-' || (i % 50) END,
            CASE WHEN i % 3 = 0 THEN 3 WHEN i % 3 = 1 THEN 1 ELSE 0 END,
            CASE WHEN i % 3 = 0 THEN timestamptz '2026-11-01' + (i || ' seconds')::interval + interval '4 seconds' END,
            CASE WHEN i % 3 = 0 THEN 0.045 END
       FROM generate_series(1, $2::int) AS i`,
    [company, rows],
  );
}

/** The floor: psql writing the same SELECT to a file (best of two). */
async function psqlCopy(url: string, company: string, dir: string, times = 2): Promise<number> {
  const sql = messageExportSelect("MESSAGE_HISTORY", company, {}).replace(/\s+/g, " ");
  const file = path.join(dir, `${company}.csv`);
  let best = Infinity;
  for (let i = 0; i < times; i++) {
    const t0 = performance.now();
    await promisify(execFile)("psql", [url, "-v", "ON_ERROR_STOP=1", "-c", `\\copy (${sql}) TO '${file}' CSV HEADER`], { maxBuffer: 1 << 20 });
    best = Math.min(best, performance.now() - t0);
  }
  rmSync(file);
  return best;
}

async function get(port: number, p: string, key: string) {
  const r = await fetch(`http://127.0.0.1:${port}${API}${p}`, { headers: { "x-api-key": key } });
  const body = await r.text();
  return { status: r.status, body };
}

/** POST -> GET /exports/{id} answers 200: ms, and the row count the job reports. */
async function exportOnce(svc: BenchService, key: string): Promise<{ ms: number; rows: number }> {
  const t0 = performance.now();
  const r = await fetch(`http://127.0.0.1:${svc.port}${API}/messages/history/export`, {
    method: "POST",
    headers: { "x-api-key": key, "content-type": "application/json" },
    body: "{}",
  });
  if (r.status !== 202) throw new Error(`export: ${r.status} ${await r.text()}`);
  const { exportId } = (await r.json()) as { exportId: string };
  for (;;) {
    const g = await get(svc.port, `/exports/${exportId}`, key);
    if (g.status === 200) break;
    if (g.status !== 409 || /FAILED/.test(g.body)) throw new Error(`export ${exportId}: ${g.status} ${g.body}`);
    await new Promise((res) => setTimeout(res, 20));
  }
  const ms = performance.now() - t0;
  const list = JSON.parse((await get(svc.port, "/exports?limit=1", key)).body) as { data: Array<{ rowCount: number }> };
  return { ms, rows: list.data[0]!.rowCount };
}

/** GET /messages/status one at a time until `until` resolves (or for `ms`): the latencies, sorted. */
async function pollLatencies(port: number, key: string, until: Promise<unknown> | number): Promise<number[]> {
  const out: number[] = [];
  let done = false;
  if (typeof until === "number") setTimeout(() => (done = true), until);
  else void until.finally(() => (done = true));
  let i = 0;
  while (!done) {
    const t0 = performance.now();
    const r = await get(port, `/messages/status/msg-${1 + ((i++ * 7919) % BIG)}?channel=SMS`, key);
    if (r.status !== 200) throw new Error(`status: ${r.status}`);
    out.push(performance.now() - t0);
    await new Promise((res) => setTimeout(res, 5));
  }
  return out.sort((a, b) => a - b);
}

async function main() {
  const benchDb = await createBenchDatabase();
  const dir = mkdtempSync(path.join(os.tmpdir(), "pgw-bench-export-"));
  const db = new pg.Client({ connectionString: benchDb.url });
  let svc: BenchService | null = null;
  let exportsNode: BenchService | null = null;
  const cluster = { TRANSPORTER: NATS, EXPORT_SIGNING_KEY: "bench-export-signing-key-0123456789abcdef" };
  console.log(TOGETHER ? "one process: every service" : "two processes over NATS: gateway,auth,tracking | exports");
  try {
    // Migrations first (a service start), then the seed.
    const port = 3900 + Math.floor(Math.random() * 40);
    const env = { EXPORT_DIR: path.join(dir, "files"), DATA_DIR: path.join(dir, "data") };
    svc = await startService(benchDb.url, port, env);
    await svc.stop();
    await db.connect();
    const t0 = performance.now();
    await seed(db, "bench-small", SMALL);
    await seed(db, "bench-big", BIG);
    await db.query("VACUUM ANALYZE messages");
    console.log(`seeded ${SMALL + BIG} messages in ${((performance.now() - t0) / 1000).toFixed(1)} s`);

    const results: Record<string, { exportMs: number; psqlMs: number; rows: number; peakMb: number; startMb: number }> = {};
    for (const [company, rows] of [
      ["bench-small", SMALL],
      ["bench-big", BIG],
    ] as const) {
      const psqlMs = await psqlCopy(benchDb.url, company, dir);
      svc = await startService(benchDb.url, port, TOGETHER ? env : { ...env, ...cluster, SERVICES: "gateway,auth,tracking" });
      exportsNode = TOGETHER ? svc : await startService(benchDb.url, port + 50, { ...env, ...cluster, SERVICES: "exports" });
      const key = svc.adminKey(company, "EXPORTS,SMS");
      // The gateway has the exports routes once the exports node has joined.
      while ((await get(svc.port, "/exports", key)).status !== 200) await new Promise((res) => setTimeout(res, 100));
      // Warm: the routes, the key cache and the status query.
      await pollLatencies(svc.port, key, 1000);
      const startMb = kib(exportsNode.pid, "VmRSS") / 1024;
      let idle: number[] = [];
      let busy: number[] = [];
      let run: { ms: number; rows: number };
      if (rows === BIG) {
        idle = await pollLatencies(svc.port, key, 5000);
        // Reference: the same load while psql alone copies the same SELECT (what the machine and PostgreSQL cost, without our pool).
        const copying = psqlCopy(benchDb.url, company, dir, 1);
        const duringPsql = await pollLatencies(svc.port, key, copying);
        await copying;
        const exporting = exportOnce(svc, key);
        busy = await pollLatencies(svc.port, key, exporting);
        run = await exporting;
        const f = (xs: number[]) => `p50 ${pct(xs, 50).toFixed(1)} ms p99 ${pct(xs, 99).toFixed(1)} ms (${xs.length} req)`;
        console.log(`  GET /messages/status: idle ${f(idle)}; during psql \\copy ${f(duringPsql)}; during the export ${f(busy)}`);
        console.log(
          `  p99 during the export / idle: ${(pct(busy, 99) / pct(idle, 99)).toFixed(2)} (target <= 2); during psql \\copy / idle: ${(pct(duringPsql, 99) / pct(idle, 99)).toFixed(2)}`,
        );
      } else {
        run = await exportOnce(svc, key);
      }
      if (run.rows !== rows) throw new Error(`export wrote ${run.rows} rows, expected ${rows}`);
      const peakMb = kib(exportsNode.pid, "VmHWM") / 1024;
      await svc.stop();
      await exportsNode.stop();
      svc = exportsNode = null;
      results[company] = { exportMs: run.ms, psqlMs, rows, peakMb, startMb };
      const rs = (rows / run.ms) * 1000;
      const ps = (rows / psqlMs) * 1000;
      console.log(
        `${rows} rows: export ${(run.ms / 1000).toFixed(2)} s = ${Math.round(rs)} rows/s; psql \\copy ${(psqlMs / 1000).toFixed(2)} s = ${Math.round(ps)} rows/s; ratio ${(rs / ps).toFixed(2)} (target >= 0.5); exports process RSS ${startMb.toFixed(0)} MB before, peak ${peakMb.toFixed(0)} MB`,
      );
    }
    const s = results["bench-small"]!;
    const b = results["bench-big"]!;
    console.log(
      `peak RSS ${s.peakMb.toFixed(0)} MB at ${SMALL} rows, ${b.peakMb.toFixed(0)} MB at ${BIG}: ${(((b.peakMb - s.peakMb) / s.peakMb) * 100).toFixed(1)} % apart (target < 250 MB, within 10 %)`,
    );
  } finally {
    await svc?.stop().catch(() => undefined);
    await exportsNode?.stop().catch(() => undefined);
    await db.end().catch(() => undefined);
    await benchDb.drop();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
