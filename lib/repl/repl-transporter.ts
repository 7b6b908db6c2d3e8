/**
 * The transporter through which `npm run repl` joins a single-process `npm start` (no TRANSPORTER):
 * the service listens on a Unix socket inside DATA_DIR (lib/repl/repl-link.ts picks the path) and
 * each REPL connects to it as a second node. The service relays like a tiny NATS: a packet goes to
 * every other node, and each keeps the topics it subscribed to. There is no handshake and no secret:
 * the kernel checks the socket's permissions, and its directory's, on every connect, so only the
 * user that runs the service (and root) can join.
 *
 * Why this file and not Moleculer's TCP transporter (`transporter: { type: "TCP", options: {...} }`):
 * its reader calls `listen({ port })` with no host, and no option takes a host or a socket path, so
 * it listens on every interface; and it reads packets from whoever connects (gossip HELLO to join,
 * REQUEST to call). The attack that leaves open, which DATA_DIR permissions cannot stop because a TCP
 * port has no file permissions: any local user, any container sharing the network namespace (a
 * sidecar in the pod) or any host that reaches the port joins the broker and calls every action
 * (creates an API key, reads messages, starts a campaign). Signing packets with a secret from
 * DATA_DIR in `transporterSend`/`transporterReceive` middlewares (they do see gossip packets) would
 * still expose a port and its parser on every interface, and a captured packet could be replayed.
 * NATS needs a server, which embedded mode exists to avoid.
 *
 * The broker keeps its own calls local (hasBuiltInBalancer false, registry preferLocal) and the hub
 * never sends a node's packets back to it, so nothing crosses the socket until a REPL joins.
 */
import { Transporters } from "moleculer";
import fs from "node:fs";
import net from "node:net";

/** One Moleculer answer may be large, but a frame is not unbounded. */
const MAX_FRAME = 256 * 1024 * 1024;
/** A REPL whose unsent output grows past this (suspended with Ctrl+Z) is dropped. */
const MAX_BACKLOG = 64 * 1024 * 1024;

/** A frame: u32 length of what follows, u16 topic length, topic, the packet. */
function frame(topic: string, data: Buffer): Buffer {
  const t = Buffer.from(topic);
  const head = Buffer.allocUnsafe(6 + t.length);
  head.writeUInt32BE(2 + t.length + data.length, 0);
  head.writeUInt16BE(t.length, 4);
  t.copy(head, 6);
  return Buffer.concat([head, data]);
}

/** Hands each frame read from `socket` to `onFrame` (with its raw bytes, to relay); a malformed stream is closed. */
function readFrames(socket: net.Socket, onFrame: (topic: string, data: Buffer, raw: Buffer) => void): void {
  // Chunks are joined only once a whole frame has arrived, so a large answer is copied once.
  let chunks: Buffer[] = [];
  let size = 0;
  let need = 4;
  socket.on("data", (chunk: Buffer) => {
    chunks.push(chunk);
    size += chunk.length;
    if (size < need) return;
    let buf = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
    while (buf.length >= 4) {
      const len = buf.readUInt32BE(0);
      const topicLen = buf.length >= 6 ? buf.readUInt16BE(4) : 0;
      if (len < 2 || len > MAX_FRAME || 2 + topicLen > len) return void socket.destroy();
      if (buf.length < 4 + len) break;
      onFrame(buf.toString("utf8", 6, 6 + topicLen), buf.subarray(6 + topicLen, 4 + len), buf.subarray(0, 4 + len));
      buf = buf.subarray(4 + len);
    }
    chunks = buf.length ? [buf] : [];
    size = buf.length;
    need = buf.length >= 4 ? 4 + buf.readUInt32BE(0) : 4;
  });
}

/** What both ends share: topic subscriptions, and delivering a packet to this node's broker. */
abstract class SocketNode extends Transporters.Base {
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

function listenOnce(file: string, onConnection: (socket: net.Socket) => void): Promise<net.Server> {
  const server = net.createServer(onConnection);
  server.maxConnections = 16;
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen({ path: file, exclusive: true }, () => {
      server.off("error", reject);
      resolve(server);
    });
  });
}

/** Whether a process listens on the socket file `file`. */
const answers = (file: string) =>
  new Promise<boolean>((resolve) => {
    const probe = net.connect(file, () => {
      probe.destroy();
      resolve(true);
    });
    probe.once("error", () => resolve(false));
  });

