/**
 * Runs export jobs on one exports node: claims QUEUED jobs (and PROCESSING ones whose node stopped
 * renewing its lease) from the database, at most EXPORT_WORKERS at a time and one per account at a
 * time across the cluster, runs each on the piscina pool (exports.worker.ts), keeps their leases
 * alive, records the outcome, and sweeps expired files. The database is the queue: a job waits
 * QUEUED there, not in memory, so nothing is lost when a node stops or dies.
 */
import { randomBytes } from "node:crypto";
import { mkdir, readdir, rm } from "node:fs/promises";
import path from "node:path";
import { Piscina } from "piscina";
import type { Sequelize } from "sequelize";
import type { Config } from "../../lib/config";
import { Coalesced } from "../../lib/jobs/coalesce";
import { Jobs, Loops, purgeEndedJobs } from "../../lib/jobs/jobs";
import { destroyPool, duration, workerPool } from "../../lib/jobs/worker-pool";
import type { ExportType } from "./exports.schemas";
import {
  copyCsvSql,
  expireCompleted,
  EXPORT_CLAIM,
  EXPORT_JOBS,
  finishRun,
  GIVE_BACK_RUNS,
  interruptedRuns,
  jobsOfFiles,
  RENEW_RUNS,
  waitingRun,
} from "./exports.queries";
import type { ExportMetrics } from "./exports.metrics";
import type { ExportResult, ExportTask } from "./exports.worker";

/** How long a run waits for its statement's owner (tracking, contacts) to be discovered, and then how long the node claims no export when none was. */
export const OWNER_WAIT_MS = 3000;

/** Runs of one job before it ends FAILED (a worker that died, a node that died, a failed query). */
export const MAX_ATTEMPTS = 3;
/**
 * The longest one export's worker task may run: the worker's statement timeout (2 hours, which
 * ends a slow COPY and is retried) and a margin for the last writes. Past it the thread is
 * stopped, whatever holds it (a write that never returns, a dead volume), and the job ends FAILED
 * without a retry. A constant, as the statement timeout it follows.
 */
export const EXPORT_TASK_BUDGET_MS = 2 * 3600_000 + 10 * 60_000;
/**
 * Broadcast by the exports node that queued a job (created or regenerated), after the commit: every
 * exports node claims at once. EXPORT_POLL_MS is the safety net (a lost broadcast, a lease run out).
 * Only the exports service emits and hears it.
 */
export const EXPORT_QUEUED = "exports.jobQueued";
const SWEEP_MS = 60_000;
/**
 * How long an EXPIRED or FAILED job stays listed (GET /exports) after it ended, in days; older
 * rows are deleted by the sweep, at most PURGE_BATCH rows a statement and PURGE_BATCHES statements
 * a sweep, so that a backlog is worked off over a few sweeps without one long transaction.
 */
export const EXPORT_JOB_RETENTION_DAYS = 30;
const PURGE_BATCH = 1000;
const PURGE_BATCHES = 10;
/**
 * Every attempt writes files of its own, `<id>.<run>.<token>.tmp` renamed to `<id>.<run>.<token>.csv.gz`,
 * so that two attempts of one run (a lease lost and taken over, on a shared EXPORT_DIR) never touch
 * each other's file; the job names the one that completed (`file_name`).
 */
export const FILE_RE = /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.(\d{1,9})\.([0-9a-f]{12})\.(csv\.gz|tmp)$/;

export interface ClaimedJob {
  id: string;
  company_id: string;
  type: ExportType;
  filters: Record<string, unknown>;
  run: number;
  attempts: number;
}

interface Active {
  job: ClaimedJob;
  abort: AbortController;
  tmpPath: string;
  finalPath: string;
  /** Settles when the run has ended (its file in place and the job recorded, or given up). */
  done?: Promise<void>;
}

