/**
 * bench/idle: what an idle `npm start` costs. Starts the whole product in one process on a fresh
 * PostgreSQL database (BENCH_DATABASE_URL), lets it settle, then for SECONDS counts the
 * transactions committed on its database (pg_stat_database: every statement outside a transaction
 * is one) and the CPU time of the process (utime + stime, every thread). Nothing is asked of it
 * meanwhile, so every statement is a background loop looking for work.
 *
 *   npm run bench:idle [-- --seconds 60 --settle 15]
 *
 * Target: a few statements a minute, not several a second.
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import pg from "pg";
import { BENCH_BASE_URL, createBenchDatabase } from "./database";
import { startService } from "./service";

const { values } = parseArgs({ options: { seconds: { type: "string", default: "60" }, settle: { type: "string", default: "15" } } });
const SECONDS = Number(values.seconds);
const SETTLE = Number(values.settle);

function cpuMs(pid: number): number {
  // Fields 14 and 15 (utime, stime) in clock ticks (100 a second), after the command in parentheses.
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) * 10;
}

async function main() {
  const db = await createBenchDatabase();
  const name = new URL(db.url).pathname.slice(1);
  const admin = new pg.Client({ connectionString: BENCH_BASE_URL });
  await admin.connect();
  const xacts = async () => {
    // Backends report their counts at most once a second: read after they have.
    await admin.query("SELECT pg_stat_clear_snapshot()");
    const { rows } = await admin.query<{ n: string }>("SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = $1", [name]);
    return Number(rows[0]!.n);
  };
  const port = 20000 + Math.floor(Math.random() * 20000);
  const service = await startService(db.url, port);
  try {
    await new Promise((r) => setTimeout(r, SETTLE * 1000));
    const [x0, c0] = [await xacts(), cpuMs(service.pid)];
    await new Promise((r) => setTimeout(r, SECONDS * 1000));
    await new Promise((r) => setTimeout(r, 1500)); // the last counts reported
    const [x1, c1] = [await xacts(), cpuMs(service.pid)];
    // Our own two reads of pg_stat_database ran on another database, not counted here.
    console.log(
      `idle npm start over ${SECONDS} s: ${x1 - x0} statements (${((x1 - x0) / SECONDS).toFixed(2)}/s), ` +
        `CPU ${c1 - c0} ms (${((c1 - c0) / SECONDS / 10).toFixed(2)} % of a core)`,
    );
  } finally {
    await service.stop();
    await admin.end();
    await db.drop();
  }
}

void main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
