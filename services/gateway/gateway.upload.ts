/**
 * Multipart uploads (busboy): the file is streamed to a spool file while its SHA-256 and size are
 * taken, never held in memory; the other fields are collected as text. Limits answer 413 (file too
 * large) or 400 (too many or unexpected parts) as soon as they are crossed, and the file's kind is
 * judged by its content (415 when the action does not take it). The spool's room is reserved before
 * a byte is written (the Content-Length when given, else grown as bytes arrive): past the account's
 * share of it (UPLOAD_ACCOUNT_SHARE) 429, past the node's SPOOL_MAX_BYTES 503, both with
 * Retry-After. A body that brings less than UPLOAD_MIN_BYTES in some UPLOAD_MIN_WINDOW_MS is ended
 * with 408 (gateway.pace.ts), its reservation given back.
 */
import busboy from "busboy";
import { randomBytes, randomUUID } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdir, open, rm, stat, type FileHandle } from "node:fs/promises";
import type { IncomingMessage } from "node:http";
import path from "node:path";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { noRoom, type DiskBudget, type NoRoomDetail, type Reservation } from "../../lib/jobs/disk-budget";
import { ApiError } from "../../lib/errors";
import { RANGE_BYTES } from "../../lib/http/remote-file";
import { fitFileName } from "../../lib/http/text";
import { DESCRIBE_BYTES, describeContent, MAGIC_DECIDING_BYTES, sniffMagic } from "../../lib/messaging/magic";
import { judgedByHead, KIND_NAMES, Meter, sniffFile, type FileKind, type UploadedFile, type UploadSpec } from "../../lib/http/upload";
import { tooSlow, watchPace, type UploadPace } from "./gateway.pace";

/** Text fields of an upload: few and short (a JSON mapping is the largest). */
const MAX_FIELDS = 20;
const MAX_FIELD_BYTES = 64 * 1024;
/** Multipart framing and text fields around the file. */
const ENVELOPE_BYTES = MAX_FIELDS * MAX_FIELD_BYTES + 64 * 1024;
/** Bytes the spool file buffers while a write is under way: written together (writev) rather than one socket chunk at a time. */
const SPOOL_WRITE_BYTES = 1024 * 1024;

export interface ReceivedUpload {
  fields: Record<string, string>;
  /** Null when the request carried no file part. */
  file: UploadedFile | null;
  path: string | null;
  /** Removes the spool file (always call it once the action answered). */
  discard(): Promise<void>;
}

const MULTIPART_RE = /^multipart\/form-data\s*;/i;
const mib = (n: number) => `${Math.round((n / 1024 / 1024) * 10) / 10} MiB`;

function tooLarge(spec: UploadSpec, kind?: FileKind): ApiError {
  const own = kind && spec.kindMaxBytes?.[kind];
  if (own) return new ApiError("PAYLOAD_TOO_LARGE", `The file is larger than ${mib(own)}, the limit for ${KIND_NAMES[kind]} files.`);
  return new ApiError("PAYLOAD_TOO_LARGE", `The file is larger than ${mib(spec.maxBytes)}.`);
}

function unsupported(spec: UploadSpec, what: string): ApiError {
  const accepted = spec.accept.map((k) => KIND_NAMES[k]).join(", ");
  return new ApiError("UNSUPPORTED_MEDIA_TYPE", `The file must be one of ${accepted} (judged by its content); this one is ${what}.`, { found: what });
}

/**
 * For kinds told by their first bytes: judges the file from its head as it streams (415 as soon as
 * the head is seen, whatever the rest), then cuts it (413) the moment it passes its kind's limit,
 * or at once when the body's declared length already passes that limit and the envelope.
 */
class HeadJudge extends Transform {
  kind: FileKind | null = null;
  private head: Buffer[] = [];
  private seen = 0;
  constructor(
    private readonly spec: UploadSpec,
    /** The body's Content-Length, when declared. */
    private readonly declared: number | null = null,
  ) {
    super({
      transform: (chunk: Buffer, _enc, done) => {
        this.seen += chunk.length;
        if (!this.kind) {
          this.head.push(chunk);
          const err = this.judge(false);
          if (err) return done(err);
          if (this.kind && this.declared !== null && this.declared > this.limit(this.kind) + ENVELOPE_BYTES) return done(tooLarge(this.spec, this.kind));
        }
        if (this.kind && this.seen > this.limit(this.kind)) return done(tooLarge(this.spec, this.kind));
        done(null, chunk);
      },
      flush: (done) => done(this.kind || this.seen === 0 ? null : this.judge(true)),
    });
  }
  private limit(kind: FileKind): number {
    return this.spec.kindMaxBytes?.[kind] ?? this.spec.maxBytes;
  }
  /** Null while undecided (or decided and accepted); the 415 once the head shows a kind not accepted. */
  private judge(ended: boolean): ApiError | null {
    const head = Buffer.concat(this.head);
    this.head = [head];
    const kind = head.length >= MAGIC_DECIDING_BYTES || ended ? sniffMagic(head) : null;
    if (kind && this.spec.accept.includes(kind)) {
      this.kind = kind;
      this.head = [];
      return null;
    }
    // Not one of ours: enough of the head to say what it is.
    if (head.length >= DESCRIBE_BYTES || ended) return unsupported(this.spec, describeContent(head));
    return null;
  }
}

