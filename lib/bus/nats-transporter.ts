/**
 * Moleculer's NATS transporter, used through its documented surface only: its options, the hooks a
 * custom transporter overrides (`connect`, `disconnect`, `send`, `receive`, `onConnected`), its
 * declared `client` (a nats.js connection, used through nats.js's own public API) and Moleculer's
 * protocol for the packets it writes itself (moleculerjs/protocol, v5). Nothing is framed in parts:
 * a request or an answer is one NATS message, and what can be large crosses bounded by design (pages
 * as Moleculer streams, lib/bus/large-answers.ts; files as ranges, lib/http/remote-file.ts).
 *
 * What it adds to Moleculer's own, each a call failing fast instead of waiting for its time-out:
 * - "No responders": a request to a node is published with a reply subject, so that when nobody
 *   subscribes to that node's subject any more (the process was killed: no goodbye, and the registry
 *   learns it only when its heartbeats stop) NATS says so at once. The call then gets an error
 *   answer (503 NO_RESPONDERS, retryable: never delivered), handed to Moleculer as any answer is
 *   (`receive`), and NoRespondersRetry (moleculer.config.ts) sends it to another replica.
 * - The NATS link lost: Moleculer's transit only notices a client closed for good, so this watches
 *   the client's status, broadcasts Moleculer's own `$transporter.disconnected` / `$transporter.connected`
 *   events, answers the calls in flight with a 503 TRANSPORTER_DISCONNECTED and, once NATS is back,
 *   announces the node again as at a first connect.
 * - A packet NATS refuses (over max_payload: nats.js throws synchronously, outside Moleculer's promise
 *   chains, and the rejection nobody handles used to end the process) fails only the call it belongs
 *   to: an answer becomes a small 500 answer to its caller, a request a 500 answer on its own node, an
 *   event or a heartbeat is logged and dropped.
 * And at connect it warns when the server's max_payload is below what the product is sized for.
 */
import { Errors, Transporters, type BrokerOptions, type ServiceBroker } from "moleculer";
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import type { Config } from "../config";

interface PacketLike {
  type: string;
  target: string | null;
  payload: Record<string, unknown> & { id?: string };
}

/** The nats.js connection, as much of its public API as this file uses. */
interface NatsClient {
  publish(subject: string, data: Uint8Array, opts?: { reply?: string }): void;
  subscribe(subject: string, opts: { callback(err: Error | null, msg: { subject: string; headers?: { code?: number } } | undefined): void }): unknown;
  status(): AsyncIterable<{ type: string }>;
  info?: { max_payload?: number; headers?: boolean };
}

/** Moleculer's NATS transporter as the type declarations published with moleculer (its NATS and base transporter types) describe it. */
interface NatsBase {
  client: NatsClient | null;
  logger: { info(msg: string): void; warn(msg: string): void; error(msg: string): void };
  broker: ServiceBroker;
  nodeID: string;
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  onConnected(wasReconnect?: boolean): Promise<void>;
  send(topic: string, data: Buffer, meta?: { packet?: PacketLike }): Promise<void>;
  receive(cmd: string, data: Buffer): unknown;
  serialize(packet: PacketLike): Buffer;
}

const Base = Transporters.NATS as unknown as new (opts: Record<string, unknown>) => NatsBase;

/** The answer a caller gets when its request or its answer could not cross the bus. */
export class TransportError extends Errors.MoleculerServerError {
  constructor(message: string, data?: unknown) {
    super(message, 500, "TRANSPORT_ERROR", data);
    this.name = "TransportError";
  }
}

/**
 * A call that cannot reach its node: the bus is away here, or nobody listens on the node's subject
 * any more (NATS: "no responders"). Never delivered, so safe to send again; a 503 for the partner
 * (lib/http/problem.ts).
 */
