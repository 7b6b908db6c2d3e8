/**
 * Embedded PostgreSQL: PGlite under DATA_DIR, served to `pg`/Sequelize through pglite-socket on a
 * loopback port. PGlite admits one process per data directory, so the directory is guarded by a
 * lock (proper-lockfile), and its holder publishes who it is and, for a running service, its port
 * (embedded-db.json): the admin command connects there when the service runs, and opens the
 * directory itself (holding the lock) when it does not. Never two openers at once.
 */
import { PGlite } from "@electric-sql/pglite";
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm";
import { PGLiteSocketServer } from "@electric-sql/pglite-socket";
import fs from "node:fs";
import lockfile from "proper-lockfile";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

export type OpenerRole = "service" | "admin";

interface OpenerInfo {
  pid: number;
  role: OpenerRole;
  port: number | null;
  startedAt: string;
}

export interface EmbeddedServer {
  /** postgres:// URL of the socket server (ours, or the running service's). */
  url: string;
  /** True when this process holds the directory (it runs PGlite itself). */
  owner: boolean;
  close(): Promise<void>;
}

/** Who holds the directory and, for a running service, its socket port. */
export const lockFileOf = (dataDir: string) => path.join(dataDir, "embedded-db.json");
/** The lock itself (proper-lockfile: a directory whose mtime the holder keeps fresh). */
const lockDirOf = (dataDir: string) => path.join(dataDir, "embedded.lock");
const STALE_MS = 10_000;

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

function readInfo(file: string): OpenerInfo | null {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8")) as OpenerInfo;
  } catch {
    return null;
  }
}

function writeInfo(file: string, info: OpenerInfo): void {
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify(info));
  fs.renameSync(tmp, file);
}

const urlOf = (port: number) => `postgres://postgres@127.0.0.1:${port}/postgres`;

type Release = () => Promise<void>;

/**
 * Takes the data directory for `role`, with an OS-level lock (proper-lockfile: atomic mkdir, kept
 * fresh by its holder, taken over once stale, so a crashed holder never blocks for long and two
 * openers never both win). Held by a live service: an admin connects to it, a service refuses.
 * Held by anyone else (an admin, a service still starting, a holder that just died): wait.
 */
async function acquire(dataDir: string, role: OpenerRole, waitMs: number): Promise<{ owner: true; release: Release } | { owner: false; port: number }> {
  const infoFile = lockFileOf(dataDir);
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      const release = await lockfile.lock(dataDir, {
        lockfilePath: lockDirOf(dataDir),
        realpath: false,
        stale: STALE_MS,
        update: 2000,
        onCompromised: (err) => {
          process.stderr.write(`The lock on DATA_DIR ${dataDir} was lost (${err.message}); stopping so that two processes never share it.\n`);
          process.exit(1);
        },
      });
      writeInfo(infoFile, { pid: process.pid, role, port: null, startedAt: new Date().toISOString() });
      return { owner: true, release };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ELOCKED") throw e;
    }
    const info = readInfo(infoFile);
    if (info?.role === "service" && info.port && pidAlive(info.pid)) {
      if (role === "admin") return { owner: false, port: info.port };
      throw new Error(
        `DATA_DIR ${dataDir} is in use by another running service (pid ${info.pid}); embedded mode admits one process per data directory (use DATABASE_URL and TRANSPORTER to run several)`,
      );
    }
    if (Date.now() > deadline) {
      throw new Error(`DATA_DIR ${dataDir} is held by pid ${info?.pid ?? "unknown"} (${info?.role ?? "?"}); gave up waiting after ${waitMs} ms`);
    }
    await sleep(100);
  }
}

/**
 * Opens the embedded database. `dataDir: null` is an in-memory database (tests): no lock, no files.
 */
export async function openEmbedded(dataDir: string | null, role: OpenerRole, waitMs = 30000): Promise<EmbeddedServer> {
  let releaseLock: Release | null = null;
  if (dataDir) {
    fs.mkdirSync(dataDir, { recursive: true });
    const got = await acquire(dataDir, role, waitMs);
    if (!got.owner) return { url: urlOf(got.port), owner: false, close: async () => undefined };
    releaseLock = got.release;
  }
  const infoFile = dataDir ? lockFileOf(dataDir) : null;
  let db: PGlite | null = null;
  let server: PGLiteSocketServer | null = null;
  const release = async () => {
    if (infoFile && readInfo(infoFile)?.pid === process.pid) fs.rmSync(infoFile, { force: true });
    await releaseLock?.().catch(() => undefined);
    releaseLock = null;
  };
  try {
    // pg_trgm: the extensions the migrations use must be loaded into PGlite here.
    db = await PGlite.create({ ...(dataDir ? { dataDir: path.join(dataDir, "pgdata") } : {}), extensions: { pg_trgm } });
    server = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0, maxConnections: 32 });
    await server.start();
    const port = Number(server.getServerConn().split(":").pop());
    if (infoFile && role === "service") writeInfo(infoFile, { pid: process.pid, role, port, startedAt: new Date().toISOString() });
    const [d, s] = [db, server];
    let closed = false;
    return {
      url: urlOf(port),
      owner: true,
      async close() {
        if (closed) return;
        closed = true;
        try {
          await s.stop();
          await d.close();
        } finally {
          await release(); // only once PGlite has let go of the directory
        }
      },
    };
  } catch (e) {
    await server?.stop().catch(() => undefined);
    await db?.close().catch(() => undefined);
    await release();
    throw e;
  }
}
