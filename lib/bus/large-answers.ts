/**
 * Answers sized by design. Every request and answer crosses the bus as one NATS message, under the
 * server's max_payload (lib/bus/nats-transporter.ts frames nothing in parts). The answers that can
 * outgrow it are pages: 1000 history rows with 10,000-character texts pass 10 MB, a page of contacts
 * with custom fields or a bulk status of 1000 long ids a few MB. So a page of more than INLINE_ROWS
 * rows answered to another node crosses as a Moleculer stream (a documented answer type: the
 * transit sends it as a series of RES packets of at most `transit.maxChunkSize` bytes each) of the
 * page encoded by the broker's own serializer, and the caller's node decodes it back into the page
 * before anyone else sees it. Calls inside one process, and every other answer, are untouched.
 *
 * Files never cross whole either: they are pulled in ranges (lib/http/remote-file.ts), each answer
 * one range under the limit.
 */
import type { Context, Middleware, ServiceBroker } from "moleculer";
import { Readable } from "node:stream";

/** Pages of up to this many rows are answered inline: 20 of the largest rows (history, 10,000-character texts) are about 200 KB. */
export const INLINE_ROWS = 20;

/** Bytes per chunk of a streamed page: Moleculer's default maxChunkSize, a quarter of NATS's default 1 MiB max_payload. */
export const PAGE_CHUNK_BYTES = 256 * 1024;

/** The answer's meta says the answer is a page encoded as a stream (its value: the encoded length). */
const MARK = "$encodedPage";

type Handler = (ctx: Context) => Promise<unknown>;

const isLargePage = (res: unknown): res is Record<string, unknown> =>
  typeof res === "object" && res !== null && Array.isArray((res as { data?: unknown }).data) && (res as { data: unknown[] }).data.length > INLINE_ROWS;

/** The broker's serializer (every broker has one once created). */
function serializerOf(broker: ServiceBroker): NonNullable<ServiceBroker["serializer"]> {
  if (!broker.serializer) throw new Error("The broker has no serializer.");
  return broker.serializer;
}

/** The page as a byte stream, in chunks the bus carries one message each. */
function encode(broker: ServiceBroker, ctx: Context, page: Record<string, unknown>): Readable {
  const bytes = serializerOf(broker).serialize(page, "RES");
  (ctx.meta as Record<string, unknown>)[MARK] = bytes.length;
  const chunks: Buffer[] = [];
  for (let at = 0; at < bytes.length; at += PAGE_CHUNK_BYTES) chunks.push(bytes.subarray(at, at + PAGE_CHUNK_BYTES));
  return Readable.from(chunks, { objectMode: false });
}

/** The page back from its stream (the time-out of the call covers the whole stream). */
async function decode(broker: ServiceBroker, ctx: Context, stream: Readable): Promise<unknown> {
  const meta = ctx.meta as Record<string, unknown>;
  const expected = Number(meta[MARK]);
  delete meta[MARK];
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  const bytes = Buffer.concat(chunks);
  if (bytes.length !== expected) throw new Error(`A streamed page ended after ${bytes.length} of ${expected} bytes.`);
  return serializerOf(broker).deserialize(bytes, "RES");
}

/**
 * The middleware, on every node: the callee's side (localAction) encodes a large page answered to
 * another node, the caller's side (remoteAction) decodes it. It sits between ContextTracker and
 * Timeout: outside the action hooks (they see the page), inside the time-out (a stream cut midway
 * ends as a time-out).
 */
export const LargeAnswers = {
  name: "LargeAnswers",
  localAction(this: ServiceBroker, handler: Handler) {
    return (ctx: Context) => {
      const p = handler(ctx);
      if (!ctx.nodeID || ctx.nodeID === this.nodeID) return p;
      return p.then((res) => (isLargePage(res) ? encode(this, ctx, res) : res));
    };
  },
  remoteAction(this: ServiceBroker, handler: Handler) {
    return (ctx: Context) =>
      handler(ctx).then((res) => (res instanceof Readable && (ctx.meta as Record<string, unknown>)?.[MARK] != null ? decode(this, ctx, res) : res));
  },
} as unknown as Middleware;
