/**
 * The import worker (a piscina thread): reads one spooled file (CSV, XLSX or vCard) as a stream,
 * turns its rows into checked contact fields and hands them to the contacts service in batches
 * over a MessagePort. It parses the next batch while the service writes the last one, and never
 * runs more than one batch ahead, so memory stays flat whatever the file's size. The readers of
 * each kind live in contacts.csv.ts, contacts.xlsx.ts and contacts.vcard.ts; piscina loads this
 * module by name (lib/jobs/worker-pool.ts), its default export being the task.
 */
import { importCsv } from "./contacts.csv";
import { BatchSender, type ImportResult, type ImportTask } from "./contacts.import-batch";
import { importVcard } from "./contacts.vcard";
import { importXlsx } from "./contacts.xlsx";

export type { ImportResult, ImportTask, ServiceReply, WorkerMessage } from "./contacts.import-batch";
export { VCARD_BEGIN, VCARD_END } from "./contacts.vcard";

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