function fieldError(field: string, message: string): ApiError {
  return new ApiError("VALIDATION_ERROR", `The upload is not acceptable: ${field} ${message}.`, { errors: [{ path: field, message }] });
}

const SPOOL_FULL: NoRoomDetail = {
  account: "This account's uploads in progress on this gateway hold all the room it may use; retry once some have ended.",
  node: "No room for the upload on this gateway now; retry shortly.",
};

/** Where the spool's room is reserved (one ledger per gateway node) and for whom. */
export interface SpoolBudget {
  ledger: DiskBudget;
  account: string;
}

/** Receives the multipart body of `req` into `spoolDir`; rejects with the problem to answer (408 when it comes slower than `pace`). */
export async function receiveUpload(
  req: IncomingMessage,
  spec: UploadSpec,
  spoolDir: string,
  budget?: SpoolBudget,
  pace?: UploadPace,
): Promise<ReceivedUpload> {
  const type = req.headers["content-type"] ?? "";
  if (!MULTIPART_RE.test(type)) {
    throw new ApiError(
      "UNSUPPORTED_MEDIA_TYPE",
      `Content-Type ${type ? `"${type.slice(0, 100)}"` : "(none)"} is not supported here; send multipart/form-data with the file in the field "${spec.field}".`,
    );
  }
  const declared = Number(req.headers["content-length"]);
  if (Number.isFinite(declared) && declared > spec.maxBytes + ENVELOPE_BYTES) throw tooLarge(spec);
  // The body's declared length is reserved whole before it is read; without one, the reservation grows with the file.
  let reservation: Reservation | null = null;
  if (budget) {
    const bytes = Number.isFinite(declared) && declared >= 0 ? declared : 0;
    reservation = budget.ledger.reserve(budget.account, bytes);
    if (!reservation) throw noRoom(budget.ledger, budget.account, bytes, SPOOL_FULL);
  }

  await mkdir(spoolDir, { recursive: true });
  const spoolPath = path.join(spoolDir, randomUUID());
  const fields: Record<string, string> = Object.create(null);
  let file: Omit<UploadedFile, "kind"> | null = null;
  let writing: Promise<void> | null = null;
  let headJudge: HeadJudge | null = null;

  const discard = () => rm(spoolPath, { force: true }).finally(() => reservation?.release());
  let stopPace: (() => void) | null = null;
  try {
    await new Promise<void>((resolve, reject) => {
      let failed = false;
      let current: (NodeJS.ReadableStream & { destroy(): void }) | null = null;
      let sink: ReturnType<typeof createWriteStream> | null = null;
      const fail = (err: unknown) => {
        if (failed) return;
        failed = true;
        req.unpipe(bb);
        current?.destroy();
        sink?.destroy(); // the spool file is closed now, whatever the part's stream does
        reject(err);
      };
      let bb: busboy.Busboy;
      try {
        bb = busboy({
          headers: req.headers,
          defParamCharset: "utf8",
          // busboy reports its limit once a file *reaches* it: one byte more, so that a file of exactly maxBytes passes.
          limits: { files: 1, fileSize: spec.maxBytes + 1, fields: MAX_FIELDS, fieldSize: MAX_FIELD_BYTES, parts: MAX_FIELDS + 1, headerPairs: 20 },
        });
      } catch (err) {
        // A multipart type without a boundary, say.
        throw new ApiError("BAD_REQUEST", `The multipart body cannot be read: ${(err as Error).message}.`);
      }
      bb.on("file", (name, stream, info) => {
        if (failed) {
          stream.resume();
          return;
        }
        if (name !== spec.field) {
          stream.resume();
          return fail(fieldError(name, `is not a file field of this upload (the file goes in "${spec.field}")`));
        }
        current = stream;
        const meter = new Meter();
        stream.on("limit", () => fail(tooLarge(spec)));
        sink = createWriteStream(spoolPath, { highWaterMark: SPOOL_WRITE_BYTES });
        const judge = judgedByHead(spec.accept)
          ? (headJudge = new HeadJudge(spec, Number.isFinite(declared) ? declared : null))
          : new Transform({ transform: (c, _e, done) => done(null, c) });
        // Each chunk is counted in the reservation before it is written; one that does not fit ends the upload (429 or 503).
        let written = 0;
        const room = new Transform({
          transform(chunk: Buffer, _enc, done) {
            written += chunk.length;
            if (reservation && budget && !reservation.growTo(written)) {
              return done(noRoom(budget.ledger, budget.account, written - reservation.bytes, SPOOL_FULL));
            }
            done(null, chunk);
          },
        });
        writing = pipeline(stream, judge, room, meter, sink).then(() => {
          // Control characters (NUL above all) have no place in a file name that is stored and shown.
          const cleaned = (info.filename ?? "").replace(/[\u0000-\u001f\u007f]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, "");
          // At most 255 characters (code points, as stored and as the answers' schemas count): cut between graphemes, extension kept.
          const fileName = fitFileName(cleaned, 255);
          file = { name: fileName || "upload", size: meter.size, sha256: meter.sha256() };
        });
        writing.catch(fail);
      });
      bb.on("field", (name, value, info) => {
        if (name === spec.field) return fail(fieldError(name, "must be a file part (with a filename), not a text field"));
        if (info.valueTruncated) return fail(fieldError(name, `is longer than ${MAX_FIELD_BYTES / 1024} KiB`));
        if (Object.prototype.hasOwnProperty.call(fields, name)) return fail(fieldError(name, "is given more than once"));
        fields[name] = value;
      });
      bb.on("filesLimit", () => fail(fieldError(spec.field, "must be the only file of the upload")));
      bb.on("fieldsLimit", () => fail(fieldError("(fields)", `must be at most ${MAX_FIELDS}`)));
      bb.on("partsLimit", () => fail(fieldError("(fields)", `must be at most ${MAX_FIELDS + 1} parts`)));
      bb.on("error", (err) => fail(new ApiError("BAD_REQUEST", `The multipart body is malformed: ${(err as Error).message}.`)));
      bb.on("close", () => {
        if (failed) return;
        Promise.resolve(writing).then(() => resolve(), fail);
      });
      req.on("close", () => {
        if (!req.complete) fail(new ApiError("BAD_REQUEST", "The client closed the upload before its end."));
      });
      req.on("error", fail);
      if (pace) stopPace = watchPace(req, pace, () => fail(tooSlow(pace)));
      req.pipe(bb);
    }).finally(() => stopPace?.());
    if (!file) return { fields, file: null, path: null, discard };
    const received = file as Omit<UploadedFile, "kind">;
    if (received.size === 0) throw fieldError(spec.field, "is empty");
    if (received.size > spec.maxBytes || (await stat(spoolPath)).size !== received.size) throw tooLarge(spec);
    const kind = headJudge ? (headJudge as HeadJudge).kind : await sniffFile(spoolPath);
    if (!kind || !spec.accept.includes(kind)) {
      const accepted = spec.accept.map((k) => KIND_NAMES[k]).join(" or ");
      const what = kind ? `a ${KIND_NAMES[kind]} file` : "none of the supported kinds";
      throw new ApiError("UNSUPPORTED_MEDIA_TYPE", `The file must be ${accepted} (judged by its content); this one is ${what}.`);
    }
    return { fields, file: { ...received, kind }, path: spoolPath, discard };
  } catch (err) {
    await discard();
    throw err;
  }
}

