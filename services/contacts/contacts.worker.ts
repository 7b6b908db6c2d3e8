/**
 * The import worker (a piscina thread): reads one spooled file (CSV, XLSX or vCard) as a stream,
 * turns its rows into checked contact fields and hands them to the contacts service in batches
 * over a MessagePort. It parses the next batch while the service writes the last one, and never
 * runs more than one batch ahead, so memory stays flat whatever the file's size.
 */
import { parse as parseCsv, type CsvError } from "csv-parse";
import { createReadStream } from "node:fs";
import { open } from "node:fs/promises";
import { createInterface } from "node:readline";
import { Transform, type Readable } from "node:stream";
import type { MessagePort } from "node:worker_threads";
import { listZip, tooLargeWhenExpanded, type FileKind, type ZipListing } from "../../lib/upload";
import { buildRow, isRowError, resolveColumns, type Cell, type ImportRow, type RowError } from "./contacts.import-rows";
import type { CustomFieldType } from "./contacts.contract";

export interface ImportTask {
  path: string;
  kind: FileKind;
  /** Header -> target field (null: ignore the column); validated by the service. */
  mapping: Record<string, string | null> | null;
  customTypes: Array<[string, CustomFieldType]>;
  batchSize: number;
  /** Bytes an XLSX's parts may inflate to in all (the budget against zip bombs). */
  maxExpandedBytes: number;
  port: MessagePort;
}

export type WorkerMessage = { type: "started" } | { type: "batch"; rows: ImportRow[]; errors: RowError[]; totalRows: number };
export type ServiceReply = { type: "ack" } | { type: "stop"; reason: string };

export interface ImportResult {
  totalRows: number;
}

const MAX_RECORD_BYTES = 1024 * 1024;
/** A vCard's first and last lines (anchored, one way to match: linear on a line of any length). */
export const VCARD_BEGIN = /^BEGIN:VCARD\s*$/i;
export const VCARD_END = /^END:VCARD\s*$/i;

/** Sends batches and waits for the service's acknowledgement of the previous one before the next. */
class BatchSender {
  private rows: ImportRow[] = [];
  private errors: RowError[] = [];
  private waiting: { resolve(): void; reject(e: Error): void } | null = null;
  private inflight: Promise<void> | null = null;
  totalRows = 0;
  /** The service refused a batch: nothing more is sent. */
  stopped = false;

  constructor(
    private readonly port: MessagePort,
    private readonly batchSize: number,
  ) {
    port.on("message", (m: ServiceReply) => {
      const w = this.waiting;
      this.waiting = null;
      if (m.type === "ack") w?.resolve();
      else {
        this.stopped = true;
        w?.reject(new Error(m.reason));
      }
    });
  }

  post(msg: WorkerMessage) {
    this.port.postMessage(msg);
  }

  async add(r: ImportRow | RowError): Promise<void> {
    this.totalRows++;
    if (isRowError(r)) this.errors.push(r);
    else this.rows.push(r);
    if (this.rows.length + this.errors.length >= this.batchSize) await this.flush();
  }

  async flush(): Promise<void> {
    if (this.inflight) await this.inflight;
    this.inflight = null;
    if (this.rows.length === 0 && this.errors.length === 0) return;
    const msg: WorkerMessage = { type: "batch", rows: this.rows, errors: this.errors, totalRows: this.totalRows };
    this.rows = [];
    this.errors = [];
    this.inflight = new Promise<void>((resolve, reject) => (this.waiting = { resolve, reject }));
    this.inflight.catch(() => undefined); // observed by the next flush
    this.post(msg);
  }

  async finish(): Promise<void> {
    await this.flush();
    if (this.inflight) await this.inflight;
  }
}

const isBlank = (cells: Cell[]) => cells.every((c) => c === undefined || c === null || (typeof c === "string" && c.trim() === ""));

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

