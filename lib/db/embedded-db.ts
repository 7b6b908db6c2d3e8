/**
 * Embedded PostgreSQL: PGlite under DATA_DIR, served to `pg`/Sequelize on a loopback port by
 * EmbeddedSocketServer (embedded-socket.ts). PGlite admits one process per data directory, so the directory is
 * guarded by a lock (proper-lockfile), and its holder publishes who it is and, for a running
 * service, its port (embedded-db.json): the admin command connects there when the service runs,
 * and opens the directory itself (holding the lock) when it does not. Never two openers at once.
 * The socket asks for a password generated once per data directory (embedded-db.secret, mode 0600).
 */
import { PGlite } from "@electric-sql/pglite";
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm";
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import lockfile from "proper-lockfile";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { EmbeddedSocketServer } from "./embedded-socket";

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

/** shared_buffers of the embedded PostgreSQL (PGlite's default is 128MB; why 96MB: docs/operating.md, "Memory"). */
export const EMBEDDED_SHARED_BUFFERS = "96MB";

export const lockFileOf = (dataDir: string) => path.join(dataDir, "embedded-db.json");
/** The lock itself (proper-lockfile: a directory whose mtime the holder keeps fresh). */
const lockDirOf = (dataDir: string) => path.join(dataDir, "embedded.lock");
const STALE_MS = 10_000;

/** Whether a process of this machine with that pid is alive (EPERM: alive, another user's). */
export function pidAlive(pid: number): boolean {
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

const urlOf = (port: number, password: string) => `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;

/** The socket's password: generated once into the data directory (0600), or per process in memory. */
const secretFileOf = (dataDir: string) => path.join(dataDir, "embedded-db.secret");
function passwordOf(dataDir: string | null): string {
  if (!dataDir) return randomBytes(24).toString("base64url");
  const file = secretFileOf(dataDir);
  try {
    fs.writeFileSync(file, randomBytes(24).toString("base64url"), { flag: "wx", mode: 0o600 });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
  }
  return fs.readFileSync(file, "utf8").trim();
}

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
 * Opens the embedded database. `dataDir: null` is an in-memory database (tests): no lock, no files;
 * it starts from `snapshot` (a PGlite `dumpDataDir` tarball) when given, so that tests need not
 * create and migrate a database of their own each time.
 */
export async function openEmbedded(
  dataDir: string | null,
  role: OpenerRole,
  waitMs = 30000,
  snapshot?: Blob,
  /** Called before PGlite opens the directory; `created`: there was no database in it yet (initdb runs). */
  onOpening?: (created: boolean) => void,
): Promise<EmbeddedServer> {
  let releaseLock: Release | null = null;
  if (dataDir) {
    fs.mkdirSync(dataDir, { recursive: true });
    const got = await acquire(dataDir, role, waitMs);
    if (!got.owner) return { url: urlOf(got.port, passwordOf(dataDir)), owner: false, close: async () => undefined };
    releaseLock = got.release;
  }
  const infoFile = dataDir ? lockFileOf(dataDir) : null;
  let db: PGlite | null = null;
  let server: EmbeddedSocketServer | null = null;
  const release = async () => {
    if (infoFile && readInfo(infoFile)?.pid === process.pid) fs.rmSync(infoFile, { force: true });
    await releaseLock?.().catch(() => undefined);
    releaseLock = null;
  };
  try {
    onOpening?.(dataDir != null && !fs.existsSync(path.join(dataDir, "pgdata", "PG_VERSION")));
    // pg_trgm: the extensions the migrations use must be loaded into PGlite here.
    db = await PGlite.create({
      ...(dataDir ? { dataDir: path.join(dataDir, "pgdata") } : snapshot ? { loadDataDir: snapshot } : {}),
      extensions: { pg_trgm },
      // PostgreSQL's buffer pool inside PGlite's WebAssembly memory: its default, 128 MB, was most of
      // an idle `npm start`'s RSS (docs/operating.md, "Memory"). 96 MB still holds a deep page of
      // 200,000 contacts (as fast as 128 MB: bench/memory.ts); at 32 and 64 MB such pages were
      // 15-45 % slower.
      startParams: [...PGlite.defaultStartParams, "-c", `shared_buffers=${EMBEDDED_SHARED_BUFFERS}`],
    });
    const password = passwordOf(dataDir);
    server = new EmbeddedSocketServer(db, password);
    const port = await server.listen();
    if (infoFile && role === "service") writeInfo(infoFile, { pid: process.pid, role, port, startedAt: new Date().toISOString() });
    const [d, s] = [db, server];
    let closed = false;
    return {
      url: urlOf(port, password),
      owner: true,
      async close() {
        if (closed) return;
        closed = true;
        try {
          await s.close();
          await d.close();
        } finally {
          await release(); // only once PGlite has let go of the directory
        }
      },
    };
  } catch (e) {
    await server?.close().catch(() => undefined);
    await db?.close().catch(() => undefined);
    await release();
    throw e;
  }
}
