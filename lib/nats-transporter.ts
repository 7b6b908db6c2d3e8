/**
 * Moleculer's NATS transporter with three changes. An answer larger than the server's max_payload
 * crosses in parts (up to MAX_CHUNKS messages, put together again by the caller's node). A publish
 * that still fails (an answer beyond that, a request over max_payload: the nats client throws
 * MAX_PAYLOAD_EXCEEDED synchronously, out of Moleculer's promise chains, and the rejection nobody
 * handles used to end the process) fails only the call it belongs to: an answer becomes a small 500
 * answer to its caller, a request rejects at once on its caller, an event or a heartbeat is logged
 * and dropped. And at connect it reads the max_payload the server announces and warns when it is
 * below what the product is sized for (NATS_MAX_PAYLOAD). Every node of a cluster must run this
 * transporter (a node without it cannot read an answer in parts).
 */
import { Errors, Transporters, type BrokerOptions, type ServiceBroker } from "moleculer";
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import type { Config } from "./config";

interface PacketLike {
  type: string;
  target: string | null;
  payload: Record<string, unknown> & { id?: string };
}

interface TransitLike {
  pendingRequests: Map<string, { reject(err: Error): void; action?: { name?: string }; nodeID?: string }>;
  removePendingRequest(id: string): void;
  _createPayloadErrorField(err: Error, payload: Record<string, unknown>): unknown;
}

interface NatsBase {
  opts: Record<string, unknown>;
  logger: { info(msg: string): void; warn(msg: string): void; error(msg: string): void };
  transit: TransitLike;
  client: {
    publish(topic: string, data: Buffer, opts?: { reply?: string }): void;
    subscribe(subject: string, opts: { callback(err: Error | null, msg: { subject: string; headers?: { code?: number } } | undefined): void }): unknown;
    info?: { max_payload?: number; headers?: boolean };
  } | null;
  broker: {
    Promise: PromiseConstructor;
    registry?: { nodes?: { get(id: string): { available?: boolean } | undefined; disconnected(id: string, unexpected: boolean): void } };
  };
  connect(): Promise<void>;
  onConnected(wasReconnect?: boolean): Promise<void>;
  send(topic: string, data: Buffer, meta?: { packet?: PacketLike }): Promise<void>;
  receive(cmd: string, data: Buffer): unknown;
  serialize(packet: PacketLike): Buffer;
}

/** An answer in parts: magic, 16-byte answer id, part index and count (uint32 each), then the bytes. */
const CHUNK_MAGIC = Buffer.from("\u0000PGW-PART1");
const CHUNK_HEADER = CHUNK_MAGIC.length + 16 + 8;
/** An answer may be up to this many messages long; beyond, the call fails with a 500. */
export const MAX_CHUNKS = 32;
const ASSEMBLY_TTL_MS = 120_000;

const Base = Transporters.NATS as unknown as new (opts: Record<string, unknown>) => NatsBase;

/** The answer a caller gets when its real answer could not cross the bus. */
export class TransportError extends Errors.MoleculerServerError {
  constructor(message: string, data?: unknown) {
    super(message, 500, "TRANSPORT_ERROR", data);
    this.name = "TransportError";
  }
}

/**
 * The nats client's options of a node: servers from TRANSPORTER (comma-separated URLs), a user and
 * password or a token from NATS_* or else from the URL (nats://user:pass@host, nats://token@host),
 * and TLS with the CA of NATS_TLS_CA. No `url` is passed on: Moleculer would replace the credentials
 * given here by the URL's (none).
 */
export function natsOptions(config: Config): Record<string, unknown> {
  const urls = String(config.transporter)
    .split(",")
    .map((u) => new URL(u.trim()));
  const withCredentials = urls.find((u) => u.username);
  const fromUrl = withCredentials ? { name: decodeURIComponent(withCredentials.username), password: decodeURIComponent(withCredentials.password) } : null;
  const opts: Record<string, unknown> = { servers: urls.map((u) => u.host), maxReconnectAttempts: -1 };
  if (config.natsUser) Object.assign(opts, { user: config.natsUser, pass: config.natsPassword });
  else if (config.natsToken) opts.token = config.natsToken;
  else if (fromUrl?.password) Object.assign(opts, { user: fromUrl.name, pass: fromUrl.password });
  else if (fromUrl) opts.token = fromUrl.name;
  if (config.natsTlsCa) opts.tls = { ca: fs.readFileSync(config.natsTlsCa, "utf8") };
  return opts;
}

/** The transporter of a cluster node. */
/** The broker can reach other nodes now: no transporter (one process), or one connected to its server. */
/**
 * A call that cannot reach its node: the bus is away here, or nobody listens on the node's subject
 * any more (NATS: "no responders"). Never delivered, so safe to send again; a 503 for the partner
 * (lib/problem.ts).
 */