export interface HubHooks {
  /** Called once listening, and subscribed (the REPL may join from then on). */
  onListening?(nodeID: string): void;
  /** Called once no longer listening. */
  onClosed?(): void;
}

/**
 * The service's end. When it cannot listen it says so in a warning and the service runs without
 * it: a REPL is never a reason for `npm start` to fail (a transporter that rejects would make
 * Moleculer retry forever).
 */
export class SocketHub extends SocketNode {
  private server: net.Server | null = null;
  private readonly peers = new Set<net.Socket>();

  /** `where()` prepares the socket's directory and answers the path to listen on, or throws why it cannot. */
  constructor(
    private readonly where: () => string,
    private readonly hooks: HubHooks = {},
  ) {
    super();
  }

  override async connect(): Promise<void> {
    const accept = (socket: net.Socket) => this.accept(socket);
    try {
      const file = this.where();
      try {
        this.server = await listenOnce(file, accept);
      } catch (e) {
        // A socket file left by a process that was killed is replaced; a live one is not.
        if ((e as NodeJS.ErrnoException).code !== "EADDRINUSE") throw e;
        if (await answers(file)) throw new Error(`another process (a service on the same DATA_DIR) listens on ${file}`);
        fs.rmSync(file, { force: true });
        this.server = await listenOnce(file, accept);
      }
      fs.chmodSync(file, 0o600);
    } catch (e) {
      this.server?.close();
      this.server = null;
      this.logger.warn(`\`npm run repl\` cannot join this process: ${(e as Error).message}`);
    }
    await this.onConnected();
    if (this.server) this.hooks.onListening?.(this.nodeID);
  }

  override async disconnect(): Promise<void> {
    this.connected = false;
    for (const peer of this.peers) peer.destroy();
    this.peers.clear();
    const server = this.server;
    this.server = null;
    if (!server) return;
    // Closing the server removes the socket file.
    await new Promise<void>((resolve) => server.close(() => resolve()));
    this.hooks.onClosed?.();
  }

  override send(topic: string, data: Buffer): Promise<void> {
    if (this.peers.size > 0) {
      const out = frame(topic, data);
      for (const peer of this.peers) this.write(peer, out);
    }
    return Promise.resolve();
  }

  private write(peer: net.Socket, out: Buffer): void {
    if (peer.writableLength > MAX_BACKLOG) {
      this.logger.warn("A REPL stopped reading its packets; it is disconnected");
      peer.destroy();
      return;
    }
    peer.write(out);
  }

  private accept(socket: net.Socket): void {
    this.peers.add(socket);
    socket.on("error", () => undefined);
    socket.on("close", () => this.peers.delete(socket));
    readFrames(socket, (topic, data, raw) => {
      this.deliver(topic, data);
      for (const other of this.peers) if (other !== socket) this.write(other, raw);
    });
  }
}

/** Connects to the hub's socket file; rejects with the system error (ENOENT, ECONNREFUSED, EACCES...). */
export function openSocket(file: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(file, () => {
      socket.off("error", reject);
      resolve(socket);
    });
    socket.once("error", reject);
  });
}

/** The REPL's end: one connection to the hub (openSocket). `onLost`: the service stopped meanwhile. */
export class SocketClient extends SocketNode {
  private closing = false;

  constructor(
    private readonly socket: net.Socket,
    private readonly onLost?: () => void,
  ) {
    super();
  }

  override async connect(): Promise<void> {
    readFrames(this.socket, (topic, data) => this.deliver(topic, data));
    this.socket.on("error", () => undefined);
    this.socket.on("close", () => {
      const lost = this.connected && !this.closing;
      this.connected = false;
      if (lost) this.onLost?.();
    });
    await this.onConnected();
  }

  override async disconnect(): Promise<void> {
    this.closing = true;
    this.connected = false;
    const socket = this.socket;
    if (socket.destroyed) return;
    await new Promise<void>((resolve) => {
      socket.once("close", () => resolve());
      socket.end();
      setTimeout(() => socket.destroy(), 1000).unref();
    });
  }

  override send(topic: string, data: Buffer): Promise<void> {
    if (!this.socket.destroyed) this.socket.write(frame(topic, data));
    return Promise.resolve();
  }
}
