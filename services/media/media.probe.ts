/**
 * What a stored file's header says: width and height of an image (PNG IHDR, GIF screen descriptor,
 * JPEG SOFn, WEBP VP8/VP8L/VP8X), the duration of an MP4 (the `mvhd` box inside `moov`, which may
 * sit at the end of the file). Read from the file with a few small reads, never decoded; whatever a
 * header does not give (a truncated or odd file) is null.
 */
import { open, type FileHandle } from "node:fs/promises";
import type { MagicKind } from "../../lib/messaging/magic";

export interface Probe {
  width: number | null;
  height: number | null;
  durationMs: number | null;
}

const NONE: Probe = { width: null, height: null, durationMs: null };
/** Bytes of an image's head read for its dimensions (a JPEG's EXIF and ICC segments come before its SOF). */
const IMAGE_HEAD = 512 * 1024;
/** Boxes walked in an MP4 before giving up (a hostile file of countless tiny boxes). */
const MAX_BOXES = 10_000;

/** Largest width, height the media table keeps (an integer column); a header claiming more is not believed. */
export const MAX_DIMENSION = 2 ** 31 - 1;
/** Longest duration kept, in ms (a bigint column, read back as a JavaScript number). */
export const MAX_DURATION_MS = Number.MAX_SAFE_INTEGER;

const dims = (width: number, height: number): Probe =>
  width > 0 && height > 0 && width <= MAX_DIMENSION && height <= MAX_DIMENSION ? { width, height, durationMs: null } : NONE;

async function readAt(fh: FileHandle, position: number, length: number): Promise<Buffer> {
  const buf = Buffer.alloc(length);
  const { bytesRead } = await fh.read(buf, 0, length, position);
  return buf.subarray(0, bytesRead);
}

export function jpegSize(b: Buffer): Probe {
  let i = 2;
  while (i + 9 < b.length) {
    if (b[i] !== 0xff) return NONE;
    const marker = b[i + 1]!;
    if (marker === 0xff) {
      i++; // fill byte
      continue;
    }
    if (marker === 0xd8 || marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
      i += 2; // no length
      continue;
    }
    const isSof = marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc;
    if (isSof) return dims(b.readUInt16BE(i + 7), b.readUInt16BE(i + 5));
    if (marker === 0xd9 || marker === 0xda) return NONE; // end of image, or the scan began without a frame header
    i += 2 + b.readUInt16BE(i + 2);
  }
  return NONE;
}

export function imageSize(kind: MagicKind, b: Buffer): Probe {
  switch (kind) {
    case "png":
      return b.length >= 24 && b.toString("latin1", 12, 16) === "IHDR" ? dims(b.readUInt32BE(16), b.readUInt32BE(20)) : NONE;
    case "gif":
      return b.length >= 10 ? dims(b.readUInt16LE(6), b.readUInt16LE(8)) : NONE;
    case "jpeg":
      return jpegSize(b);
    case "webp": {
      const chunk = b.toString("latin1", 12, 16);
      if (chunk === "VP8 " && b.length >= 30 && b[23] === 0x9d && b[24] === 0x01 && b[25] === 0x2a)
        return dims(b.readUInt16LE(26) & 0x3fff, b.readUInt16LE(28) & 0x3fff);
      if (chunk === "VP8L" && b.length >= 25 && b[20] === 0x2f) {
        const bits = b.readUInt32LE(21);
        return dims((bits & 0x3fff) + 1, ((bits >>> 14) & 0x3fff) + 1);
      }
      if (chunk === "VP8X" && b.length >= 30) return dims(b.readUIntLE(24, 3) + 1, b.readUIntLE(27, 3) + 1);
      return NONE;
    }
    default:
      return NONE;
  }
}

/** The boxes of [start, end) of an MP4, by type and payload position; stops at the first of `wanted`. */
async function findBox(fh: FileHandle, start: number, end: number, wanted: string, budget: { boxes: number }): Promise<{ at: number; end: number } | null> {
  let pos = start;
  while (pos + 8 <= end && budget.boxes-- > 0) {
    const head = await readAt(fh, pos, 16);
    if (head.length < 8) return null;
    let size = head.readUInt32BE(0);
    const type = head.toString("latin1", 4, 8);
    let headerBytes = 8;
    if (size === 1) {
      if (head.length < 16) return null;
      const big = head.readBigUInt64BE(8);
      if (big > BigInt(end - pos)) return null; // past the enclosing box (and perhaps past any number)
      size = Number(big);
      headerBytes = 16;
    } else if (size === 0) size = end - pos;
    if (size < headerBytes || pos + size > end) return null;
    if (type === wanted) return { at: pos + headerBytes, end: pos + size };
    pos += size;
  }
  return null;
}

/** The movie's duration from moov/mvhd, in milliseconds. */
export async function mp4Duration(fh: FileHandle, fileSize: number): Promise<number | null> {
  const budget = { boxes: MAX_BOXES };
  const moov = await findBox(fh, 0, fileSize, "moov", budget);
  if (!moov) return null;
  const mvhd = await findBox(fh, moov.at, moov.end, "mvhd", budget);
  if (!mvhd) return null;
  const b = await readAt(fh, mvhd.at, 32);
  if (b.length < 20) return null;
  const version = b[0];
  let timescale: number;
  let duration: bigint;
  if (version === 1) {
    if (b.length < 32) return null;
    timescale = b.readUInt32BE(20);
    duration = b.readBigUInt64BE(24);
    if (duration === 0xffffffffffffffffn) return null;
  } else {
    timescale = b.readUInt32BE(12);
    duration = BigInt(b.readUInt32BE(16));
    if (duration === 0xffffffffn) return null;
  }
  if (!timescale) return null;
  // In integers: a 64-bit duration times 1000 is past what a double holds exactly.
  const ms = (duration * 1000n + BigInt(timescale) / 2n) / BigInt(timescale);
  return ms <= BigInt(MAX_DURATION_MS) ? Number(ms) : null;
}

/** Dimensions or duration of the file at `path`, of kind `kind`. */
export async function probeFile(path: string, kind: MagicKind, size: number): Promise<Probe> {
  const fh = await open(path, "r");
  try {
    if (kind === "mp4") return { ...NONE, durationMs: await mp4Duration(fh, size) };
    return imageSize(kind, await readAt(fh, 0, Math.min(size, IMAGE_HEAD)));
  } finally {
    await fh.close();
  }
}