export class UnreachableError extends Errors.MoleculerRetryableError {
  constructor(message: string, type: "TRANSPORTER_DISCONNECTED" | "NO_RESPONDERS", data?: unknown) {
    super(message, 503, type, data);
    this.name = "UnreachableError";
  }
}

export function transporterUp(broker: ServiceBroker): boolean {
  const transit = (broker as unknown as { transit?: { connected?: boolean; tx?: { linkUp?: boolean } } }).transit;
  if (!transit) return true;
  return transit.connected === true && transit.tx?.linkUp !== false;
}

export function natsTransporter(config: Config): BrokerOptions["transporter"] {
  return new SafeNatsTransporter(natsOptions(config), config.natsMaxPayload) as unknown as BrokerOptions["transporter"];
}

export class SafeNatsTransporter extends Base {
  constructor(
    opts: Record<string, unknown>,
    /** The max_payload the product is sized for (NATS_MAX_PAYLOAD). */
    private readonly maxPayload = 0,
    /** At most this many parts to one answer (tests lower it). */
    private readonly maxChunks = MAX_CHUNKS,
  ) {
    super(opts);
  }

  /** The server's max_payload (announced at connect). */
  private announced = 1024 * 1024;
  private readonly assembling = new Map<string, { chunks: Buffer[]; got: number; timer: NodeJS.Timeout }>();

  /**
   * False from the moment the NATS client loses its server until it is back. Moleculer's transit
   * still says "connected" then (it only notices a client closed for good), so readiness and the
   * calls to other nodes read this instead (transporterUp).
   */
  linkUp = true;

  /**
   * The inbox NATS answers "no responders" on: a request to a node is published with a reply
   * subject here, so that when nothing subscribes to that node's subject any more (the process was
   * killed: no goodbye, and the registry learns it only when its heartbeats stop) the server says so
   * at once and the call fails then (503), not at its time-out. A live node ignores the reply
   * subject. Null when the server does not speak headers (no such status then).
   */
  private noResponders: string | null = null;

  override async connect(): Promise<void> {
    await super.connect();
    this.linkUp = true;
    if (this.client?.info?.headers) {
      const prefix = `_INBOX.pgw-nr.${randomBytes(12).toString("hex")}`;
      this.client.subscribe(`${prefix}.*`, {
        // nats.js hands the server's 503 status over as the message, or (some versions) as an error beside it.
        callback: (err, msg) => {
          const noOne = (err as { code?: string } | null)?.code === "503" || msg?.headers?.code === 503;
          if (noOne && msg?.subject) this.nobodyListened(msg.subject.slice(prefix.length + 1));
        },
      });
      this.noResponders = prefix;
    }
    const client = this.client as unknown as { status?(): AsyncIterable<{ type: string }> } | undefined;
    if (client?.status) {
      void (async () => {
        for await (const s of client.status!()) {
          if (s.type === "disconnect" && this.linkUp) {
            this.linkUp = false;
            this.logger.warn("NATS is not reachable: calls to other nodes answer 503 and readiness is off until it is back");
            // Calls sent before the link went down wait for answers that will not come: they fail now.
            for (const [id, pending] of [...this.transit.pendingRequests]) {
              this.transit.removePendingRequest(id);
              pending.reject(new UnreachableError("The message bus is not reachable right now.", "TRANSPORTER_DISCONNECTED"));
            }
          } else if (s.type === "reconnect" && !this.linkUp) {
            this.linkUp = true;
            this.logger.info("NATS is reachable again");
            // A restarted server knows nobody: announce this node and ask for the others, as at a first connect.
            await this.onConnected(true).catch((err: Error) => this.logger.error(`After the NATS reconnect: ${err.message}`));
          }
        }
      })().catch(() => undefined);
    }
    const announced = this.client?.info?.max_payload;
    if (typeof announced === "number" && announced > 0) this.announced = announced;
    const wanted = this.maxPayload;
    if (typeof announced === "number" && wanted > 0 && announced < wanted) {
      this.logger.warn(
        `NATS announces max_payload ${announced} bytes, below the ${wanted} the product is sized for (NATS_MAX_PAYLOAD): larger answers cross in parts (slower), larger requests fail with a 500. Set max_payload in the NATS server's configuration.`,
      );
    }
  }

