/**
 * The CSV reader of the import worker (contacts.worker.ts): sniffs the encoding and the delimiter
 * from the head of the file, then streams its records through csv-parse into checked rows.
 */
import { parse as parseCsv, type CsvError } from "csv-parse";
import { createReadStream } from "node:fs";
import { open } from "node:fs/promises";
import { Transform, type Readable } from "node:stream";
import { buildRow, resolveColumns, type RowError } from "./contacts.import-rows";
import { isBlank, MAX_RECORD_BYTES, type BatchSender, type CustomTypes, type ImportTask } from "./contacts.import-batch";

/** UTF-8 when the head of the file is valid UTF-8, otherwise a single-byte Windows encoding (Excel's "CSV"). */
async function sniffText(path: string): Promise<{ encoding: "utf-8" | "windows-1252"; delimiter: string }> {
  const fh = await open(path, "r");
  const head = Buffer.alloc(64 * 1024);
  let n: number;
  try {
    ({ bytesRead: n } = await fh.read(head, 0, head.length, 0));
  } finally {
    await fh.close();
  }
  let bytes = head.subarray(0, n);
  // A multi-byte character cut at the end of the sample is not an encoding error.
  let cut = 0;
  while (cut < 3 && bytes.length - cut > 0 && (bytes[bytes.length - 1 - cut]! & 0xc0) === 0x80) cut++;
  if (bytes.length - cut > 0 && bytes[bytes.length - 1 - cut]! >= 0xc0) bytes = bytes.subarray(0, bytes.length - 1 - cut);
  let encoding: "utf-8" | "windows-1252" = "utf-8";
  try {
    new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    encoding = "windows-1252";
  }
  const firstLine = head.subarray(0, n).toString("latin1").split(/\r?\n/, 1)[0] ?? "";
  const unquoted = firstLine.replace(/"[^"]*"/g, "");
  const counts = [",", ";", "\t", "|"].map((d) => [d, unquoted.split(d).length - 1] as const);
  const delimiter = counts.reduce((best, c) => (c[1] > best[1] ? c : best), [",", 0] as readonly [string, number])[0];
  return { encoding, delimiter };
}

/** Bytes as text in `encoding`, for the Windows single-byte encodings Node's streams do not know. */
function decoder(encoding: string): Transform {
  const d = new TextDecoder(encoding);
  return new Transform({
    transform(chunk: Buffer, _e, done) {
      done(null, d.decode(chunk, { stream: true }));
    },
    flush(done) {
      done(null, d.decode());
    },
  });
}

export async function importCsv(task: ImportTask, out: BatchSender, types: CustomTypes): Promise<void> {
  const { encoding, delimiter } = await sniffText(task.path);
  let source: Readable = createReadStream(task.path);
  if (encoding !== "utf-8") source = source.pipe(decoder(encoding));
  let counter = -1; // the header is record 0; data rows are numbered from 1
  const skipped: RowError[] = [];
  let fatal: Error | null = null;
  /** The record at which the file became unreadable; records before it (still buffered) are imported. */
  let fatalAt: number | null = null;
  const parser = parseCsv({
    bom: true,
    delimiter,
    relax_quotes: true,
    relax_column_count: true,
    skip_records_with_error: true,
    max_record_size: MAX_RECORD_BYTES,
    // Records become { row, cells } (the typings only know records that stay string arrays).
    on_record: ((record: string[]) => ({ row: ++counter, cells: record })) as unknown as (r: string[]) => string[],
    on_skip: (err: CsvError | undefined): undefined => {
      counter++;
      // An unterminated quote or a runaway record swallows the rest of the file: nothing after it can be trusted.
      if (!err || counter === 0 || err.code === "CSV_QUOTE_NOT_CLOSED" || err.code === "CSV_MAX_RECORD_SIZE") {
        fatal ??= err ?? new Error("malformed");
        fatalAt ??= counter;
      } else skipped.push({ row: counter, message: `the line cannot be read as CSV: ${err.message.replace(/\s+/g, " ").slice(0, 300)}` });
      return undefined;
    },
  });
  source.on("error", (e) => parser.destroy(e));
  source.pipe(parser);
  let columns: Array<string | null> | null = null;
  const unreadable = (e: Error) =>
    new Error(`The file cannot be read as CSV from data row ${Math.max(1, counter)} on: ${e.message.replace(/\s+/g, " ").slice(0, 300)}`);
  try {
    for await (const { row, cells } of parser as AsyncIterable<{ row: number; cells: string[] }>) {
      while (skipped.length) await out.add(skipped.shift()!);
      if (fatalAt !== null && row > fatalAt) break;
      if (row === 0) {
        columns = resolveColumns(cells, task.mapping, [...types.keys()]);
        continue;
      }
      if (cells.length > columns!.length && !isBlank(cells.slice(columns!.length))) {
        await out.add({ row, message: `the row has ${cells.length} fields, the header ${columns!.length}` });
        continue;
      }
      if (isBlank(cells)) continue;
      await out.add(buildRow(row, cells, columns!, types));
    }
  } catch (err) {
    if ((err as CsvError).code?.startsWith("CSV_")) throw unreadable(err as CsvError);
    throw err;
  } finally {
    source.destroy();
    parser.destroy();
  }
  while (skipped.length) await out.add(skipped.shift()!);
  if (fatal) throw unreadable(fatal);
  if (!columns) throw new Error("The file is empty: it has no header line.");
}
