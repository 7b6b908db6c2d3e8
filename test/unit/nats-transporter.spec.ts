/**
 * The transporter's failure handling, without a server: a stub nats client that enforces a
 * max_payload as nats.js does (a synchronous throw). Nothing is framed in parts: a packet too large
 * fails the call it belongs to, with an answer in Moleculer's protocol, and never throws.
 */
import { BusTransporter } from "../../lib/bus/nats-transporter";

interface Stubbed {
  client: { publish(topic: string, data: Buffer, opts?: { reply?: string }): void; info: { max_payload: number } };
  logger: { warn(): void; error(): void; info(): void; debug(): void };
  broker: unknown;
  nodeID: string;
  recent: unknown;
  incomingMessage(cmd: string, data: Buffer): unknown;
  send(topic: string, data: Buffer, meta?: unknown): Promise<void>;
  serialize(packet: unknown): Buffer;
}

interface Answer {
  id: string;
  success: boolean;
  error?: { code: number; type: string; retryable?: boolean };
}

function transporter(maxPayload: number) {
  const t = new BusTransporter({}) as unknown as Stubbed;
  const published: Array<{ topic: string; data: Buffer; reply?: string }> = [];
  const received: Array<{ cmd: string; answer: Answer }> = [];
  t.client = {
    info: { max_payload: maxPayload },
    publish(topic, data, opts) {
      if (data.length > maxPayload) throw Object.assign(new Error("MAX_PAYLOAD_EXCEEDED"), { name: "NatsError", code: "MAX_PAYLOAD_EXCEEDED" });
      published.push({ topic, data, reply: opts?.reply });
    },
  };
  t.logger = { warn() {}, error() {}, info() {}, debug() {} };
  t.broker = { Promise, options: { requestTimeout: 30000 } };
  t.nodeID = "node-a";
  t.incomingMessage = (cmd, data) => received.push({ cmd, answer: JSON.parse(data.toString()) as Answer });
  t.serialize = (packet) => Buffer.from(JSON.stringify((packet as { payload: unknown }).payload));
  return { t, published, received };
}

const packet = (type: string, id: string, target: string | null = "node-b") => ({ packet: { type, target, payload: { id } } });

it("passes packets that fit through untouched", async () => {
  const { t, published, received } = transporter(4096);
  const small = Buffer.from('{"id":"1"}');
  await t.send("MOL.RES.node-b", small, packet("RES", "1"));
  expect(published).toEqual([{ topic: "MOL.RES.node-b", data: small, reply: undefined }]);
  expect(received).toEqual([]);
});

it("answers the caller with a small 500 when an answer exceeds max_payload, and never throws", async () => {
  const { t, published } = transporter(4096);
  await expect(t.send("MOL.RES.node-b", Buffer.alloc(20000, 0x61), packet("RES", "3"))).resolves.toBeUndefined();
  expect(published).toHaveLength(1);
  expect(published[0]!.topic).toBe("MOL.RES.node-b");
  expect(JSON.parse(published[0]!.data.toString())).toMatchObject({ id: "3", success: false, error: { code: 500, type: "TRANSPORT_ERROR" } });
});

it("fails a request over max_payload on its own node (an error answer handed to Moleculer), and never throws", async () => {
  const { t, published, received } = transporter(4096);
  await expect(t.send("MOL.REQ.node-b", Buffer.alloc(20000), packet("REQ", "4"))).resolves.toBeUndefined();
  expect(published).toHaveLength(0);
  expect(received).toEqual([
    { cmd: "RES", answer: expect.objectContaining({ id: "4", success: false, error: expect.objectContaining({ code: 500, type: "TRANSPORT_ERROR" }) }) },
  ]);
});

it("drops an event or a heartbeat that does not fit, without throwing", async () => {
  const { t, published, received } = transporter(4096);
  await expect(t.send("MOL.EVENT", Buffer.alloc(10000), packet("EVENT", "5", null))).resolves.toBeUndefined();
  await expect(t.send("MOL.HEARTBEAT", Buffer.alloc(10000), { packet: { type: "HEARTBEAT", target: null, payload: {} } })).resolves.toBeUndefined();
  expect(published).toHaveLength(0);
  expect(received).toHaveLength(0);
});

it("answers a request nobody listens for with a retryable 503 NO_RESPONDERS", async () => {
  const { t, published, received } = transporter(4096);
  const internals = t as unknown as { noResponders: string; nobodyListened(id: string): void };
  internals.noResponders = "_INBOX.test";
  await t.send("MOL.REQ.node-b", Buffer.from("{}"), packet("REQ", "6"));
  expect(published[0]!.reply).toBe("_INBOX.test.6");
  internals.nobodyListened("6");
  expect(received).toEqual([
    {
      cmd: "RES",
      answer: expect.objectContaining({ id: "6", success: false, error: expect.objectContaining({ code: 503, type: "NO_RESPONDERS", retryable: true }) }),
    },
  ]);
});
