/**
 * A Moleculer transporter on one loopback socket, so that `npm run repl` can join a running
 * single-process service (no TRANSPORTER) as a second node. The service is the hub: it listens on
 * 127.0.0.1 only; a REPL connects to it and must prove, before any packet is read, that it knows
 * the secret of the data directory (and the hub proves it too: mutual HMAC-SHA256 over two fresh
 * nonces, so neither side ever sends the secret). Then the hub relays packets like a tiny NATS:
 * each node keeps its own subscriptions, a packet goes to every other authenticated node, and each
 * keeps the topics it subscribed to.
 *
 * Why not Moleculer's TCP transporter: it binds every interface (no host option), its gossip
 * packets (HELLO, REQ, RES) are read by the transporter itself from anyone who connects (no
 * authentication, and no middleware hook sees them), and every node, the REPL too, must listen.
 * Why not NATS: the point of the embedded mode is no server to run.
 *
 * The hub never delivers a node's packets back to itself, and the broker keeps its own calls local
 * (hasBuiltInBalancer false, registry preferLocal), so a service alone with its hub works as it did
 * with no transporter: nothing crosses the socket until a REPL joins.
 */
import { Transporters } from "moleculer";
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import net from "node:net";

const enum Kind {
  /** hub -> client: the hub's nonce */
  Hello = 1,
  /** client -> hub: the client's nonce and its proof */
  Auth = 2,
  /** hub -> client: the hub's proof */
  Welcome = 3,
  /** hub -> client: refused (utf8 reason), then the hub closes */
  Deny = 4,
  /** either way, once authenticated: u16 topic length, topic, packet */
  Packet = 5,
}

const NONCE = 32;
const PROOF = 32;
const HEAD = 5; // u32 length of what follows, u8 kind
/** Before authentication nothing longer than a handshake frame is read. */
const MAX_HANDSHAKE_FRAME = 1 + NONCE + PROOF + 256;
/** Afterwards, one packet (a Moleculer answer) may be large, but not unbounded. */
const MAX_FRAME = 256 * 1024 * 1024;
/** A node whose unsent output grows past this (a REPL suspended with Ctrl+Z) is dropped. */
const MAX_BACKLOG = 64 * 1024 * 1024;
const HANDSHAKE_TIMEOUT_MS = 5000;
const PROTOCOL = "pgw-loopback-1";

const proof = (secret: string, who: "client" | "hub", first: Buffer, second: Buffer) =>
  createHmac("sha256", secret).update(`${PROTOCOL} ${who}\n`).update(first).update(second).digest();

function sameProof(given: Buffer, expected: Buffer): boolean {
  return given.length === expected.length && timingSafeEqual(given, expected);
}

function frame(kind: Kind, body: Buffer): Buffer {
  const head = Buffer.allocUnsafe(HEAD);
  head.writeUInt32BE(body.length + 1, 0);
  head.writeUInt8(kind, 4);
  return Buffer.concat([head, body]);
}

function packetFrame(topic: string, data: Buffer): Buffer {
  const t = Buffer.from(topic);
  const head = Buffer.allocUnsafe(HEAD + 2 + t.length);
  head.writeUInt32BE(1 + 2 + t.length + data.length, 0);
  head.writeUInt8(Kind.Packet, 4);
  head.writeUInt16BE(t.length, HEAD);
  t.copy(head, HEAD + 2);
  return Buffer.concat([head, data]);
}

function readPacket(body: Buffer): { topic: string; data: Buffer } | null {
  if (body.length < 2) return null;
  const len = body.readUInt16BE(0);
  if (body.length < 2 + len) return null;
  return { topic: body.toString("utf8", 2, 2 + len), data: body.subarray(2 + len) };
}

/** Cuts a byte stream into frames; `limit()` is asked for each frame's largest allowed size. */
class Frames {
  private buf: Buffer = Buffer.alloc(0);
  private stopped = false;
  constructor(
    private readonly limit: () => number,
    private readonly onFrame: (kind: number, body: Buffer) => void,
    private readonly onInvalid: (why: string) => void,
  ) {}
  push(chunk: Buffer): void {
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    while (!this.stopped && this.buf.length >= HEAD) {
      const len = this.buf.readUInt32BE(0);
      if (len < 1 || len > this.limit()) return this.onInvalid(`frame of ${len} bytes`);
      if (this.buf.length < 4 + len) return;
      const kind = this.buf[4]!;
      const body = this.buf.subarray(HEAD, 4 + len);
      this.buf = this.buf.subarray(4 + len);
      this.onFrame(kind, body);
    }
  }
  /** Reads no further frames; answers the bytes not read yet. */
  stop(): Buffer {
    this.stopped = true;
    return this.buf;
  }
}

