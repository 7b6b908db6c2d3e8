/**
 * The export worker (a piscina thread): PostgreSQL writes the CSV itself (COPY (SELECT ...) TO
 * STDOUT, through pg-copy-streams on a connection of this thread's own), and this thread only
 * compresses the bytes as they come and writes them to a temporary file, renamed into place once
 * complete and on disk. Backpressure runs from the file back to the server's socket, so memory
 * stays flat whatever the row count.
 */
import { createWriteStream } from "node:fs";
import os from "node:os";
import { open, rename, rm, stat } from "node:fs/promises";
import { pipeline } from "node:stream/promises";
import { createGzip } from "node:zlib";
import pg from "pg";
import { to as copyTo } from "pg-copy-streams";

export interface ExportTask {
  /** Connection URL (PostgreSQL, or the embedded database's socket). */
  url: string;
  /** The COPY (...) TO STDOUT WITH (FORMAT csv, HEADER) to run (exports.queries.ts's copyCsvSql). */
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

/** Fast gzip: the file is written at the speed PostgreSQL produces it; level 1 still shrinks CSV 4-6x. */
const GZIP_LEVEL = 1;

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
    const copy = client.query(copyTo(task.sql, { highWaterMark: 256 * 1024 }));
    await pipeline(copy, createGzip({ level: GZIP_LEVEL, chunkSize: 64 * 1024 }), createWriteStream(task.tmpPath, { flags: "wx", highWaterMark: 256 * 1024 }));
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
