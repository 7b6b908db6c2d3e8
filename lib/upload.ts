/**
 * File uploads, once for every service: what an action declares to take a file, what it receives
 * about it, and how a file's kind is told from its content (never from its name or declared type).
 */
import { createHash } from "node:crypto";
import { open } from "node:fs/promises";
import { Transform } from "node:stream";
import { ApiError } from "./errors";

export const FILE_KINDS = ["csv", "xlsx", "vcard"] as const;
export type FileKind = (typeof FILE_KINDS)[number];

/** The names a partner reads in a 415. */
export const KIND_NAMES: Record<FileKind, string> = { csv: "CSV", xlsx: "XLSX", vcard: "vCard (VCF)" };

/** An action that takes a multipart upload declares this (see ApiActionSpec.upload). */
export interface UploadSpec {
  /** The multipart field that carries the file. */
  field: string;
  /** Largest file accepted; beyond it 413. */
  maxBytes: number;
  /** Kinds accepted (by content); anything else 415. */
  accept: readonly FileKind[];
  /** One line for the OpenAPI document. */
  description?: string;
}

/** What the action gets in `params[field]`; the bytes come as `ctx.stream`. */
export interface UploadedFile {
  name: string;
  size: number;
  sha256: string;
  kind: FileKind;
}

export const uploadedFileSchema = {
  type: "object",
  additionalProperties: false,
  required: ["name", "size", "sha256", "kind"],
  properties: {
    name: { type: "string", maxLength: 255 },
    size: { type: "integer", minimum: 0 },
    sha256: { type: "string", pattern: "^[0-9a-f]{64}$" },
    kind: { type: "string", enum: [...FILE_KINDS] },
  },
};

/** A pass-through that takes the size and SHA-256 of what flows through it (read them once it has ended). */
export class Meter extends Transform {
  private readonly hash = createHash("sha256");
  size = 0;
  constructor() {
    super({
      transform: (chunk: Buffer, _enc, done) => {
        this.hash.update(chunk);
        this.size += chunk.length;
        done(null, chunk);
      },
    });
  }
  sha256(): string {
    return this.hash.digest("hex");
  }
}

const SNIFF_BYTES = 64 * 1024;
/** Uncompressed size a zip (XLSX) may declare. */
export const MAX_EXPANDED_BYTES = 1024 * 1024 * 1024;

/** The zip's central directory names `name` (read from the end of the file: the end record, then the directory). */
async function zipHasEntry(path: string, size: number, wanted: (name: string) => boolean): Promise<boolean> {
  const fh = await open(path, "r");
  try {
    const tailLen = Math.min(size, 22 + 0xffff);
    const tail = Buffer.alloc(tailLen);
    await fh.read(tail, 0, tailLen, size - tailLen);
    let eocd = -1;
    for (let i = tailLen - 22; i >= 0; i--) {
      if (tail.readUInt32LE(i) === 0x06054b50) {
        eocd = i;
        break;
      }
    }
    if (eocd < 0) return false;
    const cdSize = tail.readUInt32LE(eocd + 12);
    const cdOffset = tail.readUInt32LE(eocd + 16);
    if (cdOffset + cdSize > size || cdSize > 16 * 1024 * 1024) return false;
    const cd = Buffer.alloc(cdSize);
    await fh.read(cd, 0, cdSize, cdOffset);
    let found = false;
    let expanded = 0;
    for (let p = 0; p + 46 <= cd.length && cd.readUInt32LE(p) === 0x02014b50;) {
      const nameLen = cd.readUInt16LE(p + 28);
      const extraLen = cd.readUInt16LE(p + 30);
      const commentLen = cd.readUInt16LE(p + 32);
      expanded += cd.readUInt32LE(p + 24);
      if (wanted(cd.toString("utf8", p + 46, p + 46 + nameLen))) found = true;
      p += 46 + nameLen + extraLen + commentLen;
    }
    // A zip bomb, or a workbook no import should unpack: readers spill its sheets to disk.
    if (found && expanded > MAX_EXPANDED_BYTES)
      throw new ApiError("PAYLOAD_TOO_LARGE", `The workbook expands to more than ${MAX_EXPANDED_BYTES / 1024 / 1024 / 1024} GiB; save it as CSV instead.`);
    return found;
  } finally {
    await fh.close();
  }
}

/** Text a person could have written: no NUL and no control characters other than tab, line breaks and form feed. */
const BINARY_BYTE = /[\x00-\x08\x0e-\x1a\x1c-\x1f]/;

/**
 * The kind of the file at `path`, judged by its content: XLSX is a zip holding a workbook; a vCard
 * is text that begins with BEGIN:VCARD; CSV is any other text (UTF-8 or a single-byte Windows
 * encoding). Null: none of these (a picture, a PDF, an old .xls, UTF-16 text...).
 */
export async function sniffFile(path: string): Promise<FileKind | null> {
  const fh = await open(path, "r");
  let head: Buffer;
  let size: number;
  try {
    size = (await fh.stat()).size;
    head = Buffer.alloc(Math.min(size, SNIFF_BYTES));
    await fh.read(head, 0, head.length, 0);
  } finally {
    await fh.close();
  }
  if (head.length >= 4 && head.readUInt32LE(0) === 0x04034b50) {
    return (await zipHasEntry(path, size, (n) => n === "xl/workbook.xml")) ? "xlsx" : null;
  }
  const text = head.toString("latin1");
  if (BINARY_BYTE.test(text)) return null;
  return /^(\xef\xbb\xbf)?\s*BEGIN:VCARD\s/i.test(text) ? "vcard" : "csv";
}
