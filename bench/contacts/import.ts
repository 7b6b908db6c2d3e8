/**
 * bench/contacts part b: a CSV import end to end against `psql \copy` of the same rows, in the same
 * run, on the same fresh PostgreSQL database and table (same indexes).
 *
 * For each size: writes a CSV of N contacts (names, phone numbers in international format, emails,
 * gender); loads the same rows with `psql \copy` (the floor: no parsing of phone numbers, no
 * matching, no HTTP); empties the table; starts `npm start` on the database (whole process, a
 * fresh one per size so that its peak RSS is the import's), uploads the file through the gateway
 * and polls until the import is COMPLETED. Prints rows/s of both, their ratio, and the service
 * process's resident memory before and at its peak (VmHWM).
 *
 *   npm run bench:contacts:import [-- --sizes 100000,1000000] [--max-old-space-mb 96]
 *
 * --max-old-space-mb: a heap limit for the service process's main thread (the import's worker
 * threads have their own, resourceLimits in contacts.runner.ts): memory that grows with the file
 * would end the import; garbage V8 merely has not collected yet is collected sooner.
 *   BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres (default)
 *   BENCH_IMPORT_NODE_OPTIONS="--cpu-prof --cpu-prof-dir=/tmp/prof": Node options of the service process.
 *
 * Targets: import at least 0.25x the \copy rate; peak RSS under 300 MB and no higher for 1,000,000
 * rows than for 100,000.
 */
import { execFileSync } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import { createWriteStream, openAsBlob, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { once } from "node:events";
import { parseArgs } from "node:util";
import pg from "pg";
import { createBenchDatabase } from "../database";
import { startService } from "../service";

const { values } = parseArgs({ options: { sizes: { type: "string", default: "100000,1000000" }, "max-old-space-mb": { type: "string" } } });
const NODE_OPTIONS = [values["max-old-space-mb"] ? `--max-old-space-size=${values["max-old-space-mb"]}` : "", process.env.BENCH_IMPORT_NODE_OPTIONS ?? ""]
  .filter(Boolean)
  .join(" ");
const HEAP: Record<string, string> = NODE_OPTIONS ? { NODE_OPTIONS } : {};
const SIZES = values.sizes!.split(",").map(Number);

const FIRST = ["Ana", "Bruno", "Carla", "David", "Eva", "Filipe", "Gabriela", "Hugo", "Ines", "Joao"];
const LAST = ["Silva", "Santos", "Ferreira", "Pereira", "Oliveira", "Costa", "Rodrigues", "Martins", "Jesus", "Sousa"];
const GENDER = ["MALE", "FEMALE", "OTHER"];

/** The partner's file, and the same rows as \copy needs them (id and account added, phone already E.164). */
async function writeFiles(n: number, dir: string) {
  const upload = createWriteStream(path.join(dir, "contacts.csv"));
  const copy = createWriteStream(path.join(dir, "copy.csv"));
  upload.write("firstName,lastName,phoneNumber,email,gender\n");
  for (let i = 1; i <= n; i++) {
    const first = FIRST[i % 10]!;
    const last = `${LAST[Math.floor(i / 10) % 10]} ${i}`;
    const digits = String(i).padStart(8, "0");
    const email = `user${i}@example.com`;
    const gender = GENDER[i % 3]!;
    const a = upload.write(`${first},${last},+49 30 ${digits},${email},${gender}\n`);
    const b = copy.write(`${randomUUID()},copy,${first},${last},+4930${digits},${email},${gender}\n`);
    if (!a) await once(upload, "drain");
    if (!b) await once(copy, "drain");
  }
  upload.end();
  copy.end();
  await Promise.all([once(upload, "finish"), once(copy, "finish")]);
}

function kib(pid: number, field: "VmRSS" | "VmHWM"): number {
  const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) : NaN;
}

