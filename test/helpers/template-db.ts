/**
 * Migrated once, copied per file: every test file used to create a database and run every migration
 * on it (seconds on PostgreSQL, tens of seconds on PGlite when the machine is busy). Here the
 * migrations run once per content of migrations/ into a template, and each file starts from a copy:
 *  - PostgreSQL: a template database `pgw_tmpl_<hash>`, cloned by `CREATE DATABASE x TEMPLATE`;
 *  - PGlite: a `dumpDataDir` tarball in the temporary directory, loaded by each in-memory PGlite.
 * The hash covers every file under migrations/ (and, for PGlite, its version), so a changed or added
 * migration builds a new template; openDatabase still runs `migrate` on the copy, which finds nothing
 * pending. Parallel jest workers (and parallel runs) build a template once: PostgreSQL under an
 * advisory lock, PGlite under a file lock, and the finished template appears under its final name
 * in one step (a rename), so nobody ever copies a half-built one.
 */
import { PGlite } from "@electric-sql/pglite";
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm";
import { spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import lockfile from "proper-lockfile";
import { openDatabase } from "../../lib/db/db";

const MIGRATIONS_DIR = path.join(__dirname, "../../migrations");
/** Builds of templates take this advisory lock (any hash: a build also clears crashed builds' leftovers). */
const TEMPLATE_LOCK_KEY = "7234567890123456790";

function filesUnder(dir: string): string[] {
  return fs
    .readdirSync(dir, { withFileTypes: true })
    .flatMap((e) => (e.isDirectory() ? filesUnder(path.join(dir, e.name)) : e.isFile() ? [path.join(dir, e.name)] : []))
    .sort();
}

let cachedHash: string | null = null;

/** A short hash of every file under migrations/ (names and contents). */
export function migrationsHash(): string {
  if (cachedHash) return cachedHash;
  const h = createHash("sha256");
  for (const file of filesUnder(MIGRATIONS_DIR)) {
    h.update(path.relative(MIGRATIONS_DIR, file)).update("\0").update(fs.readFileSync(file)).update("\0");
  }
  return (cachedHash = h.digest("hex").slice(0, 16));
}

async function withAdmin<T>(adminUrl: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: adminUrl });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end().catch(() => undefined);
  }
}

const exists = async (c: pg.Client, name: string) => (await c.query("SELECT 1 FROM pg_database WHERE datname = $1", [name])).rowCount === 1;

const urlOfDb = (adminUrl: string, name: string) => {
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
};

/**
 * The name of the migrated template database on the PostgreSQL at `adminUrl`, built when missing.
 * Nobody connects to it once built (CREATE DATABASE ... TEMPLATE needs it idle).
 */
export async function pgTemplate(adminUrl: string): Promise<string> {
  const name = `pgw_tmpl_${migrationsHash()}`;
  if (await withAdmin(adminUrl, (c) => exists(c, name))) return name;
  await withAdmin(adminUrl, async (c) => {
    await c.query("SELECT pg_advisory_lock($1::bigint)", [TEMPLATE_LOCK_KEY]);
    try {
      if (await exists(c, name)) return; // another worker built it while this one waited
      // A build that died half-way (its process killed) left its database: nobody else builds now.
      const stale = await c.query<{ datname: string }>("SELECT datname FROM pg_database WHERE datname LIKE 'pgw\\_tmplbuild\\_%'");
      for (const r of stale.rows) await c.query(`DROP DATABASE IF EXISTS ${r.datname} WITH (FORCE)`);
      const build = `pgw_tmplbuild_${migrationsHash()}_${randomBytes(3).toString("hex")}`;
      await c.query(`CREATE DATABASE ${build}`);
      const db = await openDatabase({ databaseUrl: urlOfDb(adminUrl, build), dataDir: null, poolMax: 2 });
      await db.close();
      // Renaming waits (up to 5 s) for the closed connections' backends to exit.
      await c.query(`ALTER DATABASE ${build} RENAME TO ${name}`);
      await c.query(`ALTER DATABASE ${name} WITH IS_TEMPLATE true`);
    } finally {
      await c.query("SELECT pg_advisory_unlock($1::bigint)", [TEMPLATE_LOCK_KEY]).catch(() => undefined);
    }
  });
  return name;
}

