/**
 * The exports service's SQL: the export_jobs statements (the list, a job, a new job and a fresh run,
 * the runner's claim, outcome, heartbeat, give-back and sweeps, the metrics' and REPL's reads), and
 * the COPY each export runs around its SELECT. The SELECT is the owner's: tracking writes the message
 * exports' (`tracking.exportStatement`), contacts the contacts export's (`contacts.exportStatement`);
 * exports never names their tables (issue 33 item 1; lib/db/csv.ts for how cells are written).
 */
import { QueryTypes, type Sequelize } from "sequelize";
import { queryPage, type Page } from "../../lib/http/paging";
import { leaseExpired, type ClaimSpec, type EndSpec, type JobTable } from "../../lib/jobs/jobs";
import { JOB_COLUMNS, toExportOut, type JobRow } from "./exports.models";
import type { ExportOut, ExportType } from "./exports.schemas";

// --- export_jobs

/** A page of the account's jobs, newest first. */
export function jobsPage(sequelize: Sequelize, companyId: string, page: number, limit: number): Promise<Page<ExportOut>> {
  return queryPage(sequelize, {
    select: `SELECT ${JOB_COLUMNS} FROM export_jobs WHERE company_id = :companyId ORDER BY created_at DESC, id DESC LIMIT :limit OFFSET :offset`,
    count: "SELECT count(*) AS total FROM export_jobs WHERE company_id = :companyId",
    replacements: { companyId },
    page,
    limit,
    map: toExportOut,
  });
}

/** One job (of the account, when `companyId` is given), or null. */
export async function findJob(sequelize: Sequelize, companyId: string | null, id: string): Promise<JobRow | null> {
  const [row] = await sequelize.query<JobRow>(`SELECT ${JOB_COLUMNS} FROM export_jobs WHERE id = $1${companyId === null ? "" : " AND company_id = $2"}`, {
    bind: companyId === null ? [id] : [id, companyId],
    type: QueryTypes.SELECT,
  });
  return row ?? null;
}

/** A new job `id` of the account, QUEUED with its filters. */
export async function insertJob(sequelize: Sequelize, id: string, companyId: string, type: ExportType, filters: object): Promise<JobRow> {
  const [row] = await sequelize.query<JobRow>(
    `INSERT INTO export_jobs (id, company_id, type, filters, status) VALUES ($1, $2, $3, $4, 'QUEUED') RETURNING ${JOB_COLUMNS}`,
    { bind: [id, companyId, type, JSON.stringify(filters)], type: QueryTypes.SELECT },
  );
  return row!;
}

/**
 * A fresh run of the account's job: QUEUED again, the next run number, the attempts and the last
 * run's outcome cleared. Null when there is no such job or it is QUEUED or PROCESSING already.
 */
export async function requeueJob(sequelize: Sequelize, companyId: string, id: string): Promise<JobRow | null> {
  const [row] = await sequelize.query<JobRow>(
    `UPDATE export_jobs
                SET status = 'QUEUED', run = run + 1, attempts = 0, node_id = NULL, leased_until = NULL, row_count = NULL, file_name = NULL,
                    error = NULL, started_at = NULL, completed_at = NULL, expires_at = NULL
              WHERE id = $1 AND company_id = $2 AND status NOT IN ('QUEUED', 'PROCESSING')
             RETURNING ${JOB_COLUMNS}`,
    { bind: [id, companyId], type: QueryTypes.SELECT },
  );
  return row ?? null;
}

/** A job waiting or running, with its age (s) and node; `total`: how many there are (not only the `limit` answered). */
export interface QueuedJobRow {
  id: string;
  company_id: string;
  type: string;
  status: string;
  age: number;
  node_id: string | null;
  total: number;
}

/** The jobs waiting and running, oldest first, at most `limit`. */
export const queuedJobs = (sequelize: Sequelize, limit: number): Promise<QueuedJobRow[]> =>
  sequelize.query<QueuedJobRow>(
    `SELECT id, company_id, type, status, EXTRACT(EPOCH FROM now() - created_at)::float8 AS age, node_id, count(*) OVER ()::int AS total
               FROM export_jobs WHERE status IN ('QUEUED', 'PROCESSING') ORDER BY created_at LIMIT ${Number(limit)}`,
    { type: QueryTypes.SELECT },
  );

/** The jobs waiting and running (all nodes), and how long (s) the oldest one waiting has waited (null: none waits). */
export const jobCounts = (sequelize: Sequelize): Promise<{ queued: number; processing: number; oldest: number | null }> =>
  sequelize
    .query<{ queued: number; processing: number; oldest: number | null }>(
      `SELECT count(*) FILTER (WHERE status = 'QUEUED')::int AS queued, count(*) FILTER (WHERE status = 'PROCESSING')::int AS processing,
                    EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE status = 'QUEUED'))::float8 AS oldest
               FROM export_jobs WHERE status IN ('QUEUED', 'PROCESSING')`,
      { type: QueryTypes.SELECT },
    )
    .then((r) => r[0]!);

// --- the runner's jobs (lib/jobs/jobs.ts)

