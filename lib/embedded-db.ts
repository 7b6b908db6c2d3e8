/**
 * Embedded PostgreSQL: PGlite under DATA_DIR, served to `pg`/Sequelize on a loopback port by
 * EmbeddedSocketServer (below). PGlite admits one process per data directory, so the directory is
 * guarded by a lock (proper-lockfile), and its holder publishes who it is and, for a running
 * service, its port (embedded-db.json): the admin command connects there when the service runs,
 * and opens the directory itself (holding the lock) when it does not. Never two openers at once.
 * The socket asks for a password generated once per data directory (embedded-db.secret, mode 0600).
 */
import { PGlite } from "@electric-sql/pglite";
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm";
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import fs from "node:fs";
import net from "node:net";
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
 * Opens the embedded database. `dataDir: null` is an in-memory database (tests): no lock, no files.
 */
export async function openEmbedded(dataDir: string | null, role: OpenerRole, waitMs = 30000): Promise<EmbeddedServer> {
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
    // pg_trgm: the extensions the migrations use must be loaded into PGlite here.
    db = await PGlite.create({ ...(dataDir ? { dataDir: path.join(dataDir, "pgdata") } : {}), extensions: { pg_trgm } });
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

const SSL_REQUEST = 80877103;
const GSSENC_REQUEST = 80877104;
const PROTOCOL_3 = 196608;
const MAX_MESSAGE = 1 << 30;
const SYNC = Buffer.from([0x53, 0, 0, 0, 4]);
const ROLLBACK = typed("Q", Buffer.from("ROLLBACK\0"));
const ASK_PASSWORD = Buffer.from([0x52, 0, 0, 0, 8, 0, 0, 0, 3]); // AuthenticationCleartextPassword

function typed(type: string, body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.write(type, 0, "latin1");
  head.writeInt32BE(4 + body.length, 1);
  return Buffer.concat([head, body]);
}

/** A FATAL ErrorResponse (the client reports it and the connection ends). */
const fatal = (code: string, message: string) => typed("E", Buffer.from(`SFATAL\0VFATAL\0C${code}\0M${message}\0\0`));

/** The one PGlite session, lent to one connection at a time, first come first served. */
class Turns {
  private held = false;
  private readonly waiting: (() => void)[] = [];
  take(): Promise<void> {
    if (!this.held) {
      this.held = true;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.waiting.push(resolve));
  }
  give(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.held = false;
  }
}

/** Reads the backend's messages as they stream past and keeps the status of the last ReadyForQuery. */
class ReadyScanner {
  status: string | null = null;
  private head: Buffer = Buffer.alloc(0);
  private skip = 0;
  private ready = false;
  feed(chunk: Uint8Array): void {
    let i = 0;
    while (i < chunk.length) {
      if (this.skip > 0) {
        if (this.ready) this.status = String.fromCharCode(chunk[i]!);
        this.ready = false;
        const n = Math.min(this.skip, chunk.length - i);
        this.skip -= n;
        i += n;
        continue;
      }
      const take = Math.min(5 - this.head.length, chunk.length - i);
      this.head = Buffer.concat([this.head, chunk.subarray(i, i + take)]);
      i += take;
      if (this.head.length < 5) return;
      this.ready = this.head[0] === 0x5a; // 'Z'
      this.skip = this.head.readInt32BE(1) - 4;
      this.head = Buffer.alloc(0);
    }
  }
}

/**
 * One client connection. Its messages go to PGlite one by one, and from its first message until
 * the backend answers ReadyForQuery with no transaction open it holds the session's turn: an
 * extended-protocol batch (Parse/Bind/Execute/Sync) or a transaction is never interleaved with
 * another connection's (the shared session has one unnamed statement and one transaction).
 */
class Connection {
  private buf: Buffer = Buffer.alloc(0);
  private phase: "startup" | "password" | "ready" = "startup";
  private startup: Buffer | null = null;
  private holding = false;
  private pumping = false;
  private closed = false;

  constructor(
    readonly socket: net.Socket,
    private readonly db: PGlite,
    private readonly turns: Turns,
    private readonly password: Buffer,
    /** Resolves once the connection is closed and has given the session back. */
    private readonly onDone: () => void,
  ) {
    socket.setNoDelay(true);
    socket.on("data", (d: Buffer) => {
      this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
      void this.pump();
    });
    socket.on("error", () => undefined);
    socket.on("close", () => {
      this.closed = true;
      void this.pump();
    });
  }

  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      for (;;) {
        if (this.closed) {
          await this.giveBack();
          this.onDone();
          return;
        }
        const msg = this.next();
        if (!msg) return;
        await this.handle(msg);
      }
    } catch (err) {
      // PGlite threw (not an SQL error: those are answers): this connection ends, the others go on.
      if (this.socket.writable) this.socket.write(fatal("XX000", (err as Error).message ?? String(err)));
      this.socket.destroy();
      this.closed = true;
      await this.giveBack();
      this.onDone();
    } finally {
      this.pumping = false;
    }
  }

  /** The next whole message in the buffer (untyped before startup), or null. */
  private next(): Buffer | null {
    const typedMsg = this.phase !== "startup";
    const headLen = typedMsg ? 5 : 8;
    if (this.buf.length < headLen) return null;
    const len = typedMsg ? 1 + this.buf.readInt32BE(1) : this.buf.readInt32BE(0);
    if (len < headLen || len > MAX_MESSAGE) throw new Error(`invalid message length ${len}`);
    if (this.buf.length < len) return null;
    const msg = this.buf.subarray(0, len);
    this.buf = this.buf.subarray(len);
    return msg;
  }

  private async handle(msg: Buffer): Promise<void> {
    if (this.phase === "startup") {
      const code = msg.readInt32BE(4);
      if (code === SSL_REQUEST || code === GSSENC_REQUEST) {
        this.socket.write("N");
      } else if (code === PROTOCOL_3) {
        this.startup = Buffer.from(msg);
        this.phase = "password";
        this.socket.write(ASK_PASSWORD);
      } else {
        this.socket.end(); // CancelRequest (not supported) or an unknown protocol
      }
      return;
    }
    if (this.phase === "password") {
      const given = msg[0] === 0x70 ? msg.subarray(5, msg.length - 1) : Buffer.alloc(0); // 'p'
      const digest = (b: Buffer) => createHash("sha256").update(b).digest();
      if (!timingSafeEqual(digest(given), digest(this.password))) {
        this.socket.end(fatal("28P01", 'password authentication failed for user "postgres"'));
        this.buf = Buffer.alloc(0);
        return;
      }
      this.phase = "ready";
      await this.run(this.startup!);
      this.startup = null;
      return;
    }
    if (msg[0] === 0x58) {
      this.socket.end(); // Terminate: the session is shared, so it is not PGlite's to see
      return;
    }
    await this.run(msg);
  }

  /** Runs one message on the session, holding the turn until the backend is idle outside a transaction. */
  private async run(msg: Buffer): Promise<void> {
    if (!this.holding) {
      await this.turns.take();
      this.holding = true;
    }
    if (this.closed) return;
    const scan = new ReadyScanner();
    await this.db.runExclusive(() =>
      this.db.execProtocolRawStream(msg, {
        onRawData: (data) => {
          scan.feed(data);
          if (this.socket.writable) this.socket.write(Buffer.from(data));
        },
      }),
    );
    if (scan.status === "I") {
      this.holding = false;
      this.turns.give();
    }
  }

  /** Ends what the connection left open on the session (a batch without Sync, a transaction), then passes the turn on. */
  private async giveBack(): Promise<void> {
    if (!this.holding) return;
    try {
      const scan = new ReadyScanner();
      scan.feed(await this.db.runExclusive(() => this.db.execProtocolRaw(SYNC)));
      if (scan.status !== "I") await this.db.runExclusive(() => this.db.execProtocolRaw(ROLLBACK));
    } catch {
      // the session is closing, or broken: the next connection's own answer says which
    } finally {
      this.holding = false;
      this.turns.give();
    }
  }
}

/** PGlite served to PostgreSQL clients on a loopback port, one connection's turn at a time. */
class EmbeddedSocketServer {
  private readonly server: net.Server;
  private readonly turns = new Turns();
  private readonly open = new Map<Connection, Promise<void>>();

  constructor(db: PGlite, password: string) {
    const secret = Buffer.from(password);
    this.server = net.createServer((socket) => {
      let done!: () => void;
      const closed = new Promise<void>((resolve) => (done = resolve));
      const conn = new Connection(socket, db, this.turns, secret, () => done());
      this.open.set(conn, closed);
      void closed.then(() => this.open.delete(conn));
    });
    this.server.maxConnections = 64;
  }

  /** Listens on an ephemeral loopback port and answers it. */
  listen(): Promise<number> {
    return new Promise((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(0, "127.0.0.1", () => resolve((this.server.address() as net.AddressInfo).port));
    });
  }

  /** Stops listening, ends every connection and waits (a bounded time) until each has given the session back. */
  async close(): Promise<void> {
    const stopped = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const conn of this.open.keys()) conn.socket.destroy();
    await Promise.race([Promise.all(this.open.values()), sleep(5000)]);
    await stopped;
  }
}
