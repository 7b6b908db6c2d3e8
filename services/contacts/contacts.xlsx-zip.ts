/**
 * The zip side of the XLSX import: which parts of a workbook the import reads, inflated with yauzl
 * under a byte budget and handed to exceljs's streaming reader (its public WorkbookReader, which
 * takes a zip as a stream) as a new zip that holds only those parts, uncompressed, in the order the
 * reader needs them.
 *
 * Why not hand exceljs the uploaded file itself: its reader inflates the parts in the file's order
 * with a streaming unzip that trusts the local headers, so (1) no inflated byte could be counted
 * against the budget and a part that inflates past its declared size would not be stopped, and
 * (2) a sheet stored before the shared strings (Excel's own order) would be inflated to a temporary
 * file first, every sheet of the workbook, not just the first. Here yauzl reads the zip through its
 * central directory (bounded by listZip), stops a part that inflates past its declared size, every
 * inflated byte counts against the budget, and the one sheet read is streamed last, never spilled.
 */
import { Readable, Transform } from "node:stream";
import { crc32 } from "node:zlib";
import type { Entry, ZipFile } from "yauzl";
import { listZip, tooLargeWhenExpanded } from "../../lib/http/upload";

/**
 * The most of workbook.xml and of its relationships read to find the first sheet (both are a few KiB
 * in practice). This look-up inflates them a second time, outside the budget, which it cannot exceed
 * by more than these bytes; the reading that feeds exceljs is counted.
 */
const LOOKUP_BYTES = 1024 * 1024;
const NS_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main";
const NS_RELS = "http://schemas.openxmlformats.org/package/2006/relationships";
/** Stand-ins for parts a workbook may lack, so that the reader meets each before the sheet and never spills it. */
const EMPTY_RELS = Buffer.from(`<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<Relationships xmlns="${NS_RELS}"/>`);
const EMPTY_STRINGS = Buffer.from(`<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<sst xmlns="${NS_MAIN}" count="0" uniqueCount="0"/>`);

