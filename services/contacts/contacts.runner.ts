/**
 * The import runner: a piscina pool parses each file (contacts.worker.ts) and this thread
 * writes the batches it sends, one transaction each, counters included (contacts.runner-batch.ts),
 * so that a row is written whole or not at all and the counters say exactly what is written. An
 * import is held by its node through a heartbeat (lib/jobs/jobs.ts): any contacts node ends FAILED
 * one whose node went silent. Its statements are in contacts.imports.queries.ts.
 */
import { mkdir, readdir, rm } from "node:fs/promises";
import path from "node:path";
import { MessageChannel } from "node:worker_threads";
import { Piscina } from "piscina";
import type { Sequelize } from "sequelize";
import type { Config } from "../../lib/config";
import { DiskBudget } from "../../lib/jobs/disk-budget";
import { Jobs, Loops, type JobTable, purgeEndedJobs } from "../../lib/jobs/jobs";
import { MAX_EXPANDED_BYTES, type UploadedFile } from "../../lib/http/upload";
import { destroyPool, duration, workerPool } from "../../lib/jobs/worker-pool";
import type { ImportResult, ImportTask, ServiceReply, WorkerMessage } from "./contacts.worker";
import { endImport, IMPORTS_SWEPT, importsEndedFailed, startImport } from "./contacts.imports.queries";
import { ImportStopped, writeBatch, type Job } from "./contacts.runner-batch";

/** Rows per batch (one transaction each). */
export const IMPORT_BATCH_ROWS = 2000;
const HEARTBEAT_MS = 15_000;
/** An import whose node has not been heard of for this long is ended FAILED. */
const STALE_AFTER_S = 120;
/**
 * How long a finished (COMPLETED or FAILED) import stays readable (GET /contacts/imports/{id}) after
 * it ended, in days. Older rows are deleted by the heartbeat, at most once a minute, PURGE_BATCH
 * rows a statement and PURGE_BATCHES statements a time, so a backlog goes over a few minutes.
 */
export const IMPORT_RETENTION_DAYS = 30;
const PURGE_EVERY_MS = 60_000;
const PURGE_BATCH = 1000;
const PURGE_BATCHES = 10;
/**
 * The longest one import's worker task may run (30 minutes), counted from the moment it starts
 * reading the file (time queued for a thread does not count). Past it the thread is stopped and
 * the import ends FAILED, so that no file holds a thread, and every import queued behind it, for
 * ever. A constant (a setting would belong in lib/config.ts).
 */
export const IMPORT_TASK_BUDGET_MS = 30 * 60_000;
const STOPPED =
  "The service stopped during the import; rows counted as created or updated were written. Upload the file again to import the rest (rows already imported are matched and updated).";

/**
 * The worker's own reasons (contacts.worker.ts, contacts.import-rows.ts), the only worker messages a
 * partner reads. Anything else (a library's or Node's error, which may name internal paths, even one
 * that happens to start with "The ") becomes "The file could not be read." A new reason the worker
 * throws is listed here. An XLSX reader's message is dropped (it comes from the zip and XML
 * libraries); a CSV one is kept (the worker wraps only csv-parse's CSV_* errors about the text).
 */