async function startContacts(dbUrl: string) {
  const importDir = path.join(os.tmpdir(), `pgw-bench-imports-${randomBytes(3).toString("hex")}`);
  const svc = await startService(dbUrl, 3990 + Math.floor(Math.random() * 9), { IMPORT_DIR: importDir, ...HEAP });
  return {
    ...svc,
    key: svc.adminKey("bench", "CONTACTS"),
    async stop() {
      await svc.stop();
      rmSync(importDir, { recursive: true, force: true });
    },
  };
}

async function main() {
  const benchDb = await createBenchDatabase();
  const dbUrl = benchDb.url;
  const dir = path.join(os.tmpdir(), `pgw-bench-${randomBytes(3).toString("hex")}`);
  execFileSync("mkdir", ["-p", dir]);
  const db = new pg.Client({ connectionString: dbUrl });
  try {
    // Migrate once (a service start does it), so that \copy meets the real table.
    await (await startContacts(dbUrl)).stop();
    await db.connect();
    console.log(
      `bench/contacts import: CSV upload through the gateway vs psql \\copy of the same rows into the same table (PostgreSQL, ${os.cpus().length} cores)`,
    );
    for (const n of SIZES) {
      await writeFiles(n, dir);
      await db.query("TRUNCATE contacts CASCADE");
      const c0 = performance.now();
      execFileSync("psql", [
        dbUrl,
        "-q",
        "-c",
        `\\copy contacts (id, company_id, first_name, last_name, phone_number, email, gender) FROM '${path.join(dir, "copy.csv")}' CSV`,
      ]);
      const copyS = (performance.now() - c0) / 1000;
      await db.query("TRUNCATE contacts CASCADE");
      await db.query("VACUUM ANALYZE contacts");

      const svc = await startContacts(dbUrl);
      const rssBefore = kib(svc.pid, "VmRSS");
      const t0 = performance.now();
      const form = new FormData();
      form.append("file", await openAsBlob(path.join(dir, "contacts.csv")), "contacts.csv");
      const res = await fetch(`http://127.0.0.1:${svc.port}/api/partner-gateway/v1/contacts/upload`, {
        method: "POST",
        headers: { "x-api-key": svc.key },
        body: form,
      });
      const accepted = (await res.json()) as { importId: string };
      if (res.status !== 202) throw new Error(`upload answered ${res.status}: ${JSON.stringify(accepted)}`);
      const uploadS = (performance.now() - t0) / 1000;
      let state: { status: string; created: number; skipped: number; failureReason: string | null };
      for (;;) {
        await new Promise((r) => setTimeout(r, 100));
        const r = await fetch(`http://127.0.0.1:${svc.port}/api/partner-gateway/v1/contacts/imports/${accepted.importId}`, {
          headers: { "x-api-key": svc.key },
        });
        state = (await r.json()) as typeof state;
        if (state.status === "COMPLETED" || state.status === "FAILED") break;
      }
      const importS = (performance.now() - t0) / 1000;
      const peak = kib(svc.pid, "VmHWM");
      await svc.stop();
      if (state.status !== "COMPLETED" || state.created !== n)
        throw new Error(`import ended ${state.status}: created ${state.created}, skipped ${state.skipped}, ${state.failureReason}`);
      const copyRate = n / copyS;
      const importRate = n / importS;
      console.log(
        `${n.toLocaleString().padStart(9)} rows: import ${importS.toFixed(1)} s (${Math.round(importRate).toLocaleString()} rows/s; upload answered 202 after ${uploadS.toFixed(2)} s) | ` +
          `\\copy ${copyS.toFixed(1)} s (${Math.round(copyRate).toLocaleString()} rows/s) | ratio ${(importRate / copyRate).toFixed(2)} (target >= 0.25) | ` +
          `service RSS ${(rssBefore / 1024).toFixed(0)} MB at start, peak ${(peak / 1024).toFixed(0)} MB (target < 300 MB, flat with size)`,
      );
    }
  } finally {
    await db.end().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
    await benchDb.drop();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
