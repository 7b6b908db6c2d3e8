/**
 * What the import worker (contacts.worker.ts) and the contacts service say to each other, and the
 * sender that keeps the worker at most one batch ahead of the service. The readers of each file
 * kind (contacts.csv.ts, contacts.xlsx.ts, contacts.vcard.ts) hand their rows to it.
 */
import type { MessagePort } from "node:worker_threads";
import type { FileKind } from "../../lib/http/upload";
import { isRowError, type Cell, type ImportRow, type RowError } from "./contacts.import-rows";
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

/** The largest CSV record or vCard the worker reads; a larger one is an error, not a memory spike. */
export const MAX_RECORD_BYTES = 1024 * 1024;

/** Sends batches and waits for the service's acknowledgement of the previous one before the next. */
export class BatchSender {
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

export const isBlank = (cells: Cell[]) => cells.every((c) => c === undefined || c === null || (typeof c === "string" && c.trim() === ""));

/** The custom fields' declared types by key, as the readers check cells against them. */
export type CustomTypes = Map<string, CustomFieldType>;