  override send(topic: string, data: Buffer, meta?: { packet?: PacketLike }): Promise<void> {
    try {
      const packet = meta?.packet;
      const room = this.announced - CHUNK_HEADER - 1024;
      if (packet?.type === "RES" && packet.target && data.length > room && data.length <= room * this.maxChunks) {
        // An answer larger than one message goes to its caller's own subject in parts (in order, one
        // publisher, one subscriber), put together again by receive() there.
        const id = randomBytes(16);
        const count = Math.ceil(data.length / room);
        for (let i = 0; i < count; i++) {
          const head = Buffer.alloc(CHUNK_HEADER);
          CHUNK_MAGIC.copy(head, 0);
          id.copy(head, CHUNK_MAGIC.length);
          head.writeUInt32BE(i, CHUNK_MAGIC.length + 16);
          head.writeUInt32BE(count, CHUNK_MAGIC.length + 20);
          super.send(topic, Buffer.concat([head, data.subarray(i * room, (i + 1) * room)]), meta);
        }
        return this.broker.Promise.resolve();
      }
      if (packet?.type === "REQ" && packet.target && this.noResponders && this.client && typeof packet.payload.id === "string") {
        this.client.publish(topic, data, { reply: `${this.noResponders}.${packet.payload.id}` });
        return this.broker.Promise.resolve();
      }
      return super.send(topic, data, meta);
    } catch (err) {
      this.failed(topic, data, meta?.packet, err as Error);
      return this.broker.Promise.resolve();
    }
  }

  /**
   * The request `id` reached no subscriber: its node is gone (killed, or cut from NATS), or has not
   * subscribed again yet since the bus came back. The call fails now, as never delivered (a 503;
   * NoRespondersRetry in moleculer.config.ts sends it to the next replica). The node stays in the
   * registry until its heartbeats time out: after a NATS restart a live node may subscribe again a
   * moment after its callers reconnected, and taking it out at its first "no responders" would
   * leave its service 503 until its next heartbeat.
   */
  private nobodyListened(id: string): void {
    const req = this.transit.pendingRequests.get(id);
    if (!req) return;
    this.transit.removePendingRequest(id);
    req.reject(new UnreachableError("The node that was to answer is gone.", "NO_RESPONDERS", { action: req.action?.name, nodeID: req.nodeID }));
  }

  /** Puts an answer sent in parts together again; anything else goes straight on. */
  override receive(cmd: string, data: Buffer): unknown {
    if (data.length < CHUNK_HEADER || !data.subarray(0, CHUNK_MAGIC.length).equals(CHUNK_MAGIC)) return super.receive(cmd, data);
    const key = data.toString("hex", CHUNK_MAGIC.length, CHUNK_MAGIC.length + 16);
    const index = data.readUInt32BE(CHUNK_MAGIC.length + 16);
    const count = data.readUInt32BE(CHUNK_MAGIC.length + 20);
    let parts = this.assembling.get(key);
    if (!parts) {
      // Parts of an answer whose sender died midway are dropped (the call times out as any lost answer).
      const timer = setTimeout(() => this.assembling.delete(key), ASSEMBLY_TTL_MS);
      timer.unref();
      parts = { chunks: new Array<Buffer>(count), got: 0, timer };
      this.assembling.set(key, parts);
    }
    if (index >= count || parts.chunks[index]) return undefined;
    parts.chunks[index] = data.subarray(CHUNK_HEADER);
    if (++parts.got < count) return undefined;
    this.assembling.delete(key);
    clearTimeout(parts.timer);
    return super.receive(cmd, Buffer.concat(parts.chunks));
  }

  /** One packet could not be published: fail the call it belongs to, never the process. */
  private failed(topic: string, data: Buffer, packet: PacketLike | undefined, err: Error): void {
    const code = (err as { code?: string }).code ?? err.name;
    const what = packet ? `${packet.type} packet` : "packet";
    this.logger.error(`Could not publish a ${data.length}-byte ${what} on ${topic}: ${code} ${err.message}`);
    const id = packet?.payload.id;
    if (!packet || !id) return;
    if (packet.type === "RES") {
      // Answer the caller with a small error in place of the answer that did not fit.
      const failure = new TransportError(`The answer (${data.length} bytes) could not be sent over the message bus: ${code}.`, { code, bytes: data.length });
      const payload: Record<string, unknown> = { id, meta: {}, headers: {}, success: false, data: null };
      payload.error = this.transit._createPayloadErrorField(failure, payload);
      try {
        super.send(topic, this.serialize({ type: packet.type, target: packet.target, payload }), { packet });
      } catch (again) {
        this.logger.error(`Could not publish the error answer either: ${(again as Error).message}`);
      }
    } else if (packet.type === "REQ") {
      const pending = this.transit.pendingRequests.get(id);
      if (pending) {
        this.transit.removePendingRequest(id);
        pending.reject(new TransportError(`The request (${data.length} bytes) could not be sent over the message bus: ${code}.`, { code, bytes: data.length }));
      }
    }
  }
}