/** Bytes of an upload range read from the spool: at most RANGE_BYTES. */
export interface UploadRangeIn {
  token: string;
  offset: number;
  length: number;
}

export const uploadRangeIn = {
  $id: "GatewayUploadRangeIn",
  type: "object",
  additionalProperties: false,
  required: ["token", "offset", "length"],
  properties: {
    token: { type: "string", pattern: "^[0-9a-f]{32}$" },
    offset: { type: "integer", minimum: 0 },
    length: { type: "integer", minimum: 1, maximum: RANGE_BYTES },
  },
};

/**
 * The spool files of the uploads whose actions are running, each under a random 128-bit token: the
 * only files `gateway.uploadRange` reads. A token lives from the call to its answer (or failure).
 */
export class SpoolTokens {
  /** Each file is opened once, at its first range, and closed when its token is dropped and no read is left. */
  private readonly files = new Map<string, SpoolFile>();

  /** Registers `path` and answers its token. */
  add(path: string, size: number): string {
    const token = randomBytes(16).toString("hex");
    this.files.set(token, { path, size, fh: null, reads: 0, dropped: false });
    return token;
  }

  drop(token: string): void {
    const file = this.files.get(token);
    if (!file) return;
    this.files.delete(token);
    file.dropped = true;
    if (file.reads === 0) SpoolTokens.close(file);
  }

  get size(): number {
    return this.files.size;
  }

  /** `length` bytes from `offset` of the file under `token` (fewer at its end); a clean error for a token no upload holds. */
  async read({ token, offset, length }: UploadRangeIn): Promise<Buffer> {
    const file = this.files.get(token);
    if (!file) throw new ApiError("NOT_FOUND", "No upload under this token: its call has ended.");
    file.reads++;
    try {
      file.fh ??= open(file.path, "r");
      const fh = await file.fh;
      const buf = Buffer.allocUnsafe(Math.max(0, Math.min(length, file.size - offset)));
      const { bytesRead } = await fh.read(buf, 0, buf.length, offset);
      return buf.subarray(0, bytesRead);
    } finally {
      if (--file.reads === 0 && file.dropped) SpoolTokens.close(file);
    }
  }

  private static close(file: SpoolFile): void {
    const fh = file.fh;
    file.fh = null;
    fh?.then((h) => h.close()).catch(() => undefined);
  }
}

interface SpoolFile {
  path: string;
  size: number;
  fh: Promise<FileHandle> | null;
  /** Reads under way: the handle is closed after the last of them once the token is dropped. */
  reads: number;
  dropped: boolean;
}
