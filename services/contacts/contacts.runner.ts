/**
 * The import runner: a piscina pool parses each file (contacts.worker.ts) and this thread
 * writes the batches it sends, one transaction each, counters included, so that a row is written
 * whole or not at all and the counters say exactly what is written. An import is held by its node
 * through a heartbeat (lib/jobs.ts): any contacts node ends FAILED one whose node went silent.
 */
import { randomUUID } from "node:crypto";
import { mkdir, readdir, rm } from "node:fs/promises";
import path from "node:path";
import { MessageChannel } from "node:worker_threads";
import { Piscina } from "piscina";
import { QueryTypes, type Sequelize, type Transaction } from "sequelize";
import type { Config } from "../../lib/config";
import { jsonParam } from "../../lib/db";
import { DiskBudget, type Reservation } from "../../lib/disk-budget";
import { isRetryable, Jobs, Loops, retryOn, RETRYABLE_SQLSTATES, type JobTable, purgeEndedJobs } from "../../lib/jobs";
import { MAX_EXPANDED_BYTES, type UploadedFile } from "../../lib/upload";
import { duration, workerPool } from "../../lib/worker-pool";
import type { ImportRow, RowError } from "./contacts.import-rows";
import type { ImportResult, ImportTask, ServiceReply, WorkerMessage } from "./contacts.worker";
import type { CustomFieldType } from "./contacts.contract";
import type { Channel } from "../../lib/channels";
import { applyChanges, importedOptOuts } from "./contacts.optouts.queries";

/** Rows per batch (one transaction each). */
export const IMPORT_BATCH_ROWS = 2000;
const MAX_KEPT_ERRORS = 1000;
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
const WRITE_ATTEMPTS = 3;
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
const ENDED_STOPPED = { set: "status = 'FAILED', finished_at = now(), failure = $1", where: "i.status IN ('QUEUED', 'PROCESSING')", params: [STOPPED] };

/** The import cannot go on (its list or a custom field it writes was deleted, the node stops). */
class ImportStopped extends Error {}
/** The batch met a concurrent change (a unique phone or email taken meanwhile): write it again. */
class RetryBatch extends Error {}

interface Job {
  id: string;
  companyId: string;
  listId: number | null;
  /** The declarations the worker checks cells against (as they were at upload). */
  customTypes: Map<string, CustomFieldType>;
  /** Bytes of the file this node keeps for the import. */
  size: number;
  /** The room the file holds in the node's import budget, given back once the file is removed. */
  reservation?: Reservation;
  keptErrors: number;
}

/** One contact's state as the batch leaves it. */
interface Target {
  id: string;
  isNew: boolean;
  phone: string | null;
  email: string | null;
  firstName?: string;
  lastName?: string;
  gender?: string;
  isTest?: boolean;
  customFields?: Record<string, unknown>;
}