export class ExportRunner {
  private pool: Piscina | null = null;
  private readonly active = new Map<string, Active>();
  private readonly loops: Loops;
  private readonly jobs: Jobs;
  private readonly claims = new Coalesced(
    () => this.claimAll(),
    (err) => this.log.warn({ err }, "export claim failed"),
  );
  private stopping = false;
  /** A statement's owner did not answer: no claim before this (ms since the epoch). */
  private claimsPausedUntil = 0;
  /** The time budget of one export's worker task (tests lower it). */
  taskBudgetMs = EXPORT_TASK_BUDGET_MS;

  constructor(
    private readonly config: Config,
    private readonly sequelize: Sequelize,
    private readonly dbUrl: string,
    private readonly nodeId: string,
    private readonly log: { info(o: object, m: string): void; warn(o: object, m: string): void; error(o: object, m: string): void },
    private readonly metrics: ExportMetrics,
    /** The SELECT of a job, asked of its data's owner (tracking or contacts) with the job's account and filters. */
    private readonly statementOf: (job: ClaimedJob) => Promise<string>,
  ) {
    this.loops = new Loops(log);
    this.jobs = new Jobs(sequelize, EXPORT_JOBS, EXPORT_CLAIM);
  }

  get dir(): string {
    return this.config.exportDir;
  }

  /** The worker threads (tests reach in to kill one mid-export). */
  get threads() {
    return this.pool?.threads ?? [];
  }

