/**
 * The transporter's answer-in-parts framing and its failure handling, without a server: a stub
 * client that enforces a max_payload as the nats client does (a synchronous throw).
 */
import { SafeNatsTransporter } from "../../lib/nats-transporter";

interface Stubbed {
  client: { publish(topic: string, data: Buffer): void; info: { max_payload: number } };
  announced: number;
  incomingMessage(cmd: string, data: Buffer): unknown;
  logger: { warn(): void; error(): void; info(): void; debug(): void };
  broker: { Promise: PromiseConstructor };
  transit: unknown;
  send(topic: string, data: Buffer, meta?: unknown): Promise<void>;
  receive(cmd: string, data: Buffer): unknown;
  serialize(packet: unknown): Buffer;
}

function transporter(maxPayload: number, maxChunks = 32) {
  const t = new SafeNatsTransporter({}, 0, maxChunks) as unknown as Stubbed;
  const published: Buffer[] = [];
  const received: Buffer[] = [];
  const errors: unknown[] = [];
  t.client = {
    info: { max_payload: maxPayload },
    publish(_topic, data) {
      if (data.length > maxPayload) throw Object.assign(new Error("MAX_PAYLOAD_EXCEEDED"), { name: "NatsError", code: "MAX_PAYLOAD_EXCEEDED" });
      published.push(data);
    },
  };
  t.announced = maxPayload;
  t.logger = { warn() {}, error() {}, info() {}, debug() {} };
  t.broker = { Promise };
  t.incomingMessage = (_cmd, data) => received.push(data);
  t.serialize = (packet) => Buffer.from(JSON.stringify((packet as { payload: unknown }).payload));
  t.transit = {
    pendingRequests: new Map(),
    removePendingRequest() {},
    _createPayloadErrorField(err: Error) {
      errors.push(err);
      return { name: err.name, message: err.message, code: 500 };
    },
  };
  return { t, published, received, errors };
}

const res = (id: string) => ({ packet: { type: "RES", target: "node-b", payload: { id } } });

it("sends an answer larger than max_payload in parts that the receiving side puts together, whatever their order", async () => {
  const { t, published, received } = transporter(4096);
  const answer = Buffer.from(JSON.stringify({ text: "x".repeat(20000) }));
  await t.send("RES.node-b", answer, res("1"));
  expect(published.length).toBe(Math.ceil(answer.length / (4096 - 34 - 1024)));
  for (const p of published) expect(p.length).toBeLessThanOrEqual(4096);
  for (const p of [...published].reverse()) t.receive("RES", p);
  t.receive("RES", published[0]!); // a repeat of a part changes nothing
  expect(received).toHaveLength(1);
  expect(received[0]!.equals(answer)).toBe(true);
});

it("passes small packets through untouched", async () => {
  const { t, published, received } = transporter(4096);
  const small = Buffer.from('{"id":"2"}');
  await t.send("RES.node-b", small, res("2"));
  expect(published).toEqual([small]);
  t.receive("RES", small);
  expect(received).toEqual([small]);
});

it("answers the caller with a small 500 when an answer exceeds its parts, and never throws", async () => {
  const { t, published, errors } = transporter(4096, 2);
  await expect(t.send("RES.node-b", Buffer.alloc(20000, 0x61), res("3"))).resolves.toBeUndefined();
  expect(errors).toHaveLength(1);
  expect(errors[0]).toMatchObject({ code: 500, type: "TRANSPORT_ERROR" });
  expect(published).toHaveLength(1);
  expect(JSON.parse(published[0]!.toString())).toMatchObject({ id: "3", success: false });
});

it("drops an event or a heartbeat that does not fit, without throwing", async () => {
  const { t, published } = transporter(4096);
  await expect(t.send("EVENT", Buffer.alloc(10000), { packet: { type: "EVENT", target: null, payload: {} } })).resolves.toBeUndefined();
  expect(published).toHaveLength(0);
});