/** A refusal the REPL reports in one line. */
export class LoopbackRefused extends Error {
  constructor(
    message: string,
    readonly reason: "unreachable" | "denied" | "protocol",
  ) {
    super(message);
    this.name = "LoopbackRefused";
  }
}

/** An authenticated connection to a hub, and what arrived after the handshake. */
export interface LoopbackLink {
  socket: net.Socket;
  rest: Buffer;
}

/**
 * Connects to the hub at 127.0.0.1:`port` and authenticates both ways with `secret`. Rejects with
 * LoopbackRefused: `unreachable` (nothing listens), `denied` (the hub holds another secret), or
 * `protocol` (something else listens there, or it proved no knowledge of the secret).
 */
export function openLoopback(port: number, secret: string, timeoutMs = HANDSHAKE_TIMEOUT_MS): Promise<LoopbackLink> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: "127.0.0.1", port });
    const mine = randomBytes(NONCE);
    let theirs: Buffer | null = null;
    let settled = false;
    const fail = (err: LoopbackRefused) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      reject(err);
    };
    const timer = setTimeout(() => fail(new LoopbackRefused(`127.0.0.1:${port} did not complete the handshake in time`, "protocol")), timeoutMs);
    let welcomed = false;
    const frames = new Frames(
      () => MAX_HANDSHAKE_FRAME,
      (kind, body) => {
        if (kind === Kind.Hello && body.length === NONCE && !theirs) {
          theirs = Buffer.from(body);
          socket.write(frame(Kind.Auth, Buffer.concat([mine, proof(secret, "client", theirs, mine)])));
        } else if (kind === Kind.Welcome && theirs && sameProof(body, proof(secret, "hub", mine, theirs))) {
          welcomed = true;
          frames.stop(); // what follows is packets, read by the transporter
        } else if (kind === Kind.Deny) {
          fail(new LoopbackRefused(body.toString("utf8") || "refused", "denied"));
        } else {
          fail(new LoopbackRefused(`127.0.0.1:${port} does not speak this protocol or does not know the secret`, "protocol"));
        }
      },
      () => fail(new LoopbackRefused(`127.0.0.1:${port} does not speak this protocol`, "protocol")),
    );
    const onData = (d: Buffer) => {
      frames.push(d);
      if (!welcomed || settled) return;
      settled = true;
      clearTimeout(timer);
      socket.removeAllListeners("data");
      socket.removeAllListeners("error");
      socket.removeAllListeners("close");
      resolve({ socket, rest: Buffer.from(frames.stop()) });
    };
    socket.on("data", onData);
    socket.on("error", (e: NodeJS.ErrnoException) =>
      fail(new LoopbackRefused(`nothing answers on 127.0.0.1:${port} (${e.code ?? e.message})`, e.code === "ECONNREFUSED" ? "unreachable" : "protocol")),
    );
    socket.on("close", () => fail(new LoopbackRefused(`127.0.0.1:${port} closed the connection during the handshake`, "protocol")));
  });
}

/** What both ends share: topic subscriptions, and delivering a packet to this node's broker. */
abstract class LoopbackBase extends Transporters.Base {
  /** topic -> Moleculer command */
  private readonly topics = new Map<string, string>();

  constructor() {
    super({});
    this.hasBuiltInBalancer = false;
  }

  override subscribe(cmd: string, nodeID?: string): Promise<void> {
    this.topics.set(this.getTopicName(cmd, nodeID), cmd);
    return Promise.resolve();
  }
  override subscribeBalancedRequest(): Promise<void> {
    return Promise.resolve();
  }
  override subscribeBalancedEvent(): Promise<void> {
    return Promise.resolve();
  }

  /** Hands a packet to this node's broker if it subscribed to its topic. */
  protected deliver(topic: string, data: Buffer): void {
    const cmd = this.topics.get(topic);
    if (cmd) void this.receive(cmd, data);
  }
}

export interface HubOptions {
  /** The shared secret of the data directory. */
  secret: string;
  /** 0 (default): any free port. */
  port?: number;
  /** Called once listening (the REPL finds the port through it). */
  onListening?(port: number, nodeID: string): void;
  /** Called once no longer listening. */
  onClosed?(): void;
}

interface Peer {
  socket: net.Socket;
  authenticated: boolean;
}

/** The service's end: listens on 127.0.0.1, authenticates each REPL, relays packets. */
export class LoopbackHub extends LoopbackBase {
  private server: net.Server | null = null;
  private readonly peers = new Set<Peer>();
  /** The port listened on, once connected. */
  port: number | null = null;

  constructor(private readonly hubOpts: HubOptions) {
    super();
  }

