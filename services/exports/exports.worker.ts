/**
 * The export worker (a piscina thread): PostgreSQL writes the CSV itself (COPY (SELECT ...) TO
 * STDOUT, through pg-copy-streams on a connection of this thread's own), and this thread only
 * compresses the bytes as they come (at a lower priority than the service's own thread) and writes
 * them to a temporary file, renamed into place once
 * complete and on disk. Backpressure runs from the file back to the server's socket, so memory
 * stays flat whatever the row count.
 */
import { createWriteStream } from "node:fs";
import os from "node:os";
import { open, rename, rm, stat } from "node:fs/promises";
import { Transform, type TransformCallback } from "node:stream";
import { pipeline } from "node:stream/promises";
import { constants, crc32, deflateRawSync } from "node:zlib";
import pg from "pg";
import { to as copyTo } from "pg-copy-streams";

export interface ExportTask {
  /** Connection URL (PostgreSQL, or the embedded database's socket). */
  url: string;
  /** The SELECT; run as COPY (...) TO STDOUT WITH (FORMAT csv, HEADER). */
  sql: string;
  tmpPath: string;
  finalPath: string;
}

export interface ExportResult {
  rowCount: number;
  bytes: number;
}

// This thread yields the CPU to the service's own thread (the gateway's requests): on Linux a
// thread's nice value is its own, so only the export runs at the lower priority.
try {
  os.setPriority(10);
} catch {
  // not permitted here: run at the normal priority
}

/** The longest an export's COPY may run (2 hours): past it, the run fails and is retried. */
const MAX_RUN_MS = 2 * 3600_000;

/** Fast gzip: the file is written at the speed PostgreSQL produces it; level 1 still shrinks CSV 5-8x. */
const GZIP_LEVEL = 1;
/** Bytes compressed at a time. */
const GZIP_BLOCK = 256 * 1024;

/**
 * One gzip member, compressed on this thread. Node's zlib streams compress on the libuv thread pool,
 * at the process's normal priority, where they would compete with the service's own thread; here
 * each block is deflated synchronously (flushed to a byte boundary, so the blocks chain into one
 * deflate stream), at this thread's lower priority, with the gzip header, CRC-32 and size around it.
 */
export class GzipOnThisThread extends Transform {
  private crc = 0;
  private size = 0;
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  constructor(private readonly level = GZIP_LEVEL) {
    super();
    this.push(Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff])); // magic, deflate, no flags, no mtime, unknown OS
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    if (this.pendingBytes >= GZIP_BLOCK) this.deflatePending();
    done();
  }

  override _flush(done: TransformCallback): void {
    this.deflatePending();
    const trailer = Buffer.alloc(8);
    trailer.writeUInt32LE(this.crc >>> 0, 0);
    trailer.writeUInt32LE(this.size >>> 0, 4);
    // The final (empty) block ends the deflate stream.
    done(null, Buffer.concat([deflateRawSync(Buffer.alloc(0), { level: this.level }), trailer]));
  }

  private deflatePending(): void {
    if (this.pendingBytes === 0) return;
    const block = this.pending.length === 1 ? this.pending[0]! : Buffer.concat(this.pending, this.pendingBytes);
    this.pending = [];
    this.pendingBytes = 0;
    this.crc = crc32(block, this.crc);
    this.size = (this.size + block.length) % 2 ** 32;
    this.push(deflateRawSync(block, { level: this.level, finishFlush: constants.Z_SYNC_FLUSH }));
  }
}

export default async function runExport(task: ExportTask): Promise<ExportResult> {
  const client = new pg.Client({
    connectionString: task.url,
    application_name: "partner-gateway-export",
    client_encoding: "UTF8",
    // A dead peer (failover, partition) is noticed, and no export runs for ever.
    keepAlive: true,
    statement_timeout: MAX_RUN_MS,
  });
  await client.connect();
  let written = false;
  try {
    const copy = client.query(copyTo(`COPY (${task.sql}) TO STDOUT WITH (FORMAT csv, HEADER)`, { highWaterMark: 256 * 1024 }));
    await pipeline(copy, new GzipOnThisThread(), createWriteStream(task.tmpPath, { flags: "wx", highWaterMark: 256 * 1024 }));
    const fh = await open(task.tmpPath, "r");
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(task.tmpPath, task.finalPath);
    written = true;
    return { rowCount: copy.rowCount, bytes: (await stat(task.finalPath)).size };
  } finally {
    if (!written) await rm(task.tmpPath, { force: true });
    await client.end().catch(() => undefined);
  }
}
