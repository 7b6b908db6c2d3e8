/**
 * Tiny real media files built in the test (headers as the formats define them), and the HTTP calls
 * media tests make: a multipart upload and a binary content read.
 */
import { crc32, deflateSync } from "node:zlib";
import type { Account } from "./app";

const u16be = (n: number) => Buffer.from([(n >> 8) & 0xff, n & 0xff]);
const u32be = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
};

function pngChunk(type: string, data: Buffer): Buffer {
  const body = Buffer.concat([Buffer.from(type, "latin1"), data]);
  return Buffer.concat([u32be(data.length), body, u32be(crc32(body))]);
}

/** A real RGBA PNG of width x height (all transparent). */
export function png(width = 3, height = 2): Buffer {
  const ihdr = Buffer.concat([u32be(width), u32be(height), Buffer.from([8, 6, 0, 0, 0])]);
  const raw = Buffer.alloc(height * (1 + 4 * width));
  return Buffer.concat([Buffer.from("89504e470d0a1a0a", "hex"), pngChunk("IHDR", ihdr), pngChunk("IDAT", deflateSync(raw)), pngChunk("IEND", Buffer.alloc(0))]);
}

/** A GIF89a of width x height (one-pixel image data, enough for its header). */
export function gif(width = 5, height = 4): Buffer {
  const lsd = Buffer.alloc(7);
  lsd.writeUInt16LE(width, 0);
  lsd.writeUInt16LE(height, 2);
  lsd[4] = 0x80; // global colour table of 2 entries
  const descriptor = Buffer.alloc(10);
  descriptor[0] = 0x2c;
  descriptor.writeUInt16LE(1, 5);
  descriptor.writeUInt16LE(1, 7);
  return Buffer.concat([Buffer.from("GIF89a", "latin1"), lsd, Buffer.from([0, 0, 0, 255, 255, 255]), descriptor, Buffer.from([2, 2, 0x44, 0x01, 0, 0x3b])]);
}

/** A baseline JPEG header (SOI, JFIF APP0, an EXIF-sized APP1, SOF0 with the size) and EOI. */
export function jpeg(width = 7, height = 6): Buffer {
  const app0 = Buffer.concat([Buffer.from([0xff, 0xe0]), u16be(16), Buffer.from("JFIF\0", "latin1"), Buffer.from([1, 1, 0, 0, 1, 0, 1, 0, 0])]);
  const app1 = Buffer.concat([Buffer.from([0xff, 0xe1]), u16be(2 + 300), Buffer.alloc(300, 0x11)]);
  const sof = Buffer.concat([
    Buffer.from([0xff, 0xc0]),
    u16be(17),
    Buffer.from([8]),
    u16be(height),
    u16be(width),
    Buffer.from([3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1]),
  ]);
  return Buffer.concat([Buffer.from([0xff, 0xd8]), app0, app1, sof, Buffer.from([0xff, 0xd9])]);
}

/** A lossless WEBP (VP8L) header of width x height. */
export function webp(width = 9, height = 8): Buffer {
  const bits = Buffer.alloc(4);
  bits.writeUInt32LE(((width - 1) & 0x3fff) | (((height - 1) & 0x3fff) << 14));
  const data = Buffer.concat([Buffer.from([0x2f]), bits, Buffer.alloc(3)]);
  const chunk = Buffer.concat([Buffer.from("VP8L", "latin1"), Buffer.alloc(4), data]);
  chunk.writeUInt32LE(data.length, 4);
  const riff = Buffer.concat([Buffer.from("RIFF", "latin1"), Buffer.alloc(4), Buffer.from("WEBP", "latin1"), chunk]);
  riff.writeUInt32LE(riff.length - 8, 4);
  return riff;
}

function box(type: string, ...payload: Buffer[]): Buffer {
  const body = Buffer.concat(payload);
  return Buffer.concat([u32be(8 + body.length), Buffer.from(type, "latin1"), body]);
}

/** An MP4: ftyp, an mdat of `mdatBytes`, then moov with an mvhd (v0) of `durationMs` at timescale 600. */
export function mp4(durationMs = 2500, mdatBytes = 64): Buffer {
  const mvhd = Buffer.alloc(100);
  mvhd.writeUInt32BE(600, 12); // timescale
  mvhd.writeUInt32BE(Math.round((durationMs * 600) / 1000), 16);
  mvhd.writeUInt32BE(0x00010000, 20);
  const ftyp = box("ftyp", Buffer.from("isom", "latin1"), u32be(0x200), Buffer.from("isomiso2mp41", "latin1"));
  return Buffer.concat([ftyp, box("mdat", Buffer.alloc(mdatBytes, 0x5a)), box("moov", box("mvhd", mvhd))]);
}

/** An MP4 of exactly `size` bytes (its mdat fills the rest). */
export function mp4OfSize(size: number, durationMs = 1000): Buffer {
  const bare = mp4(durationMs, 0);
  return mp4(durationMs, size - bare.length);
}

/** A PNG of exactly `size` bytes (a private ancillary chunk fills the rest). */
export function pngOfSize(size: number): Buffer {
  const bare = png(1, 1);
  const fill = size - bare.length - 12;
  const filler = pngChunk("prVt", Buffer.alloc(fill, 0x41));
  return Buffer.concat([bare.subarray(0, bare.length - 12), filler, bare.subarray(bare.length - 12)]);
}

export function mediaForm(file: Buffer | string | null, name = "file.bin", fields: Record<string, string> = {}, field = "file"): FormData {
  const f = new FormData();
  for (const [k, v] of Object.entries(fields)) f.append(k, v);
  if (file !== null) f.append(field, new Blob([typeof file === "string" ? file : new Uint8Array(file)], { type: "application/octet-stream" }), name);
  return f;
}

export const uploadMedia = (a: Account, file: Buffer | string | null, name = "file.bin", fields: Record<string, string> = {}) =>
  a.api.request("POST", "/media", { form: mediaForm(file, name, fields) });

/** GET /media/{id}/content with the account's key: status, headers and the exact bytes. */
export async function readContent(a: Account, id: string, headers: Record<string, string> = {}, baseUrl = a.api.baseUrl) {
  const r = await fetch(`${baseUrl}/media/${id}/content`, { headers: { "x-api-key": a.key.apiKey, ...headers } });
  const bytes = Buffer.from(await r.arrayBuffer());
  return { status: r.status, headers: r.headers, bytes };
}
