/**
 * Embedded PostgreSQL: PGlite under DATA_DIR, served to `pg`/Sequelize through pglite-socket on a
 * loopback port. PGlite admits one process per data directory, so the directory is guarded by a
 * lock file that also publishes the running service's port: the admin command connects there when
 * the service runs, and opens the directory itself (holding the lock) when it does not. Never two
 * openers at once.
 */
import { PGlite } from "@electric-sql/pglite";
import { PGLiteSocketServer } from "@electric-sql/pglite-socket";
import fs from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

export type OpenerRole = "service" | "admin";

interface LockInfo {
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

export const lockFileOf = (dataDir: string) => path.join(dataDir, "embedded-db.json");

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

function readLock(file: string): LockInfo | null {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8")) as LockInfo;
  } catch {
    return null;
  }
}

function writeLockAtomically(file: string, info: LockInfo): void {
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify(info));
  fs.renameSync(tmp, file);
}

/** Data directories this process holds right now. */
const openHere = new Set<string>();

const urlOf = (port: number) => `postgres://postgres@127.0.0.1:${port}/postgres`;

/**
 * Takes the data directory for `role`. A service that finds another live service refuses; an admin
 * that finds a running service connects to it; anyone who finds the directory being opened or held
 * briefly by an admin waits for it (up to `waitMs`).
 */
async function acquire(dataDir: string, role: OpenerRole, waitMs: number): Promise<{ owner: true } | { owner: false; port: number }> {
  const file = lockFileOf(dataDir);
  const deadline = Date.now() + waitMs;
  let unreadableSince: number | null = null;
  for (;;) {
    try {
      const fd = fs.openSync(file, "wx");
      fs.writeSync(fd, JSON.stringify({ pid: process.pid, role, port: null, startedAt: new Date().toISOString() } satisfies LockInfo));
      fs.closeSync(fd);
      return { owner: true };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    }
    const info = readLock(file);
    if (!info) {
      // Being written right now, or left half-written by a crash: give it a moment, then clear it.
      unreadableSince ??= Date.now();
      if (Date.now() - unreadableSince > 2000) fs.rmSync(file, { force: true });
    } else if (!pidAlive(info.pid) || (info.pid === process.pid && !openHere.has(path.resolve(dataDir)))) {
      // Dead, or our own pid left by an earlier incarnation (a container restarted as pid 1): stale.
      fs.rmSync(file, { force: true });
      continue;
    } else if (info.role === "service" && info.port) {
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
  if (dataDir) {
    fs.mkdirSync(dataDir, { recursive: true });
    const got = await acquire(dataDir, role, waitMs);
    if (!got.owner) return { url: urlOf(got.port), owner: false, close: async () => undefined };
    openHere.add(path.resolve(dataDir));
  }
  const lockFile = dataDir ? lockFileOf(dataDir) : null;
  let db: PGlite | null = null;
  let server: PGLiteSocketServer | null = null;
  const release = () => {
    if (lockFile && readLock(lockFile)?.pid === process.pid) fs.rmSync(lockFile, { force: true });
    if (dataDir) openHere.delete(path.resolve(dataDir));
  };
  try {
    db = await PGlite.create(dataDir ? { dataDir: path.join(dataDir, "pgdata") } : {});
    server = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0, maxConnections: 32 });
    await server.start();
    const port = Number(server.getServerConn().split(":").pop());
    if (lockFile && role === "service") {
      writeLockAtomically(lockFile, { pid: process.pid, role, port, startedAt: new Date().toISOString() });
    }
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
          release(); // only once PGlite has let go of the directory
        }
      },
    };
  } catch (e) {
    await server?.stop().catch(() => undefined);
    await db?.close().catch(() => undefined);
    release();
    throw e;
  }
}
