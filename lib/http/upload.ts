/**
 * File uploads, once for every service: what an action declares to take a file, what it receives
 * about it, and how a file's kind is told from its content (never from its name or declared type).
 */
import { createHash } from "node:crypto";
import { open } from "node:fs/promises";
import { Transform } from "node:stream";
import yauzl, { type Entry, type ZipFile } from "yauzl";
import { ApiError } from "../errors";
import { MAGIC_KINDS, type MagicKind } from "../messaging/magic";
import type { SchemaOf } from "./schema-type";

/** Kinds told by reading the whole file (contacts imports), then the kinds told by their first bytes (lib/messaging/magic.ts: media). */
export const FILE_KINDS = ["csv", "xlsx", "vcard", ...MAGIC_KINDS] as const;
export type FileKind = (typeof FILE_KINDS)[number];

/** The names a partner reads in a 415. */
export const KIND_NAMES: Record<FileKind, string> = {
  csv: "CSV",
  xlsx: "XLSX",
  vcard: "vCard (VCF)",
  jpeg: "JPEG",
  png: "PNG",
  gif: "GIF",
  webp: "WEBP",
  mp4: "MP4",
};

/** Every accepted kind is told by its first bytes: the gateway judges the upload while it streams (and each kind may have its own limit). */
export const judgedByHead = (accept: readonly FileKind[]): accept is readonly MagicKind[] =>
  accept.length > 0 && accept.every((k) => (MAGIC_KINDS as readonly string[]).includes(k));

/** An action that takes a multipart upload declares this (see ApiActionSpec.upload). */
export interface UploadSpec {
  /** The multipart field that carries the file. */
  field: string;
  /** Largest file accepted; beyond it 413 (a Content-Length past it and the multipart envelope: at once, before reading). */
  maxBytes: number;
  /** Kinds accepted (by content); anything else 415. */
  accept: readonly FileKind[];
  /**
   * Smaller limits for some kinds (kinds told by their first bytes only): the kind is judged as soon
   * as the first bytes arrive, and a file is cut (413) the moment it passes its own kind's limit.
   */
  kindMaxBytes?: Partial<Record<FileKind, number>>;
  /** One line for the OpenAPI document. */
  description?: string;
}

/** What the action gets in `params[field]`; it reads the bytes with `uploadedBytes(ctx)` (lib/http/remote-file.ts). */
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
} satisfies SchemaOf<UploadedFile>;

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
/** Uncompressed size a zip (XLSX) may declare, and the most its entries may really inflate to when an import reads them. */
export const MAX_EXPANDED_BYTES = 1024 * 1024 * 1024;
/** Entries a zip (XLSX) may hold: a workbook has tens; a zip of countless tiny entries is an attack on the reader. */
export const MAX_ZIP_ENTRIES = 10_000;

export const mib = (bytes: number) => `${Math.round((bytes / 1024 / 1024) * 10) / 10} MiB`;
/** The reason an import (or an upload) gives for a workbook past the budget. */
export const tooLargeWhenExpanded = (budget: number) =>
  `The workbook expands to more than ${mib(budget)} when unpacked (a zip bomb, or a workbook no import should unpack); save it as CSV instead.`;

/** A zip opened with yauzl, its central directory listed: read entries with `zip.openReadStream`, whose sizes yauzl checks. */
export interface ZipListing {
  zip: ZipFile;
  entries: Map<string, Entry>;
  /** The sum of the uncompressed sizes the directory declares. */
  declaredBytes: number;
}

/**
 * Opens the zip at `path` with yauzl (which checks the directory's records, and while inflating
 * that each entry yields exactly the bytes it declares) and lists its entries. Throws a message
 * beginning "The workbook" for too many entries; yauzl's own errors for a zip it cannot read.
 * The caller closes `zip`.
 */
export async function listZip(path: string): Promise<ZipListing> {
  const zip = await yauzl.openPromise(path, { lazyEntries: true, autoClose: false, validateEntrySizes: true, strictFileNames: false });
  try {
    if (zip.entryCount > MAX_ZIP_ENTRIES)
      throw new Error(`The workbook holds ${zip.entryCount} parts, more than the ${MAX_ZIP_ENTRIES} an import reads; save it as CSV instead.`);
    const entries = new Map<string, Entry>();
    let declaredBytes = 0;
    await new Promise<void>((resolve, reject) => {
      zip.on("entry", (e: Entry) => {
        entries.set(e.fileName, e);
        declaredBytes += e.uncompressedSize;
        zip.readEntry();
      });
      zip.on("end", resolve);
      zip.on("error", reject);
      zip.readEntry();
    });
    return { zip, entries, declaredBytes };
  } catch (err) {
    zip.close();
    throw err;
  }
}

/** The zip names `xl/workbook.xml` (read through its central directory) and does not declare more than the budget. */
async function isWorkbook(path: string): Promise<boolean> {
  let listing: ZipListing;
  try {
    listing = await listZip(path);
  } catch (err) {
    if ((err as Error).message.startsWith("The workbook")) throw new ApiError("PAYLOAD_TOO_LARGE", (err as Error).message);
    return false; // not a zip yauzl can read
  }
  listing.zip.close();
  if (!listing.entries.has("xl/workbook.xml")) return false;
  // A zip bomb that declares its sizes honestly; one that lies is stopped while the import inflates it.
  if (listing.declaredBytes > MAX_EXPANDED_BYTES) throw new ApiError("PAYLOAD_TOO_LARGE", tooLargeWhenExpanded(MAX_EXPANDED_BYTES));
  return true;
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
    return (await isWorkbook(path)) ? "xlsx" : null;
  }
  const text = head.toString("latin1");
  if (BINARY_BYTE.test(text)) return null;
  return /^(\xef\xbb\xbf)?\s*BEGIN:VCARD\s/i.test(text) ? "vcard" : "csv";
}