const ENTITIES: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" };
const unescapeXml = (s: string) =>
  s.replace(/&(#x[0-9a-f]+|#\d+|\w+);/gi, (m, e: string) =>
    e[0] === "#" ? String.fromCodePoint(Number(e[1] === "x" || e[1] === "X" ? `0${e.slice(1)}` : e.slice(1))) : (ENTITIES[e] ?? m),
  );
/** An attribute of one start tag (the text from `<` to `>`), unescaped; names are matched as exceljs reads them, prefix included. */
const attr = (tag: string, name: string) => {
  const m = new RegExp(`\\s${name}\\s*=\\s*(?:"([^"]*)"|'([^']*)')`).exec(tag);
  return m ? unescapeXml(m[1] ?? m[2] ?? "") : undefined;
};

/** A zip (local) file header for a stored part of `size` bytes; the reader needs no central directory. */
function storedHeader(name: string, size: number, crc: number): Buffer {
  const fileName = Buffer.from(name, "utf8");
  const h = Buffer.alloc(30);
  h.writeUInt32LE(0x04034b50, 0);
  h.writeUInt16LE(20, 4); // version needed to extract: 2.0
  h.writeUInt16LE(0x0800, 6); // the name is UTF-8
  h.writeUInt16LE(0, 8); // stored, not deflated: yauzl has inflated it
  h.writeUInt32LE(crc >>> 0, 14);
  h.writeUInt32LE(size, 18);
  h.writeUInt32LE(size, 22);
  h.writeUInt16LE(fileName.length, 26);
  return Buffer.concat([h, fileName]);
}

/** An empty end-of-central-directory record: where the reader stops. */
function endRecord(): Buffer {
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  return end;
}

/** One part of the stream handed to exceljs: a part of the upload, or a stand-in. */
type Part = { as: string; entry: Entry } | { as: string; data: Buffer };

/** An uploaded workbook opened for the import: its parts, the budget they share, and what went wrong reading them. */
export class WorkbookZip {
  private expanded = 0;
  private readonly open: Readable[] = [];
  /** Why the zip side stopped (budget, a part larger than declared, damaged data); the reader then sees a truncated zip. */
  failure: Error | null = null;
  /** Those waiting on the reader (see `guard`), told at once of a failure: a part cut short never ends. */
  private readonly waiters = new Set<(e: Error) => void>();

  private constructor(
    private readonly zip: ZipFile,
    private readonly entries: Map<string, Entry>,
    private readonly budget: number,
  ) {}

  /**
   * Opens the zip at `path` through its central directory. Throws a message beginning "The " for a
   * workbook past the budget or with too many parts, any other error for a zip yauzl cannot read.
   */
  static async open(path: string, budget: number): Promise<WorkbookZip> {
    const { zip, entries, declaredBytes } = await listZip(path);
    if (declaredBytes > budget) {
      zip.close();
      throw new Error(tooLargeWhenExpanded(budget));
    }
    return new WorkbookZip(zip, entries, budget);
  }

  /** The part `entry` inflated by yauzl; `counted`: each byte counts against the budget. */
  private async inflate(entry: Entry, counted: boolean): Promise<Readable> {
    const raw = await new Promise<Readable>((resolve, reject) => this.zip.openReadStream(entry, (e, s) => (e ? reject(e) : resolve(s))));
    const budget = this.budget;
    const meter = new Transform({
      transform: (chunk: Buffer, _e, done) => {
        if (counted) this.expanded += chunk.length;
        if (this.expanded > budget) done(new Error(tooLargeWhenExpanded(budget)));
        else done(null, chunk);
      },
    });
    raw.on("error", (e) =>
      meter.destroy(
        /too many bytes in the stream/.test(e.message)
          ? new Error(
              `The workbook expands to more than its zip directory declares (the part ${entry.fileName}): it is damaged or crafted. Save it again, or as CSV.`,
            )
          : e,
      ),
    );
    meter.on("close", () => raw.destroy());
    meter.on("error", () => undefined); // its reader sees the error; none may crash the thread once it stopped reading
    this.open.push(raw, meter);
    return raw.pipe(meter);
  }

  /** The head of the part `name` as text, read until `enough` says so or LOOKUP_BYTES; null when there is no such part. */
  private async head(name: string, enough: (text: string) => boolean): Promise<string | null> {
    const entry = this.entries.get(name);
    if (!entry) return null;
    const part = await this.inflate(entry, false);
    const decoder = new TextDecoder();
    let text = "";
    let read = 0;
    try {
      for await (const chunk of part as AsyncIterable<Buffer>) {
        text += decoder.decode(chunk, { stream: true });
        read += chunk.length;
        if (enough(text) || read >= LOOKUP_BYTES) break;
      }
    } finally {
      part.destroy();
    }
    return text;
  }

  /**
   * The zip path of the workbook's first sheet: the first in workbook.xml's order (its `r:id` looked
   * up in the workbook's relationships), else the lowest numbered.
   */
  async firstSheetPath(): Promise<string | undefined> {
    const FIRST_SHEET = /<sheet\s[^>]*>/;
    const workbook = await this.head("xl/workbook.xml", (t) => FIRST_SHEET.test(t) || /<\/sheets>|<sheets\s*\/>/.test(t));
    const rId = attr(FIRST_SHEET.exec(workbook ?? "")?.[0] ?? "", "r:id");
    let target: string | undefined;
    if (rId !== undefined) {
      const relOf = (t: string) => [...t.matchAll(/<Relationship\s[^>]*>/g)].find((m) => attr(m[0], "Id") === rId)?.[0];
      const rels = await this.head("xl/_rels/workbook.xml.rels", (t) => relOf(t) !== undefined);
      target = attr(relOf(rels ?? "") ?? "", "Target");
    }
    if (target) {
      const p = target.startsWith("/") ? target.slice(1) : `xl/${target}`;
      if (this.entries.has(p)) return p;
    }
    const num = (n: string) => Number(/^xl\/worksheets\/sheet(\d+)\.xml$/.exec(n)?.[1] ?? NaN);
    return [...this.entries.keys()].filter((n) => !Number.isNaN(num(n))).sort((a, b) => num(a) - num(b))[0];
  }

  /**
   * The zip exceljs reads: relationships, workbook, shared strings and styles, then the sheet at
   * `sheetPath` (named as the reader names sheets), each inflated only when the reader pulls it.
   */
  readerInput(sheetPath: string | undefined): Readable {
    const real = (name: string, as = name): Part | null => {
      const entry = this.entries.get(name);
      return entry ? { as, entry } : null;
    };
    const sheetNo = /(\d+)\.xml$/.exec(sheetPath ?? "")?.[1] ?? "1";
    const parts: Part[] = [
      real("xl/_rels/workbook.xml.rels") ?? { as: "xl/_rels/workbook.xml.rels", data: EMPTY_RELS },
      real("xl/workbook.xml"),
      real("xl/sharedStrings.xml") ?? { as: "xl/sharedStrings.xml", data: EMPTY_STRINGS },
      real("xl/styles.xml"),
      sheetPath ? real(sheetPath, `xl/worksheets/sheet${sheetNo}.xml`) : null,
    ].filter((p): p is Part => p !== null);
    const input = Readable.from(this.stored(parts), { objectMode: false });
    this.open.push(input);
    return input;
  }

  private async *stored(parts: Part[]): AsyncGenerator<Buffer> {
    try {
      for (const p of parts) {
        if ("data" in p) {
          yield storedHeader(p.as, p.data.length, crc32(p.data));
          yield p.data;
          continue;
        }
        yield storedHeader(p.as, p.entry.uncompressedSize, p.entry.crc32);
        for await (const chunk of (await this.inflate(p.entry, true)) as AsyncIterable<Buffer>) yield chunk;
      }
      yield endRecord();
    } catch (err) {
      // Ends the zip short rather than with an error event, which the reader would not hear of.
      this.failure = err as Error;
      for (const tell of this.waiters) tell(this.failure);
    }
  }

  /**
   * `it`'s items until the zip side fails, then that failure, even while `it` waits for data that
   * will never come. Each wait registers its own listener and removes it (racing one long-lived
   * promise instead would keep a reaction per row alive until the end of the import).
   */
  async *guard<T>(it: AsyncIterable<T> | AsyncIterator<T>): AsyncGenerator<T> {
    const iterator = Symbol.asyncIterator in it ? it[Symbol.asyncIterator]() : it;
    for (;;) {
      if (this.failure) throw this.failure;
      const pending = iterator.next();
      const next = await new Promise<IteratorResult<T>>((resolve, reject) => {
        this.waiters.add(reject);
        pending.then(resolve, reject).finally(() => this.waiters.delete(reject));
      });
      if (next.done) return;
      yield next.value;
    }
  }

  /** Stops every stream still open and closes the file. */
  close(): void {
    for (const s of this.open) s.destroy();
    this.zip.close();
  }
}
