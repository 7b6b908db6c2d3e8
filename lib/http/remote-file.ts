/**
 * A file answered by reference: an action that serves a file answers `{ $remoteFile }` (which
 * node holds it, which action reads a range of it, its size) and the gateway pulls the file range by
 * range as the client takes it. Moleculer's own streams push every chunk as fast as the sender reads
 * and the receiver buffers them all, so a slow client of a large file would fill the gateway's
 * memory; pulling keeps at most one range in flight and stops when the client goes away.
 */
import { Readable } from "node:stream";

/** Bytes per range: under NATS's default 1 MB payload once base64-encoded. */
export const RANGE_BYTES = 512 * 1024;

export interface RemoteFile {
  $remoteFile: {
    /** The action answering `{ ...params, offset, length }` with those bytes: a Buffer, or base64 text. */
    action: string;
    nodeID: string;
    params: Record<string, unknown>;
    /** The whole file's size. */
    size: number;
    /** Only part of the file (a 206 answer): bytes from `start` (default 0), `length` of them (default: to the end). */
    start?: number;
    length?: number;
  };
}

export const isRemoteFile = (x: unknown): x is RemoteFile => typeof x === "object" && x !== null && "$remoteFile" in x;

/** A range's answer: raw bytes (lib/bus/serializer.ts carries a Buffer as it is), or base64 text. */
const rangeBytes = (data: unknown): Buffer => (Buffer.isBuffer(data) ? data : Buffer.from(String(data), "base64"));

type Caller = { call(action: string, params: unknown, opts: { nodeID: string }): Promise<unknown> };

/** Options of {@link remoteFileStream}. */
export interface PullOptions {
  /** Ranges asked for before the reader takes them: 1 (the default) waits for each; 2 keeps the next one coming while one is written. */
  ahead?: number;
}

/**
 * The file (or its part from `start`, `length` bytes) as a stream that asks for the next range only
 * once the previous one was taken (or, with `ahead`, keeps at most that many ranges in flight).
 */
export function remoteFileStream(ctx: Caller, file: RemoteFile["$remoteFile"], options: PullOptions = {}): Readable {
  const ahead = Math.max(1, Math.floor(options.ahead ?? 1));
  let next = file.start ?? 0;
  const end = Math.min(file.size, next + (file.length ?? file.size));
  const inFlight: Array<{ offset: number; length: number; bytes: Promise<Buffer> }> = [];
  const ask = () => {
    while (inFlight.length < ahead && next < end) {
      const offset = next;
      const length = Math.min(RANGE_BYTES, end - offset);
      next += length;
      const bytes = ctx.call(file.action, { ...file.params, offset, length }, { nodeID: file.nodeID }).then(rangeBytes);
      bytes.catch(() => {}); // reported when its turn comes (or never, once the stream is destroyed)
      inFlight.push({ offset, length, bytes });
    }
  };
  return new Readable({
    highWaterMark: RANGE_BYTES,
    read() {
      ask();
      const range = inFlight.shift();
      if (!range) {
        this.push(null);
        return;
      }
      range.bytes.then(
        (bytes) => {
          if (bytes.length !== range.length) return this.destroy(new Error(`short read at ${range.offset}: ${bytes.length} of ${range.length} bytes`));
          this.push(bytes);
        },
        (err: Error) => this.destroy(err),
      );
    },
  });
}

/**
 * An upload's bytes by reference, the reverse of `$remoteFile`: the gateway that received the
 * upload keeps its spool file under a random token while the action runs and puts this in
 * `ctx.meta.$upload`; the action pulls the bytes with {@link uploadedBytes}. Moleculer's own
 * streams (ctx.stream) are not used for uploads: they push JSON-encoded chunks as fast as the
 * sender reads, and the receiver buffers them all.
 */
export interface UploadRef {
  /** The action answering `{ ...params, offset, length }` with those bytes, raw (`gateway.uploadRange`). */
  action: string;
  /** The gateway node holding the spool file. */
  nodeID: string;
  params: Record<string, unknown>;
  size: number;
}

/**
 * Ranges of an upload in flight at once. One: with two, bench/media measured the same throughput
 * (the nodes are CPU-bound, not waiting on the round trip) and a gateway peak RSS up to 25 % higher.
 */
export const UPLOAD_AHEAD = 1;

/**
 * The uploaded file of the call as a stream pulled range by range from the gateway that received
 * it (null when the call carries none). Destroy it when giving up early: nothing more is asked for.
 */
export function uploadedBytes(ctx: Caller & { meta: unknown }): Readable | null {
  const ref = (ctx.meta as { $upload?: UploadRef } | null)?.$upload;
  if (!ref || typeof ref !== "object") return null;
  return remoteFileStream(ctx, ref, { ahead: UPLOAD_AHEAD });
}