const OWN_REASONS: readonly RegExp[] = [
  /^The file cannot be read as CSV from data row \d+ on: /,
  /^The file is empty: it has no header line\.$/,
  /^The workbook's first sheet is empty: it has no header row\.$/,
  /^The file holds no vCard \(no BEGIN:VCARD line\)\.$/,
  /^The mapping names the column "[^]*", which the file's header does not have\.$/,
  /^The columns "[^]*" and "[^]*" both feed \S+; map one of them to null\.$/,
  /^The file has no column for phoneNumber or email \(its header: /,
  /^The workbook (expands to more than|holds \d+ parts, more than) /,
];

/** What an import failed in the worker says to the partner, or null when the worker's message is not ours. */
export function importFailureReason(message: string): string | null {
  if (/^The file cannot be read as XLSX: /.test(message)) return "The file cannot be read as XLSX; save it again as .xlsx, or as CSV.";
  return OWN_REASONS.some((r) => r.test(message)) ? message : null;
}

/**
 * An import is held by the node it was uploaded to, heard of through its heartbeat. Ending one
 * leaves its node and last heartbeat on the row.
 */
const CONTACT_IMPORTS: JobTable = {
  table: "contact_imports",
  alias: "i",
  key: "id",
  keyType: "uuid",
  owner: "node_id",
  lease: { heartbeat: "heartbeat_at", staleAfterS: STALE_AFTER_S },
  keepHolder: true,
};
/** What ending an import this node held (stopped, or left by its previous process) sets. */
const ENDED_STOPPED = importsEndedFailed(STOPPED);

export class Importer {
  private pool: Piscina | null = null;
  private readonly active = new Map<string, Job>();
  private readonly loops: Loops;
  private lastPurge = 0;
  private readonly jobs: Jobs;
  private stopping = false;
  /** The time budget of one import's worker task (tests lower it). */
  taskBudgetMs = IMPORT_TASK_BUDGET_MS;
  /** Bytes an XLSX's parts may inflate to in all, counted while the worker reads them (tests lower it). */
  expandedBudgetBytes = MAX_EXPANDED_BYTES;
  /** The room under IMPORT_DIR (IMPORT_QUEUE_MAX_BYTES, an account's share of it): reserved before a file is kept. */
  readonly disk: DiskBudget;

  constructor(
    private readonly sequelize: Sequelize,
    private readonly config: Config,
    private readonly log: { info(o: object, m: string): void; warn(o: object, m: string): void; error(o: object, m: string): void },
  ) {
    this.loops = new Loops(log);
    this.jobs = new Jobs(sequelize, CONTACT_IMPORTS);
    this.disk = DiskBudget.withShare(config.importQueueMaxBytes, config.uploadAccountShare);
  }

  fileOf(id: string) {
    return path.join(this.config.importDir, `${id}.upload`);
  }

  async start(): Promise<void> {
    await mkdir(this.config.importDir, { recursive: true });
    await this.sweep();
    // Files left here belong to imports this directory's previous process ran (a crash, a restart):
    // nothing runs them any more, so they end FAILED now rather than at the next sweep.
    const names = (await readdir(this.config.importDir)).filter((n) => /^[0-9a-f-]{36}\.upload(\.part)?$/.test(n));
    if (names.length) {
      await this.jobs.giveBack({ ids: [...new Set(names.map((n) => n.slice(0, 36)))], owner: null }, ENDED_STOPPED);
      await Promise.all(names.map((n) => rm(path.join(this.config.importDir, n), { force: true })));
    }
    await this.removeReaderLeftovers();
    this.loops.every(HEARTBEAT_MS, "import heartbeat", () => this.beat());
  }

  /** Deletes imports that finished more than IMPORT_RETENTION_DAYS ago, in bounded batches; answers how many. */
  async purgeFinished(): Promise<number> {
    const purged = await purgeEndedJobs(this.sequelize, {
      table: "contact_imports",
      statuses: ["COMPLETED", "FAILED"],
      endedColumn: "finished_at",
      days: IMPORT_RETENTION_DAYS,
      batch: PURGE_BATCH,
      batches: PURGE_BATCHES,
    });
    if (purged > 0) this.log.info({ purged, retentionDays: IMPORT_RETENTION_DAYS }, "old imports purged");
    return purged;
  }

  /** Ends FAILED every import whose node has not been heard of (any contacts node may do it). */
  sweep(): Promise<number> {
    return this.jobs.sweep(IMPORTS_SWEPT);
  }

  private async beat(): Promise<void> {
    await this.sweep();
    await this.jobs.renew({ ids: [...this.active.keys()], owner: null });
    if (Date.now() - this.lastPurge >= PURGE_EVERY_MS) {
      this.lastPurge = Date.now();
      await this.purgeFinished();
    }
  }

  /** Stops the imports in progress: they end FAILED (STOPPED); the rows written so far stay. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.loops.stop();
    const ids = [...this.active.keys()];
    await destroyPool(this.pool);
    this.pool = null;
    await this.jobs.giveBack({ ids, owner: null }, ENDED_STOPPED).catch(() => undefined);
    await this.removeReaderLeftovers().catch(() => undefined);
  }

  /**
   * Temporary files a spreadsheet reader left under IMPORT_DIR (the pool's TMPDIR; the `tmp`
   * package names them tmp-<pid>-<random>): the XLSX reader no longer spills, but a thread killed
   * mid-write, or an older version, may have left some. Run only when no worker runs (start, stop).
   */
  private async removeReaderLeftovers(): Promise<void> {
    const names = (await readdir(this.config.importDir)).filter((n) => /^tmp-\d+-/.test(n));
    await Promise.all(names.map((n) => rm(path.join(this.config.importDir, n), { force: true, recursive: true })));
  }

  private workers(): Piscina {
    if (!this.pool) {
      this.pool = workerPool(__dirname, "contacts.worker", {
        maxThreads: this.config.importWorkers,
        idleTimeout: 30_000,
        // A parser needs little heap; a small cap keeps V8 from growing it lazily (flat memory).
        resourceLimits: { maxOldGenerationSizeMb: 48, maxYoungGenerationSizeMb: 8 },
        // Spreadsheet readers spill to TMPDIR: keep that on the import volume, not the container's /tmp.
        env: { ...process.env, TMPDIR: this.config.importDir },
      });
    }
    return this.pool;
  }

  /** Bytes reserved for the files this node holds (or is receiving) for imports not yet ended. */
  queuedBytes(): number {
    return this.disk.used();
  }

  /** Queues a stored file for import; the answer does not wait for it. */
  enqueue(job: Omit<Job, "keptErrors">, kind: UploadedFile["kind"], mapping: Record<string, string | null> | null) {
    const state: Job = { ...job, keptErrors: 0 };
    this.active.set(job.id, state);
    this.run(state, kind, mapping)
      .catch((err) => this.log.error({ err, importId: job.id }, "import failed unexpectedly"))
      .finally(() => {
        this.active.delete(job.id);
        return rm(this.fileOf(job.id), { force: true }).finally(() => job.reservation?.release());
      });
  }

  private async run(job: Job, kind: UploadedFile["kind"], mapping: Record<string, string | null> | null): Promise<void> {
    const { port1, port2 } = new MessageChannel();
    let writing: Promise<void> = Promise.resolve();
    const budget = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    port1.on("message", (msg: WorkerMessage) => {
      if (msg.type === "started" && !timer) timer = setTimeout(() => budget.abort(), this.taskBudgetMs).unref();
      writing = writing.then(async () => {
        let reply: ServiceReply = { type: "ack" };
        try {
          if (this.stopping) throw new ImportStopped("The service is stopping.");
          if (msg.type === "started") {
            await startImport(this.sequelize, job.id);
            return;
          }
          await writeBatch(this.sequelize, job, msg.rows, msg.errors, msg.totalRows);
        } catch (err) {
          reply = { type: "stop", reason: err instanceof ImportStopped ? err.message : "The import could not be written." };
          if (!(err instanceof ImportStopped)) this.log.error({ err, importId: job.id }, "import batch failed");
        }
        if (msg.type === "batch") port1.postMessage(reply);
      });
    });
    const task: ImportTask = {
      path: this.fileOf(job.id),
      kind,
      mapping,
      customTypes: [...job.customTypes],
      batchSize: IMPORT_BATCH_ROWS,
      maxExpandedBytes: this.expandedBudgetBytes,
      port: port2,
    };
    let failure: string | null = null;
    let result: ImportResult | null = null;
    try {
      result = (await this.workers().run(task, { transferList: [port2], signal: budget.signal })) as ImportResult;
    } catch (err) {
      failure = this.stopping
        ? STOPPED
        : budget.signal.aborted
          ? `The import took longer than ${duration(this.taskBudgetMs)} and was stopped; rows counted as created or updated were written. Split the file and upload the parts.`
          : (err as { code?: string }).code === "ERR_WORKER_OUT_OF_MEMORY"
            ? "The file needs more memory than an import may use (a workbook with very many distinct texts, say); save it as CSV or split it."
            : (importFailureReason(String((err as Error).message)) ?? "The file could not be read.");
      if (!this.stopping && importFailureReason(String((err as Error).message)) === null) this.log.error({ err, importId: job.id }, "import worker failed");
      if (budget.signal.aborted) this.log.warn({ importId: job.id, budgetMs: this.taskBudgetMs }, "import stopped: over its time budget");
    } finally {
      clearTimeout(timer);
      await writing;
      port1.close();
    }
    await endImport(this.sequelize, job.id, failure, result?.totalRows ?? 0);
  }
}