  async start(): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    this.loops.every(this.config.exportPollMs, "export claim", () => this.kick(), { runNow: true });
    this.loops.every(Math.floor(this.config.exportLeaseMs / 3), "export heartbeat", () => this.heartbeat());
    this.loops.every(SWEEP_MS, "export sweep", () => this.sweep(), { runNow: true });
  }

  /** Looks for work now (a job was just queued here); repeated calls while a claim runs coalesce. */
  kick(): void {
    if (!this.stopping) this.claims.request();
  }

  private async claimAll(): Promise<void> {
    // Jobs whose node died on their last allowed attempt end here, whichever node notices.
    await this.jobs.sweep(interruptedRuns(MAX_ATTEMPTS));
    if (Date.now() < this.claimsPausedUntil) return;
    while (!this.stopping && this.active.size < this.config.exportWorkers) {
      const job = await this.claimOne();
      if (!job) return;
      this.launch(job);
    }
  }

  private async claimOne(): Promise<ClaimedJob | null> {
    const [row] = await this.jobs.claim<ClaimedJob>([this.nodeId, this.config.exportLeaseMs]);
    return row ?? null;
  }

  private workers(): Piscina {
    if (!this.pool) {
      this.pool = workerPool(__dirname, "exports.worker", {
        maxThreads: this.config.exportWorkers,
        idleTimeout: 60_000,
        // The worker holds a few buffers in flight, never rows: a small heap keeps memory flat.
        resourceLimits: { maxOldGenerationSizeMb: 64, maxYoungGenerationSizeMb: 16 },
      });
    }
    return this.pool;
  }

  private launch(job: ClaimedJob): void {
    const base = path.join(this.dir, `${job.id}.${job.run}.${randomBytes(6).toString("hex")}`);
    const entry: Active = { job, abort: new AbortController(), tmpPath: `${base}.tmp`, finalPath: `${base}.csv.gz` };
    // Claimed again while an earlier run of it is still here: that run lost its lease (its heartbeat failed), so it stops.
    this.active.get(job.id)?.abort.abort();
    this.active.set(job.id, entry);
    entry.done = this.runJob(entry)
      .catch((err) => this.log.error({ err, exportId: job.id }, "export bookkeeping failed"))
      .finally(() => {
        if (this.active.get(job.id) === entry) this.active.delete(job.id);
        this.kick();
      });
  }

  private async runJob({ job, abort, tmpPath, finalPath }: Active): Promise<void> {
    const started = Date.now();
    let select: string;
    try {
      select = await this.statementOf(job);
    } catch (err) {
      const e = err as { name?: string; message?: string; data?: { errors?: Array<{ path: string; message: string }> } };
      if (e?.name === "ApiError") {
        // The owner refused the filters: valid when the job was made, one no longer is (a custom field was removed).
        const fields = (e.data?.errors ?? []).map((f) => `${f.path} ${f.message}`);
        if (await this.finish(job, "FAILED", null, [e.message, ...fields].join(" "))) this.metrics.ended(job.type, "FAILED");
        return;
      }
      // No owner node answered (none running, a transport error): not the export's fault, so no
      // attempt counted; the job waits QUEUED and this node claims nothing for OWNER_WAIT_MS.
      const owner = job.type === "CONTACTS" ? "contacts" : "tracking";
      this.log.warn({ err, exportId: job.id }, "export statement could not be asked of its owner; the job waits");
      this.claimsPausedUntil = Date.now() + OWNER_WAIT_MS;
      await this.jobs.giveBack(
        { ids: [job.id], owner: this.nodeId },
        waitingRun(`Waiting: ${owner} did not answer (no ${owner} node running?); the export starts once one does.`),
      );
      return;
    }
    const task: ExportTask = { url: this.dbUrl, sql: copyCsvSql(select), tmpPath, finalPath };
    let result: ExportResult;
    const budget = AbortSignal.timeout(this.taskBudgetMs);
    try {
      result = (await this.workers().run(task, { signal: AbortSignal.any([abort.signal, budget]) })) as ExportResult;
    } catch (err) {
      await Promise.all([rm(tmpPath, { force: true }), rm(finalPath, { force: true })]);
      if (this.stopping || abort.signal.aborted) return; // handed back at stop, or taken from us (regenerated, lease lost)
      if (budget.aborted) {
        this.log.warn({ exportId: job.id, budgetMs: this.taskBudgetMs }, "export stopped: over its time budget");
        const why = `The export took longer than ${duration(this.taskBudgetMs)} and was stopped; narrow its filters (a shorter period, fewer contacts) and run it again with POST /exports/{exportId}.`;
        if (await this.finish(job, "FAILED", null, why)) this.metrics.ended(job.type, "FAILED");
        return;
      }
      const died = /terminat|exit/i.test((err as Error).message);
      this.log.warn(
        { err: { name: (err as Error).name, message: (err as Error).message, code: (err as { code?: string }).code }, exportId: job.id, attempt: job.attempts },
        "export run failed",
      );
      await this.retryOrFail(job, died ? "the export worker stopped" : "the file could not be written");
      return;
    }
    const kept = await this.finish(job, "COMPLETED", result, null, path.basename(finalPath));
    if (!kept) await rm(finalPath, { force: true });
    else {
      this.metrics.ended(job.type, "COMPLETED", { rows: result.rowCount, seconds: (Date.now() - started) / 1000 });
      this.log.info({ exportId: job.id, type: job.type, rows: result.rowCount, bytes: result.bytes, ms: Date.now() - started }, "export completed");
    }
  }

  /** A failed attempt (`why`): QUEUED again for another, or FAILED after MAX_ATTEMPTS. */
  private async retryOrFail(job: ClaimedJob, why: string): Promise<void> {
    const retry = job.attempts < MAX_ATTEMPTS;
    const ended = retry
      ? await this.finish(job, "QUEUED", null, `Attempt ${job.attempts} of ${MAX_ATTEMPTS} failed (${why}); it is retried.`)
      : await this.finish(job, "FAILED", null, `The export failed ${MAX_ATTEMPTS} times (last: ${why}); run it again with POST /exports/{exportId}.`);
    if (ended) this.metrics.ended(job.type, retry ? "RETRIED" : "FAILED");
  }

  /** Records a run's outcome while the job is still this node's run; false when it no longer is. */
  private async finish(
    job: ClaimedJob,
    status: "COMPLETED" | "FAILED" | "QUEUED",
    result: ExportResult | null,
    error: string | null,
    file: string | null = null,
  ): Promise<boolean> {
    return finishRun(this.sequelize, {
      id: job.id,
      run: job.run,
      nodeId: this.nodeId,
      status,
      rowCount: result?.rowCount ?? null,
      error,
      retentionS: this.config.exportRetentionS,
      file,
    });
  }

  /** Renews the leases of the runs in progress; a run whose job is no longer ours is stopped. */
  private async heartbeat(): Promise<void> {
    if (this.active.size === 0) return;
    const runs = [...this.active.values()];
    const rows = await this.jobs.renew<{ id: string; run: number }>(
      { ids: runs.map((a) => a.job.id), owner: this.nodeId },
      { leaseMs: this.config.exportLeaseMs, ...RENEW_RUNS },
    );
    const ours = new Map(rows.map((r) => [r.id, Number(r.run)]));
    // Only the runs this renewal covered (one claimed meanwhile is not judged by it).
    for (const a of runs) {
      if (this.active.get(a.job.id) !== a || ours.get(a.job.id) === a.job.run) continue;
      this.log.warn({ exportId: a.job.id }, "export no longer held by this node; its run is stopped");
      a.abort.abort();
    }
  }

  /**
   * Completed jobs past their expiry become EXPIRED; EXPIRED and FAILED jobs that ended more than
   * EXPORT_JOB_RETENTION_DAYS ago are deleted; every file of EXPORT_DIR that no job needs any more
   * (expired, regenerated, failed, a temporary file of a dead run) is deleted.
   */
  async sweep(): Promise<void> {
    await expireCompleted(this.sequelize);
    await this.purgeEnded();
    let names: string[];
    try {
      names = (await readdir(this.dir)).filter((n) => FILE_RE.test(n));
    } catch {
      return;
    }
    if (names.length === 0) return;
    const ids = [...new Set(names.map((n) => FILE_RE.exec(n)![1]!))];
    const jobs = await jobsOfFiles(this.sequelize, ids);
    const byId = new Map(jobs.map((j) => [j.id, j]));
    const mine = new Set([...this.active.values()].flatMap((a) => [a.tmpPath, a.finalPath]));
    const doomed = names.filter((n) => {
      const [, id, run] = FILE_RE.exec(n)!;
      const job = byId.get(id!);
      if (mine.has(path.join(this.dir, n))) return false;
      if (job?.status === "COMPLETED") return job.file_name !== n;
      // A run in progress (here or, on a shared EXPORT_DIR, on another node) keeps its files, the
      // renamed one too until its outcome is written.
      return !(job?.status === "PROCESSING" && Number(job.run) === Number(run));
    });
    await Promise.all(doomed.map((n) => rm(path.join(this.dir, n), { force: true })));
  }

  /** Deletes EXPIRED and FAILED jobs older than the retention, in bounded batches; answers how many. */
  async purgeEnded(): Promise<number> {
    const purged = await purgeEndedJobs(this.sequelize, {
      table: "export_jobs",
      statuses: ["EXPIRED", "FAILED"],
      endedColumn: "completed_at",
      days: EXPORT_JOB_RETENTION_DAYS,
      batch: PURGE_BATCH,
      batches: PURGE_BATCHES,
    });
    if (purged > 0) this.log.info({ purged, retentionDays: EXPORT_JOB_RETENTION_DAYS }, "old export jobs purged");
    return purged;
  }

  /** Stops claiming, stops the runs in progress and hands their jobs back at once (QUEUED, the attempt not counted). */
  async stop(): Promise<void> {
    this.stopping = true;
    await this.claims.close();
    // Runs in flight finish within SHUTDOWN_TIMEOUT_MS (their leases still renewed meanwhile); what
    // still runs then is cut and handed back.
    const running = [...this.active.values()];
    if (running.length > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([Promise.all(running.map((a) => a.done)), new Promise((r) => (timer = setTimeout(r, this.config.shutdownTimeoutMs)))]);
      clearTimeout(timer);
    }
    this.loops.stop();
    const mine = [...this.active.values()];
    for (const a of mine) a.abort.abort();
    await this.jobs
      .giveBack({ ids: mine.map((a) => a.job.id), owner: this.nodeId }, GIVE_BACK_RUNS)
      .catch((err) => this.log.warn({ err }, "could not hand exports back"));
    await destroyPool(this.pool);
    this.pool = null;
    await Promise.all(mine.map((a) => rm(a.tmpPath, { force: true })));
  }
}
