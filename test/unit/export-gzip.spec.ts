/**
 * The export worker's gzip (compressed on the worker's own thread): one gzip member whatever the
 * chunking, readable by zlib's gunzip and, as one raw deflate stream, by inflateRaw; CRC-32 and size
 * in the trailer.
 */
import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { crc32, gunzipSync, inflateRawSync } from "node:zlib";
import { GzipOnThisThread } from "../../services/exports/exports.worker";

async function gzipOf(chunks: Buffer[]): Promise<Buffer> {
  const out: Buffer[] = [];
  await pipeline(Readable.from(chunks), new GzipOnThisThread(), async function* (source) {
    for await (const c of source) out.push(c as Buffer);
  });
  return Buffer.concat(out);
}

const text = Buffer.from(Array.from({ length: 60000 }, (_, i) => `row-${i},SMS,'+35191${i},"quoted, text ${i}",ünï😀\n`).join(""));

it.each([
  ["nothing", [] as Buffer[]],
  ["one small chunk", [Buffer.from("a,b\n1,2\n")]],
  ["text in 1-byte to 300 KiB chunks", [text.subarray(0, 1), text.subarray(1, 70000), text.subarray(70000, 70001), text.subarray(70001, 400000), text.subarray(400000)]],
  ["incompressible bytes over several blocks", [randomBytes(300 * 1024), randomBytes(700 * 1024)]],
])("writes %s as one valid gzip member", async (_name, chunks) => {
  const data = Buffer.concat(chunks);
  const gz = await gzipOf(chunks);
  expect(gz.subarray(0, 3)).toEqual(Buffer.from([0x1f, 0x8b, 8]));
  expect(gunzipSync(gz).equals(data)).toBe(true);
  // One deflate stream between the 10-byte header and the 8-byte trailer (not several members).
  expect(inflateRawSync(gz.subarray(10, gz.length - 8)).equals(data)).toBe(true);
  expect(gz.readUInt32LE(gz.length - 8)).toBe(crc32(data));
  expect(gz.readUInt32LE(gz.length - 4)).toBe(data.length);
});

it("compresses text at least 4x", async () => {
  expect(text.length / (await gzipOf([text])).length).toBeGreaterThan(4);
});