export class UnreachableError extends Errors.MoleculerRetryableError {
  constructor(message: string, type: "TRANSPORTER_DISCONNECTED" | "NO_RESPONDERS", data?: unknown) {
    super(message, 503, type, data);
    this.name = "UnreachableError";
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

/** Each broker's NATS transporter, for readiness and the outage middleware. */
const transporters = new WeakMap<ServiceBroker, BusTransporter>();

/** The broker can reach other nodes now: no transporter (one process), or one connected to its server. */
export function transporterUp(broker: ServiceBroker): boolean {
  const tx = transporters.get(broker);
  if (tx) return tx.linkUp;
  // Another transporter (the REPL's loopback): Moleculer's transit knows whether it is connected.
  const transit = (broker as { transit?: { connected?: boolean } }).transit;
  return !transit || transit.connected === true;
}

/** The largest packet the server takes (as it announced at connect; 1 MiB, NATS's default, before). */
export function busPayloadLimit(broker: ServiceBroker): number {
  return transporters.get(broker)?.announced ?? Number.POSITIVE_INFINITY;
}

export function natsTransporter(config: Config): BrokerOptions["transporter"] {
  return new BusTransporter(natsOptions(config), config.natsMaxPayload) as unknown as BrokerOptions["transporter"];
}

/** Requests sent in the last time-out period or the one before (id -> target node), to answer them when the link is lost. */
class RecentRequests {
  private current = new Map<string, string>();
  private previous = new Map<string, string>();
  private rotatedAt = Date.now();
  constructor(private readonly periodMs: number) {}

  add(id: string, nodeID: string): void {
    const now = Date.now();
    if (now - this.rotatedAt > this.periodMs) {
      this.previous = this.current;
      this.current = new Map();
      this.rotatedAt = now;
    }
    this.current.set(id, nodeID);
  }

  /** Every request still maybe waiting for its answer; forgets them. Answered ones get an orphan answer Moleculer ignores. */
  takeAll(): Array<[string, string]> {
    const all = [...this.previous, ...this.current];
    this.previous = new Map();
    this.current = new Map();
    return all;
  }
}

export class BusTransporter extends Base {
  constructor(
    opts: Record<string, unknown>,
    /** The max_payload the product is sized for (NATS_MAX_PAYLOAD). */
    private readonly maxPayload = 0,
  ) {
    super(opts);
  }

  /** The server's max_payload (announced at connect). */
  announced = 1024 * 1024;

  /**
   * False until connected, and from the moment the NATS client loses its server until it is back.
   * Moleculer's transit still says "connected" then (it only notices a client closed for good), so
   * readiness and the calls to other nodes read this instead (transporterUp).
   */
  linkUp = false;

  /** The inbox NATS answers "no responders" on; null when the server does not speak headers (no such status then). */
  private noResponders: string | null = null;

  private recent: RecentRequests | null = null;

  override async connect(): Promise<void> {
    transporters.set(this.broker, this);
    this.recent ??= new RecentRequests(Math.max(1000, Number(this.broker.options.requestTimeout) || 0) + 5000);
    await super.connect();
    const client = this.client;
    if (!client) return;
    this.linkUp = true;
    if (client.info?.headers) {
      const prefix = `_INBOX.pgw-nr.${randomBytes(12).toString("hex")}`;
      client.subscribe(`${prefix}.*`, {
        // nats.js hands the server's 503 status over as the message, or (some versions) as an error beside it.
        callback: (err, msg) => {
          const noOne = (err as { code?: string } | null)?.code === "503" || msg?.headers?.code === 503;
          if (noOne && msg?.subject) this.nobodyListened(msg.subject.slice(prefix.length + 1));
        },
      });
      this.noResponders = prefix;
    }
    void this.watch(client).catch(() => undefined);
    const announced = client.info?.max_payload;
    if (typeof announced === "number" && announced > 0) this.announced = announced;
    if (typeof announced === "number" && this.maxPayload > 0 && announced < this.maxPayload) {
      this.logger.warn(
        `NATS announces max_payload ${announced} bytes, below the ${this.maxPayload} the product is sized for (NATS_MAX_PAYLOAD): requests or answers larger than that fail with a 500. Set max_payload in the NATS server's configuration.`,
      );
    }
  }

  override async disconnect(): Promise<void> {
    this.linkUp = false;
    await super.disconnect();
  }

  /** Follows the client's link to its server (nats.js `status()`). */
  private async watch(client: NatsClient): Promise<void> {
    for await (const s of client.status()) {
      if (s.type === "disconnect" && this.linkUp) {
        this.linkUp = false;
        this.logger.warn("NATS is not reachable: calls to other nodes answer 503 and readiness is off until it is back");
        this.broker.broadcastLocal("$transporter.disconnected", { graceFul: false });
        // Calls sent before the link went down wait for answers that will not come: they fail now.
        for (const [id, nodeID] of this.recent?.takeAll() ?? []) {
          this.answerHere(id, new UnreachableError("The message bus is not reachable right now.", "TRANSPORTER_DISCONNECTED", { nodeID }));
        }
      } else if (s.type === "reconnect" && !this.linkUp && this.client === client) {
        this.linkUp = true;
        this.logger.info("NATS is reachable again");
        // A restarted server knows nobody: announce this node and ask for the others, as at a first
        // connect (Moleculer's transit broadcasts $transporter.connected then).
        await this.onConnected(true).catch((err: Error) => this.logger.error(`After the NATS reconnect: ${err.message}`));
      }
    }
  }

  override send(topic: string, data: Buffer, meta?: { packet?: PacketLike }): Promise<void> {
    const packet = meta?.packet;
    try {
      if (packet?.type === "REQ" && packet.target && typeof packet.payload.id === "string") {
        this.recent?.add(packet.payload.id, packet.target);
        if (this.noResponders && this.client) {
          this.client.publish(topic, data, { reply: `${this.noResponders}.${packet.payload.id}` });
          return Promise.resolve();
        }
      }
      return super.send(topic, data, meta);
    } catch (err) {
      this.failed(topic, data, packet, err as Error);
      return Promise.resolve();
    }
  }

  /**
   * The request `id` reached no subscriber: its node is gone (killed, or cut from NATS), or has not
   * subscribed again yet since the bus came back. The call fails now, as never delivered (a 503 the
   * retry policy sends to the next replica). The node stays in the registry until its heartbeats time
   * out: after a NATS restart a live node may subscribe again a moment after its callers reconnected,
   * and taking it out at its first "no responders" would leave its service 503 until its next heartbeat.
   */
  private nobodyListened(id: string): void {
    this.answerHere(id, new UnreachableError("The node that was to answer is gone.", "NO_RESPONDERS"));
  }

  /** Hands Moleculer an error answer to this node's own request `id`, as if it had come over the bus. */
  private answerHere(id: string, err: Errors.MoleculerError): void {
    this.receive("RES", this.serialize(errorAnswer(id, err, this.nodeID)));
  }

  /** One packet could not be published: fail the call it belongs to, never the process. */
  private failed(topic: string, data: Buffer, packet: PacketLike | undefined, err: Error): void {
    const code = (err as { code?: string }).code ?? err.name;
    const what = packet ? `${packet.type} packet` : "packet";
    this.logger.error(`Could not publish a ${data.length}-byte ${what} on ${topic}: ${code} ${err.message}`);
    const id = packet?.payload.id;
    if (!packet || typeof id !== "string") return;
    if (packet.type === "RES") {
      // Answer the caller with a small error in place of the answer that did not fit.
      const failure = new TransportError(`The answer (${data.length} bytes) could not be sent over the message bus: ${code}.`, { code, bytes: data.length });
      try {
        super.send(topic, this.serialize({ ...errorAnswer(id, failure, this.nodeID), target: packet.target }), { packet });
      } catch (again) {
        this.logger.error(`Could not publish the error answer either: ${(again as Error).message}`);
      }
    } else if (packet.type === "REQ") {
      this.answerHere(
        id,
        new TransportError(`The request (${data.length} bytes) could not be sent over the message bus: ${code}.`, { code, bytes: data.length }),
      );
    }
  }
}

/** A RES packet of Moleculer's protocol that answers request `id` with `err`. */
function errorAnswer(id: string, err: Errors.MoleculerError, nodeID: string): PacketLike {
  const error = { name: err.name, message: err.message, nodeID, code: err.code, type: err.type, retryable: err.retryable, data: err.data };
  return { type: "RES", target: null, payload: { id, meta: {}, headers: {}, success: false, data: null, error } };
}
