/**
 * PGlite served to PostgreSQL clients (`pg`, Sequelize) on a loopback port. PGlite has one session,
 * so the server lends it to one connection at a time and never interleaves two connections' batches
 * or transactions; it asks for a cleartext password (the socket is loopback only).
 */
import type { PGlite } from "@electric-sql/pglite";
import { createHash, timingSafeEqual } from "node:crypto";
import net from "node:net";
import { setTimeout as sleep } from "node:timers/promises";

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
export class EmbeddedSocketServer {
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
