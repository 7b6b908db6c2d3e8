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
    /** The action answering `{ ...params, offset, length }` with those bytes, base64-encoded. */
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

type Caller = { call(action: string, params: unknown, opts: { nodeID: string }): Promise<unknown> };

/** The file (or its part from `start`, `length` bytes) as a stream that asks for the next range only once the previous one was taken. */
export function remoteFileStream(ctx: Caller, file: RemoteFile["$remoteFile"]): Readable {
  let offset = file.start ?? 0;
  const end = Math.min(file.size, offset + (file.length ?? file.size));
  return new Readable({
    highWaterMark: RANGE_BYTES,
    read() {
      if (offset >= end) {
        this.push(null);
        return;
      }
      const length = Math.min(RANGE_BYTES, end - offset);
      ctx.call(file.action, { ...file.params, offset, length }, { nodeID: file.nodeID }).then(
        (data) => {
          const bytes = Buffer.from(String(data), "base64");
          if (bytes.length !== length) return this.destroy(new Error(`short read at ${offset}: ${bytes.length} of ${length} bytes`));
          offset += length;
          this.push(bytes);
        },
        (err: Error) => this.destroy(err),
      );
    },
  });
}