async function importCsv(task: ImportTask, out: BatchSender, types: Map<string, CustomFieldType>): Promise<void> {
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

/** A spreadsheet cell's value as text, number, boolean or date (formulas by their result). */
function cellValue(v: unknown): Cell {
  if (v === null || v === undefined) return undefined;
  if (typeof v === "string" || typeof v === "number" || typeof v === "boolean" || v instanceof Date) return v;
  const o = v as { richText?: Array<{ text: string }>; result?: unknown; text?: unknown; error?: string };
  if (o.richText) return o.richText.map((r) => r.text).join("");
  if ("result" in o) return cellValue(o.result);
  if (o.text !== undefined) return cellValue(o.text);
  return undefined;
}

/** The parts of exceljs's streaming reader the import drives itself (exceljs 4: WorkbookReader's own steps). */
interface WorkbookReaderSteps {
  model?: { sheets?: Array<{ rId?: string }> };
  workbookRels?: Array<{ Id: string; Target: string }>;
  _parseRels(s: Readable): Promise<void>;
  _parseWorkbook(s: Readable): Promise<void>;
  _parseSharedStrings(s: Readable): AsyncIterable<unknown>;
  _parseStyles(s: Readable): Promise<void>;
  _parseWorksheet(s: Readable, sheetNo: string): Iterable<{ eventType: string; value: unknown }>;
}

/** The zip path of the workbook's first sheet: the first in workbook.xml's order, else the lowest numbered. */
function firstSheetPath(r: WorkbookReaderSteps, names: Iterable<string>): string | undefined {
  const first = r.model?.sheets?.[0];
  const target = first && r.workbookRels?.find((rel) => rel.Id === first.rId)?.Target;
  const all = [...names];
  if (target) {
    const p = target.startsWith("/") ? target.slice(1) : `xl/${target}`;
    if (all.includes(p)) return p;
  }
  const num = (n: string) => Number(/^xl\/worksheets\/sheet(\d+)\.xml$/.exec(n)?.[1] ?? NaN);
  return all.filter((n) => !Number.isNaN(num(n))).sort((a, b) => num(a) - num(b))[0];
}

/**
 * Reads the first sheet of an XLSX. The zip is opened with yauzl, not streamed in file order:
 * its directory is bounded (entries, declared sizes), each part is inflated only when the reader
 * needs it (relationships, workbook, shared strings and styles first, then the sheet, so nothing
 * spills to a temporary file), yauzl stops a part that inflates past its declared size, and every
 * inflated byte counts against `task.maxExpandedBytes`.
 */
async function importXlsx(task: ImportTask, out: BatchSender, types: Map<string, CustomFieldType>): Promise<void> {
  const ExcelJS = (await import("exceljs")).default;
  const budget = task.maxExpandedBytes;
  let listing: ZipListing;
  try {
    listing = await listZip(task.path);
  } catch (err) {
    if ((err as Error).message.startsWith("The ")) throw err;
    throw new Error(`The file cannot be read as XLSX: ${(err as Error).message.slice(0, 300)}`);
  }
  const { zip, entries, declaredBytes } = listing;
  const open: Readable[] = [];
  let expanded = 0;
  /** The part `name` inflated, counted against the budget; null when the zip has no such part. */
  const part = async (name: string): Promise<Readable | null> => {
    const entry = entries.get(name);
    if (!entry) return null;
    const raw = await new Promise<Readable>((resolve, reject) => zip.openReadStream(entry, (e, s) => (e ? reject(e) : resolve(s))));
    const counted = new Transform({
      transform(chunk: Buffer, _e, done) {
        expanded += chunk.length;
        if (expanded > budget) done(new Error(tooLargeWhenExpanded(budget)));
        else done(null, chunk);
      },
    });
    raw.on("error", (e) =>
      counted.destroy(
        /too many bytes in the stream/.test(e.message)
          ? new Error(`The workbook expands to more than its zip directory declares (the part ${name}): it is damaged or crafted. Save it again, or as CSV.`)
          : e,
      ),
    );
    counted.on("close", () => raw.destroy());
    counted.on("error", () => undefined); // its reader sees the error; none may crash the thread between parts
    open.push(raw, counted);
    return raw.pipe(counted);
  };
  let columns: Array<string | null> | null = null;
  let headerAt = 0;
  try {
    if (declaredBytes > budget) throw new Error(tooLargeWhenExpanded(budget));
    const reader = new ExcelJS.stream.xlsx.WorkbookReader(task.path, {
      entries: "emit",
      sharedStrings: "cache",
      hyperlinks: "ignore",
      styles: "cache",
      worksheets: "emit",
    }) as unknown as WorkbookReaderSteps;
    const rels = await part("xl/_rels/workbook.xml.rels");
    if (rels) await reader._parseRels(rels);
    const workbook = await part("xl/workbook.xml");
    if (workbook) await reader._parseWorkbook(workbook);
    const strings = await part("xl/sharedStrings.xml");
    if (strings) for await (const _ of reader._parseSharedStrings(strings));
    const styles = await part("xl/styles.xml");
    if (styles) await reader._parseStyles(styles);
    const sheetPath = firstSheetPath(reader, entries.keys());
    const sheetXml = sheetPath ? await part(sheetPath) : null;
    const sheetNo = /(\d+)\.xml$/.exec(sheetPath ?? "")?.[1] ?? "1";
    const sheet = sheetXml ? [...reader._parseWorksheet(sheetXml, sheetNo)][0]?.value : undefined;
    if (sheet) {
      for await (const r of sheet as AsyncIterable<{ number: number; values: unknown[] }>) {
        const cells = (Array.isArray(r.values) ? r.values.slice(1) : []).map(cellValue);
        if (!columns) {
          if (isBlank(cells)) continue;
          columns = resolveColumns(cells, task.mapping, [...types.keys()]);
          headerAt = r.number;
          continue;
        }
        if (isBlank(cells)) continue;
        const row = r.number - headerAt;
        if (cells.length > columns.length && !isBlank(cells.slice(columns.length))) {
          await out.add({ row, message: `the row has values beyond the header's ${columns.length} columns` });
          continue;
        }
        await out.add(buildRow(row, cells, columns, types));
      }
    }
  } catch (err) {
    if ((err as Error).message.startsWith("The ")) throw err;
    throw new Error(`The file cannot be read as XLSX: ${(err as Error).message.slice(0, 300)}`);
  } finally {
    for (const s of open) s.destroy();
    zip.close();
  }
  if (!columns) throw new Error("The workbook's first sheet is empty: it has no header row.");
}

/** The fields of one vCard (3.0 or 4.0) as cells of the fixed columns below. */
const VCARD_COLUMNS = ["firstName", "lastName", "phoneNumber", "email", "gender"];

type JProp = [string, Record<string, string | string[]>, string, ...unknown[]];

function pick(props: JProp[], name: string): JProp | undefined {
  const all = props.filter((p) => p[0] === name);
  const typesOf = (p: JProp) => ([] as string[]).concat(p[1].type ?? []).map((t) => t.toLowerCase());
  return all.find((p) => p[1].pref !== undefined || typesOf(p).includes("pref")) ?? all.find((p) => typesOf(p).includes("cell")) ?? all[0];
}

const textOf = (v: unknown): string => (Array.isArray(v) ? v.map(textOf).filter(Boolean).join(" ") : v == null ? "" : String(v));

async function vcardCells(text: string): Promise<Cell[]> {
  const ICAL = (await import("ical.js")).default;
  const parsed = ICAL.parse(text) as unknown;
  const card = (Array.isArray(parsed) && parsed[0] === "vcard" ? parsed : (parsed as unknown[])[0]) as [string, JProp[]];
  if (!Array.isArray(card) || card[0] !== "vcard") throw new Error("it is not a vCard");
  const props = card[1];
  const version = textOf(pick(props, "version")?.[3]);
  if (version && version !== "3.0" && version !== "4.0") throw new Error(`vCard ${version} is not supported (3.0 or 4.0)`);
  let first: string | undefined;
  let last: string | undefined;
  const n = pick(props, "n")?.[3];
  if (Array.isArray(n)) {
    last = textOf(n[0]) || undefined;
    first = textOf(n[1]) || undefined;
  }
  if (!first && !last) {
    const fn = textOf(pick(props, "fn")?.[3]).trim();
    const at = fn.lastIndexOf(" ");
    if (at > 0) [first, last] = [fn.slice(0, at), fn.slice(at + 1)];
    else if (fn) first = fn;
  }
  const tel = textOf(pick(props, "tel")?.[3]).replace(/^tel:/i, "").split(";")[0];
  const email = textOf(pick(props, "email")?.[3]).replace(/^mailto:/i, "");
  const sex = textOf(pick(props, "gender")?.[3]).trim().charAt(0).toUpperCase();
  const gender = sex === "M" ? "MALE" : sex === "F" ? "FEMALE" : sex === "O" ? "OTHER" : undefined;
  return [first, last, tel || undefined, email || undefined, gender];
}

async function importVcard(task: ImportTask, out: BatchSender, types: Map<string, CustomFieldType>): Promise<void> {
  const input = createReadStream(task.path, { encoding: "utf8" });
  const lines = createInterface({ input, crlfDelay: Infinity });
  let card: string[] | null = null;
  let bytes = 0;
  let row = 0;
  try {
    for await (const raw of lines as AsyncIterable<string>) {
      const line: string = row === 0 && card === null ? raw.replace(/^\uFEFF/, "") : raw;
      if (card === null) {
        if (VCARD_BEGIN.test(line)) {
          card = [line];
          bytes = line.length;
          row++;
        }
        continue;
      }
      if (bytes <= MAX_RECORD_BYTES) card.push(line);
      bytes += line.length;
      if (!VCARD_END.test(line)) continue;
      const text = card.join("\r\n") + "\r\n";
      card = null;
      if (bytes > MAX_RECORD_BYTES) {
        await out.add({ row, message: "the vCard is larger than 1 MiB" });
        continue;
      }
      let cells: Cell[];
      try {
        cells = await vcardCells(text);
      } catch (err) {
        await out.add({ row, message: `the vCard cannot be read: ${(err as Error).message.slice(0, 300)}` });
        continue;
      }
      await out.add(buildRow(row, cells, VCARD_COLUMNS, types));
    }
  } finally {
    lines.close();
    input.destroy();
  }
  if (card !== null) await out.add({ row, message: "the vCard has no END:VCARD line" });
  if (row === 0) throw new Error("The file holds no vCard (no BEGIN:VCARD line).");
}

export default async function runImport(task: ImportTask): Promise<ImportResult> {
  const out = new BatchSender(task.port, task.batchSize);
  try {
    out.post({ type: "started" });
    const types = new Map(task.customTypes);
    if (task.kind === "csv") await importCsv(task, out, types);
    else if (task.kind === "xlsx") await importXlsx(task, out, types);
    else await importVcard(task, out, types);
    await out.finish();
    return { totalRows: out.totalRows };
  } catch (err) {
    // The rows read before the file went wrong are written; then the import ends FAILED.
    if (!out.stopped) await out.finish().catch(() => undefined);
    throw err;
  } finally {
    task.port.close();
  }
}