/** Errors a batch meets only because of concurrent writers: a unique phone or email taken, a deadlock, a serialization failure. */
const isConcurrencyError = (err: unknown) => err instanceof RetryBatch || isRetryable(err, RETRYABLE_SQLSTATES);

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
    return this.jobs.sweep({
      set: `status = 'FAILED', finished_at = now(),
            failure = 'The node running the import stopped before it ended; rows counted as created or updated were written. Upload the file again to import the rest (rows already imported are matched and updated).'`,
      where: "i.status IN ('QUEUED', 'PROCESSING')",
    });
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
    await this.pool?.destroy().catch(() => undefined);
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
            await this.sequelize.query(
              `UPDATE contact_imports SET status = 'PROCESSING', started_at = now(), heartbeat_at = now() WHERE id = $1 AND status = 'QUEUED'`,
              { bind: [job.id] },
            );
            return;
          }
          await this.writeBatch(job, msg.rows, msg.errors, msg.totalRows);
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
    await this.sequelize.query(
      `UPDATE contact_imports SET status = $2, failure = $3, finished_at = now(), total_rows = greatest(total_rows, $4),
              started_at = coalesce(started_at, now())
        WHERE id = $1 AND status IN ('QUEUED', 'PROCESSING')`,
      { bind: [job.id, failure ? "FAILED" : "COMPLETED", failure, result?.totalRows ?? 0] },
    );
  }

  /** One batch, whole or not at all: retried on a concurrent change, then row by row. */
  private async writeBatch(job: Job, rows: ImportRow[], errors: RowError[], totalRows: number): Promise<void> {
    try {
      await retryOn(RETRYABLE_SQLSTATES, WRITE_ATTEMPTS, () => this.sequelize.transaction((t) => this.writeOnce(job, rows, errors, totalRows, t)), {
        also: isConcurrencyError,
      });
      return;
    } catch (err) {
      if (!isConcurrencyError(err)) throw err;
    }
    if (rows.length <= 1) {
      const failed = rows.map((r) => ({
        row: r.row,
        message: "the row conflicts with a concurrent change to the same phone number or email; import it again",
      }));
      await this.sequelize.transaction((t) => this.writeOnce(job, [], [...errors, ...failed], totalRows, t));
      return;
    }
    // Rows of one batch that collide with each other (two contacts swapping numbers): one at a time.
    await this.writeBatch(job, [], errors, totalRows);
    for (const r of rows) await this.writeBatch(job, [r], [], totalRows);
  }

  private async writeOnce(job: Job, rows: ImportRow[], workerErrors: RowError[], totalRows: number, transaction: Transaction): Promise<void> {
    const { companyId } = job;
    const q = <T extends object>(sql: string, bind: unknown[]) => this.sequelize.query<T>(sql, { bind, type: QueryTypes.SELECT, transaction });
    // An import ended meanwhile (swept as stale after a long pause, say) writes nothing more.
    const [own] = await q<{ status: string }>(`SELECT status FROM contact_imports WHERE id = $1 FOR UPDATE`, [job.id]);
    if (own?.status !== "PROCESSING") throw new ImportStopped("The import was ended while it ran; rows counted as created or updated were written.");
    if (job.listId !== null) {
      const list = await q(`SELECT id FROM contact_lists WHERE company_id = $1 AND id = $2 AND deleted_at IS NULL FOR SHARE`, [companyId, job.listId]);
      if (list.length === 0)
        throw new ImportStopped(`The contact list ${job.listId} was deleted during the import; rows counted as created or updated were written.`);
    }
    const usedKeys = [...new Set(rows.flatMap((r) => (r.customFields ? Object.keys(r.customFields) : [])))];
    if (usedKeys.length) {
      const declared = await q<{ key: string; type: string }>(
        `SELECT key, type FROM contact_custom_fields WHERE company_id = $1 AND key = ANY($2::text[]) FOR SHARE`,
        [companyId, usedKeys],
      );
      // Removed, or removed and declared again with another type: the cells were checked against the old one.
      const gone = usedKeys.filter((k) => !declared.some((d) => d.key === k && d.type === job.customTypes.get(k)));
      if (gone.length)
        throw new ImportStopped(`The custom field ${gone.join(", ")} was removed during the import; rows counted as created or updated were written.`);
    }

    // Who holds the batch's phone numbers and emails now (locked until the batch commits).
    const phones = [...new Set(rows.map((r) => r.phone).filter((p): p is string => !!p))];
    const emails = [...new Set(rows.map((r) => r.email).filter((e): e is string => !!e))];
    const holders = rows.length
      ? await q<{ id: string; phone_number: string | null; email: string | null }>(
          `SELECT id, phone_number, email FROM contacts
            WHERE company_id = $1
              AND (phone_number = ANY (ARRAY(SELECT jsonb_array_elements_text($2::jsonb))) OR email = ANY (ARRAY(SELECT jsonb_array_elements_text($3::jsonb))))
            ORDER BY id FOR UPDATE`,
          [companyId, jsonParam(() => phones), jsonParam(() => emails)],
        )
      : [];
    const phoneOwner = new Map<string, string>();
    const emailOwner = new Map<string, string>();
    const targets = new Map<string, Target>();
    for (const h of holders) {
      if (h.phone_number) phoneOwner.set(h.phone_number, h.id);
      if (h.email) emailOwner.set(h.email, h.id);
      targets.set(h.id, { id: h.id, isNew: false, phone: h.phone_number, email: h.email });
    }
    const errors = [...workerErrors];
    let created = 0;
    let updated = 0;
    const touched = new Set<string>();
    const optOuts: Array<{ phone: string; channels: Channel[] }> = [];
    for (const r of rows) {
      const byPhone = r.phone ? phoneOwner.get(r.phone) : undefined;
      const byEmail = r.email ? emailOwner.get(r.email) : undefined;
      if (byPhone && byEmail && byPhone !== byEmail) {
        errors.push({ row: r.row, message: `the phone number belongs to contact ${byPhone} and the email to contact ${byEmail}` });
        continue;
      }
      const number = r.phone ?? targets.get((byPhone ?? byEmail)!)?.phone;
      if (r.optedOut && !number) {
        errors.push({ row: r.row, message: "optedOut needs a phone number: neither the row nor the contact it matches has one" });
        continue;
      }
      if (r.optedOut) optOuts.push({ phone: number!, channels: r.optedOut });
      let target = targets.get((byPhone ?? byEmail)!);
      if (target) updated++;
      else {
        target = { id: randomUUID(), isNew: true, phone: null, email: null };
        targets.set(target.id, target);
        created++;
      }
      const t = target;
      if (r.phone && t.phone !== r.phone) {
        if (t.phone && phoneOwner.get(t.phone) === t.id) phoneOwner.delete(t.phone);
        t.phone = r.phone;
        phoneOwner.set(r.phone, t.id);
      }
      if (r.email && t.email !== r.email) {
        if (t.email && emailOwner.get(t.email) === t.id) emailOwner.delete(t.email);
        t.email = r.email;
        emailOwner.set(r.email, t.id);
      }
      if (r.firstName !== undefined) t.firstName = r.firstName;
      if (r.lastName !== undefined) t.lastName = r.lastName;
      if (r.gender !== undefined) t.gender = r.gender;
      if (r.isTest !== undefined) t.isTest = r.isTest;
      if (r.customFields) t.customFields = { ...t.customFields, ...r.customFields };
      touched.add(t.id);
    }

    const changed = [...touched].map((id) => targets.get(id)!);
    // Each batch crosses to PostgreSQL as one JSON text (serialised natively, parsed by the server):
    // far less garbage on this thread than binding one array per column; made only as the statement
    // is written (jsonParam), so the large text is never held across the wait for its answer.
    const rowsOf = (list: Target[]) =>
      jsonParam(() =>
        list.map((t) => ({
          id: t.id,
          first_name: t.firstName,
          last_name: t.lastName,
          gender: t.gender,
          phone: t.phone,
          email: t.email,
          custom_fields: t.customFields ?? {},
          is_test: t.isTest,
        })),
      );
    const RECORDS = `jsonb_to_recordset($2::jsonb) AS u(id uuid, first_name text, last_name text, gender text, phone text, email text, custom_fields jsonb, is_test boolean)`;
    const exec = async (sql: string, bind: unknown[]) => {
      const [, meta] = await this.sequelize.query(sql, { bind, transaction });
      // Sequelize answers INSERT/UPDATE with the row count itself, other statements with pg's result.
      return typeof meta === "number" ? meta : ((meta as { rowCount?: number } | undefined)?.rowCount ?? 0);
    };
    const fresh = changed.filter((t) => t.isNew);
    if (fresh.length) {
      const inserted = await exec(
        `INSERT INTO contacts (id, company_id, first_name, last_name, gender, phone_number, email, custom_fields, is_test, communication_supported)
         SELECT u.id, $1, u.first_name, u.last_name, u.gender, u.phone, u.email, u.custom_fields, coalesce(u.is_test, false),
                CASE WHEN u.phone IS NULL THEN '{}'::text[] ELSE ARRAY['SMS'] END
           FROM ${RECORDS}
         ON CONFLICT DO NOTHING`,
        [companyId, rowsOf(fresh)],
      );
      // A phone number or email taken by another writer since the lookup: read the holders again.
      if (inserted !== fresh.length) throw new RetryBatch();
    }
    const existing = changed.filter((t) => !t.isNew);
    if (existing.length) {
      await exec(
        `UPDATE contacts c SET
            first_name = coalesce(u.first_name, c.first_name),
            last_name = coalesce(u.last_name, c.last_name),
            gender = coalesce(u.gender, c.gender),
            communication_supported = CASE
              WHEN u.phone IS NULL THEN '{}'::text[]
              WHEN c.phone_number IS DISTINCT FROM u.phone THEN ARRAY['SMS']
              ELSE c.communication_supported END,
            phone_number = u.phone,
            email = u.email,
            custom_fields = c.custom_fields || u.custom_fields,
            is_test = coalesce(u.is_test, c.is_test),
            updated_at = now()
           FROM ${RECORDS}
          WHERE c.company_id = $1 AND c.id = u.id`,
        [companyId, rowsOf(existing)],
      );
    }
    if (job.listId !== null && changed.length) {
      await exec(
        `INSERT INTO contact_list_members (company_id, list_id, contact_id)
         SELECT $1, $2, (jsonb_array_elements_text($3::jsonb))::uuid ON CONFLICT (list_id, contact_id) DO NOTHING`,
        [companyId, job.listId, jsonParam(() => changed.map((t) => t.id))],
      );
    }
    // Opt-outs belong to the number (contract section 7), set in the batch's transaction.
    await applyChanges(this.sequelize, transaction, importedOptOuts(companyId, optOuts));
    errors.sort((a, b) => a.row - b.row);
    const kept = errors.slice(0, Math.max(0, MAX_KEPT_ERRORS - job.keptErrors));
    await exec(
      `UPDATE contact_imports SET total_rows = greatest(total_rows, $2), created = created + $3, updated = updated + $4, skipped = skipped + $5,
              errors = errors || $6::jsonb, heartbeat_at = now()
        WHERE id = $1`,
      [job.id, totalRows, created, updated, errors.length, JSON.stringify(kept)],
    );
    // Counted only once the transaction commits (a retried batch is counted once).
    transaction.afterCommit(() => {
      job.keptErrors += kept.length;
    });
  }
}