export const EXPORT_JOBS: JobTable = { table: "export_jobs", alias: "j", key: "id", keyType: "uuid", owner: "node_id", lease: { until: "leased_until" } };

/**
 * The oldest job waiting (or abandoned) of an account that has no export running: one export per
 * account at a time, so one account's burst never holds every worker of the cluster. $1: this
 * node, $2: the lease (ms).
 */
export const EXPORT_CLAIM: ClaimSpec = {
  candidates: {
    where: `(j.status = 'QUEUED' OR (j.status = 'PROCESSING' AND ${leaseExpired(EXPORT_JOBS)}))
            AND NOT EXISTS (SELECT 1 FROM export_jobs p
                             WHERE p.company_id = j.company_id AND p.id <> j.id AND p.status = 'PROCESSING' AND p.leased_until >= now())
            -- Two nodes claiming at once would each miss the other's uncommitted claim: one account, one claimant.
            AND pg_try_advisory_xact_lock(hashtext('pgw-export:' || j.company_id))`,
    orderBy: "j.created_at, j.id",
    limit: 1,
  },
  owner: "$1",
  leaseMs: "$2",
  set: "status = 'PROCESSING', attempts = j.attempts + 1, started_at = now()",
  returning: "j.id, j.company_id, j.type, j.filters, j.run, j.attempts",
};

/** The sweep of runs whose node died on their last allowed attempt (`maxAttempts`): FAILED, with why. */
export const interruptedRuns = (maxAttempts: number): EndSpec => ({
  set: `status = 'FAILED', completed_at = now(),
            error = 'The export was interrupted ${Number(maxAttempts)} times (its node stopped); run it again with POST /exports/{exportId}.'`,
  where: `j.status = 'PROCESSING' AND j.attempts >= ${Number(maxAttempts)}`,
});

/** A heartbeat's renewal: runs still PROCESSING, answering each one's id and run. */
export const RENEW_RUNS = { where: "j.status = 'PROCESSING'", returning: "j.id, j.run" } as const;

/** The give-back at a stop: runs still PROCESSING are QUEUED again, the attempt not counted. */
export const GIVE_BACK_RUNS: EndSpec = { set: "status = 'QUEUED', attempts = greatest(j.attempts - 1, 0)", where: "j.status = 'PROCESSING'" };

/** The give-back of a run that could not start (its statement's owner did not answer): the same, with why it waits. */
export const waitingRun = (why: string): EndSpec => ({ ...GIVE_BACK_RUNS, set: `${GIVE_BACK_RUNS.set}, error = $1::text`, params: [why] });

/**
 * Records a run's outcome while the job is still this node's run (`run`, held by `nodeId`,
 * PROCESSING): a COMPLETED one keeps its node (where the file is) and expires `retentionS` later; a
 * QUEUED one (to be retried) has no completion time. False when the job is no longer this run.
 */
export async function finishRun(
  sequelize: Sequelize,
  o: {
    id: string;
    run: number;
    nodeId: string;
    status: "COMPLETED" | "FAILED" | "QUEUED";
    rowCount: number | null;
    error: string | null;
    retentionS: number;
    file: string | null;
  },
): Promise<boolean> {
  const rows = await sequelize.query<{ id: string }>(
    `UPDATE export_jobs
          SET status = $4::text, node_id = CASE WHEN $4::text = 'COMPLETED' THEN node_id END, leased_until = NULL,
              row_count = $5::bigint, error = $6::text, file_name = $8::text,
              completed_at = CASE WHEN $4::text = 'QUEUED' THEN NULL ELSE now() END,
              expires_at = CASE WHEN $4::text = 'COMPLETED' THEN now() + $7::integer * interval '1 second' END
        WHERE id = $1::uuid AND run = $2::integer AND node_id = $3::text AND status = 'PROCESSING'
       RETURNING id`,
    {
      bind: [o.id, o.run, o.nodeId, o.status, o.rowCount, o.error, o.retentionS, o.file],
      type: QueryTypes.SELECT,
    },
  );
  return rows.length === 1;
}

/** Completed jobs past their expiry become EXPIRED (their node no longer named). */
export async function expireCompleted(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`UPDATE export_jobs SET status = 'EXPIRED', node_id = NULL WHERE status = 'COMPLETED' AND expires_at <= now()`);
}

/** The jobs among `ids` (the files of EXPORT_DIR name them): run, status and the file that completed. */
export const jobsOfFiles = (sequelize: Sequelize, ids: string[]): Promise<{ id: string; run: number; status: string; file_name: string | null }[]> =>
  sequelize.query<{ id: string; run: number; status: string; file_name: string | null }>(
    "SELECT id, run, status, file_name FROM export_jobs WHERE id = ANY ($1::uuid[])",
    {
      bind: [ids],
      type: QueryTypes.SELECT,
    },
  );

// --- what an export runs

/** The statement an export worker runs: `select`'s rows as CSV with a header row, written by PostgreSQL. */
export const copyCsvSql = (select: string): string => `COPY (${select}) TO STDOUT WITH (FORMAT csv, HEADER)`;
