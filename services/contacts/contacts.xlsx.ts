/**
 * The XLSX reader of the import worker (contacts.worker.ts): the first sheet of a workbook, read
 * with exceljs's public streaming reader from the zip contacts.xlsx-zip.ts builds out of the upload
 * (the parts it needs, inflated under a byte budget, the sheet last, nothing spilled to disk).
 */
import type { Row } from "exceljs";
import { buildRow, resolveColumns, type Cell } from "./contacts.import-rows";
import { isBlank, type BatchSender, type CustomTypes, type ImportTask } from "./contacts.import-batch";
import { WorkbookZip } from "./contacts.xlsx-zip";

/** A spreadsheet cell's value as text, number, boolean or date (formulas by their result). */
export function cellValue(v: unknown): Cell {
  if (v === null || v === undefined) return undefined;
  if (typeof v === "string" || typeof v === "number" || typeof v === "boolean" || v instanceof Date) return v;
  const o = v as { richText?: Array<{ text: string }>; result?: unknown; text?: unknown; error?: string };
  if (o.richText) return o.richText.map((r) => r.text).join("");
  if ("result" in o) return cellValue(o.result);
  if (o.text !== undefined) return cellValue(o.text);
  return undefined;
}

/** A message of ours (budget, damaged zip) as it is; any other error as the file being unreadable. */
const asXlsxError = (err: unknown): Error =>
  (err as Error).message?.startsWith("The ") ? (err as Error) : new Error(`The file cannot be read as XLSX: ${String((err as Error).message).slice(0, 300)}`);

/** Reads the first sheet of an XLSX, its header row being the first row that is not blank. */
export async function importXlsx(task: ImportTask, out: BatchSender, types: CustomTypes): Promise<void> {
  const ExcelJS = (await import("exceljs")).default;
  let zip: WorkbookZip;
  try {
    zip = await WorkbookZip.open(task.path, task.maxExpandedBytes);
  } catch (err) {
    throw asXlsxError(err);
  }
  let columns: Array<string | null> | null = null;
  let headerAt = 0;
  try {
    const input = zip.readerInput(await zip.firstSheetPath());
    const reader = new ExcelJS.stream.xlsx.WorkbookReader(input, { sharedStrings: "cache", hyperlinks: "ignore", styles: "cache", worksheets: "emit" });
    // The zip holds one sheet: the first the reader yields is it. Its rows are taken as its parser
    // yields them, a chunk's worth at a time (WorksheetReader.parse), so that the guard against a
    // zip cut short costs a wait per chunk rather than per row.
    for await (const sheet of zip.guard(reader)) {
      for await (const events of zip.guard(sheet.parse())) {
        for (const { eventType, value: r } of events as Array<{ eventType: string; value: Row }>) {
          if (eventType !== "row") continue;
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
      break;
    }
    // A zip cut short at a part boundary may read as complete: what stopped it still fails the import.
    if (zip.failure) throw zip.failure;
  } catch (err) {
    throw asXlsxError(zip.failure ?? err);
  } finally {
    zip.close();
  }
  if (!columns) throw new Error("The workbook's first sheet is empty: it has no header row.");
}