  override async connect(): Promise<void> {
    const server = net.createServer((socket) => this.accept(socket));
    server.maxConnections = 16;
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen({ host: "127.0.0.1", port: this.hubOpts.port ?? 0, exclusive: true }, () => {
        server.off("error", reject);
        resolve();
      });
    });
    server.on("error", (err) => this.logger.warn(`REPL socket: ${err.message}`));
    this.server = server;
    this.port = (server.address() as net.AddressInfo).port;
    this.hubOpts.onListening?.(this.port, this.nodeID);
    await this.onConnected();
  }

  override async disconnect(): Promise<void> {
    this.connected = false;
    for (const peer of this.peers) peer.socket.destroy();
    this.peers.clear();
    const server = this.server;
    this.server = null;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
    this.hubOpts.onClosed?.();
  }

  override send(topic: string, data: Buffer): Promise<void> {
    if (this.peers.size > 0) {
      const out = packetFrame(topic, data);
      for (const peer of this.peers) if (peer.authenticated) this.write(peer, out);
    }
    return Promise.resolve();
  }

  private write(peer: Peer, out: Buffer): void {
    if (peer.socket.writableLength > MAX_BACKLOG) {
      this.logger.warn("A REPL stopped reading its packets; it is disconnected");
      peer.socket.destroy();
      return;
    }
    peer.socket.write(out);
  }

  private accept(socket: net.Socket): void {
    socket.setNoDelay(true);
    const peer: Peer = { socket, authenticated: false };
    const nonce = randomBytes(NONCE);
    const timer = setTimeout(() => socket.destroy(), HANDSHAKE_TIMEOUT_MS);
    timer.unref();
    const frames = new Frames(
      () => (peer.authenticated ? MAX_FRAME : MAX_HANDSHAKE_FRAME),
      (kind, body) => {
        if (!peer.authenticated) {
          clearTimeout(timer);
          const theirs = body.subarray(0, NONCE);
          if (kind !== Kind.Auth || body.length !== NONCE + PROOF || !sameProof(body.subarray(NONCE), proof(this.hubOpts.secret, "client", nonce, theirs))) {
            this.logger.warn("A connection to the REPL socket did not prove the data directory's secret; closed");
            frames.stop();
            socket.end(frame(Kind.Deny, Buffer.from("the secret does not match the running service's")));
            return;
          }
          peer.authenticated = true;
          this.peers.add(peer);
          socket.write(frame(Kind.Welcome, proof(this.hubOpts.secret, "hub", theirs, nonce)));
          return;
        }
        if (kind !== Kind.Packet) return;
        const p = readPacket(body);
        if (!p) return;
        this.deliver(p.topic, p.data);
        if (this.peers.size > 1) {
          const out = packetFrame(p.topic, p.data);
          for (const other of this.peers) if (other !== peer && other.authenticated) this.write(other, out);
        }
      },
      () => socket.destroy(),
    );
    socket.on("data", (d: Buffer) => frames.push(d));
    socket.on("error", () => undefined);
    socket.on("close", () => {
      clearTimeout(timer);
      this.peers.delete(peer);
    });
    socket.write(frame(Kind.Hello, nonce));
  }
}

export interface ClientOptions {
  /** An authenticated link (openLoopback). */
  link: LoopbackLink;
  /** The hub went away (the service stopped) while this node was connected. */
  onLost?(): void;
}

/** The REPL's end: one authenticated connection to the hub. */
export class LoopbackClient extends LoopbackBase {
  private closing = false;

  constructor(private readonly clientOpts: ClientOptions) {
    super();
  }

  override async connect(): Promise<void> {
    const { socket, rest } = this.clientOpts.link;
    const frames = new Frames(
      () => MAX_FRAME,
      (kind, body) => {
        if (kind !== Kind.Packet) return;
        const p = readPacket(body);
        if (p) this.deliver(p.topic, p.data);
      },
      () => socket.destroy(),
    );
    socket.on("data", (d: Buffer) => frames.push(d));
    socket.on("error", () => undefined);
    socket.on("close", () => {
      const lost = this.connected && !this.closing;
      this.connected = false;
      if (lost) this.clientOpts.onLost?.();
    });
    if (rest.length) frames.push(rest);
    await this.onConnected();
  }

  override async disconnect(): Promise<void> {
    this.closing = true;
    this.connected = false;
    const { socket } = this.clientOpts.link;
    await new Promise<void>((resolve) => {
      if (socket.destroyed) return resolve();
      socket.once("close", () => resolve());
      socket.end();
      setTimeout(() => socket.destroy(), 1000).unref();
    });
  }

  override send(topic: string, data: Buffer): Promise<void> {
    const { socket } = this.clientOpts.link;
    if (!socket.destroyed) socket.write(packetFrame(topic, data));
    return Promise.resolve();
  }
}