const SNAPSHOT_DIR = path.join(os.tmpdir(), "pgw-test-snapshots");

/** PGlite's version (its package has an exports map, so its package.json is found from its entry). */
function pgliteVersion(): string {
  for (let dir = path.dirname(require.resolve("@electric-sql/pglite")); dir !== path.dirname(dir); dir = path.dirname(dir)) {
    const file = path.join(dir, "package.json");
    if (!fs.existsSync(file)) continue;
    const pkg = JSON.parse(fs.readFileSync(file, "utf8")) as { name?: string; version?: string };
    if (pkg.name === "@electric-sql/pglite" && pkg.version) return pkg.version;
  }
  throw new Error("cannot find @electric-sql/pglite's package.json");
}

/** Answers the migrated PGlite snapshot (a dumpDataDir tarball), building it first when missing. */
export async function pgliteSnapshot(): Promise<Blob> {
  return new Blob([fs.readFileSync(await pgliteSnapshotFile())]);
}

/**
 * A new DATA_DIR whose embedded database is already created and migrated: the snapshot unpacked
 * where the product keeps it (DATA_DIR/pgdata), as if a first `npm start` had run there. For the
 * files whose subject is not the first start: that one spends about 8 s of CPU in PGlite's initdb
 * and the migrations, while unpacking takes a tenth of a second (readme-walk, dist and
 * start-output's first start still begin from nothing).
 */
export async function seededDataDir(prefix = "pgw-data-"): Promise<string> {
  const file = await pgliteSnapshotFile();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  const pgdata = path.join(dir, "pgdata");
  fs.mkdirSync(pgdata);
  const tar = spawnSync("tar", ["-xzf", file, "-C", pgdata], { encoding: "utf8" });
  if (tar.status !== 0) throw new Error(`tar could not unpack ${file}: ${tar.stderr || tar.error?.message}`);
  return dir;
}

/** The migrated PGlite snapshot's file, built first when missing. */
async function pgliteSnapshotFile(): Promise<string> {
  const file = path.join(SNAPSHOT_DIR, `pglite-${pgliteVersion()}-${migrationsHash()}.tar.gz`);
  if (fs.existsSync(file)) return file;
  fs.mkdirSync(SNAPSHOT_DIR, { recursive: true });
  // The lock is refreshed by its holder (every 5 s), so a long build under load never goes stale;
  // a holder that died is taken over after 30 s.
  const release = await lockfile.lock(SNAPSHOT_DIR, {
    lockfilePath: path.join(SNAPSHOT_DIR, "build.lock"),
    realpath: false,
    stale: 30_000,
    update: 5_000,
    retries: { retries: 1000, minTimeout: 100, maxTimeout: 500 },
  });
  try {
    if (fs.existsSync(file)) return file;
    const dir = fs.mkdtempSync(path.join(SNAPSHOT_DIR, "build-"));
    try {
      // Migrated through the product's own path (openDatabase on a data directory), then dumped.
      const db = await openDatabase({ databaseUrl: null, dataDir: dir, role: "admin" });
      await db.close();
      const pglite = await PGlite.create({ dataDir: path.join(dir, "pgdata"), extensions: { pg_trgm } });
      try {
        const blob = await pglite.dumpDataDir("gzip");
        const tmp = `${file}.${process.pid}.tmp`;
        fs.writeFileSync(tmp, Buffer.from(await blob.arrayBuffer()));
        fs.renameSync(tmp, file);
      } finally {
        await pglite.close();
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    return file;
  } finally {
    await release();
  }
}
