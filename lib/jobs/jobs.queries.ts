/**
 * The SQL of durable jobs (lib/jobs/jobs.ts): the claim, renew, give-back and sweep statements
 * built from a `JobTable` and the caller's fragments (conditions, orders, assignments and RETURNING
 * lists the caller writes in its own queries file), and the retention of ended jobs. `jobs.ts`
 * re-exports the builders and runs the statements; every statement is one, atomic by itself.
 */
import type { Sequelize } from "sequelize";
import { queryRows } from "../db/db";
import type { ClaimSpec, EndSpec, Held, JobTable } from "./jobs";

const col = (t: JobTable, c: string) => `${t.alias}.${c}`;

/** `now() + <ms>` for a lease parameter. */
export const leaseEnd = (msParam: string) => `now() + make_interval(secs => ${msParam}::float8 / 1000)`;

/** The condition true of a row whose holder's lease is gone. */
export function leaseExpired(t: JobTable): string {
  return "until" in t.lease
    ? `${col(t, t.lease.until)} < now()`
    : `${col(t, t.lease.heartbeat)} < now() - make_interval(secs => ${Number(t.lease.staleAfterS)})`;
}

/** The assignment that takes or renews a lease. */
function leaseSet(t: JobTable, msParam: string | undefined): string {
  if ("heartbeat" in t.lease) return `${t.lease.heartbeat} = now()`;
  if (!msParam) throw new Error(`${t.table}: a lease until a time needs its length (leaseMs)`);
  return `${t.lease.until} = ${leaseEnd(msParam)}`;
}

/** The assignments that end a hold (none when the table keeps its holder). */
function releaseSet(t: JobTable): string[] {
  if (t.keepHolder) return [];
  return "until" in t.lease ? [`${t.owner} = NULL`, `${t.lease.until} = NULL`] : [`${t.owner} = NULL`];
}

function endSet(t: JobTable, e: EndSpec): string {
  const set = [...releaseSet(t), ...(e.set ? [e.set] : [])];
  if (set.length === 0) throw new Error(`${t.table}: ending a hold must set something`);
  return set.join(", ");
}

/** The claim statement: candidates locked with SKIP LOCKED, then taken (holder and lease set) in the same statement. */
export function claimSql(t: JobTable, c: ClaimSpec): string {
  const as = c.as ?? "next";
  let candidates: string;
  if (typeof c.candidates === "string") {
    if (!/FOR\s+UPDATE(\s+OF\s+\w+(\s*,\s*\w+)*)?\s+SKIP\s+LOCKED/i.test(c.candidates))
      throw new Error(`${t.table}: a claim's candidates must be locked FOR UPDATE SKIP LOCKED`);
    candidates = c.candidates;
  } else {
    const { where, orderBy, limit } = c.candidates;
    // Line breaks end any comment a fragment closes with.
    candidates = `SELECT ${col(t, t.key)} FROM ${t.table} ${t.alias}\n WHERE ${where}\n ORDER BY ${orderBy}\n LIMIT ${limit}\n FOR UPDATE SKIP LOCKED`;
  }
  const set = [`${t.owner} = ${c.owner}`, leaseSet(t, c.leaseMs), ...(c.set ? [c.set] : [])].join(", ");
  const match = `${col(t, t.key)} = ${as}.${t.key}${t.group ? ` AND ${col(t, t.group.column)} = ${as}.${t.group.column}` : ""}${c.matchAlso ? ` AND ${col(t, c.matchAlso)} = ${as}.${c.matchAlso}` : ""}`;
  return `WITH ${as} AS (${candidates}\n) UPDATE ${t.table} ${t.alias} SET ${set} FROM ${as} WHERE ${match} RETURNING ${c.returning}`;
}

/** FROM and WHERE parts selecting held rows; their parameters are numbered from `first`. */
export function heldSql(t: JobTable, held: Held, first: number): { from: string; where: string; params: unknown[] } {
  if (!t.group !== (held.group === undefined)) throw new Error(`${t.table}: held rows name their group exactly when the table has one`);
  // The group's value comes first ($first), the rest after it.
  const group = t.group ? { where: `${col(t, t.group.column)} = $${first}::${t.group.type} AND `, params: [held.group] } : { where: "", params: [] };
  const n = first + group.params.length;
  if ("each" in held) {
    return {
      from: ` FROM jsonb_to_recordset($${n}::jsonb) AS held(id ${t.keyType}, owner text)`,
      where: `${group.where}${col(t, t.key)} = held.id AND ${col(t, t.owner)} = held.owner`,
      params: [...group.params, JSON.stringify(held.each)],
    };
  }
  const ids = `${group.where}${col(t, t.key)} = ANY ($${n}::${t.keyType}[])`;
  if (held.owner === null) return { from: "", where: ids, params: [...group.params, held.ids] };
  return { from: "", where: `${ids} AND ${col(t, t.owner)} = $${n + 1}`, params: [...group.params, held.ids, held.owner] };
}

const and = (...parts: (string | undefined)[]) =>
  parts
    .filter((p): p is string => !!p)
    .map((p) => `(${p}\n)`)
    .join(" AND ");

export interface Statement {
  sql: string;
  params: unknown[];
}

/** Renews the leases of held rows (`where`: what else a held row must be); RETURNING says which are still ours. */
export function renewSql(t: JobTable, held: Held, o: { leaseMs?: number; where?: string; returning?: string } = {}): Statement {
  const until = "until" in t.lease;
  if (until && o.leaseMs === undefined) throw new Error(`${t.table}: renewing a lease until a time needs its length (leaseMs)`);
  const h = heldSql(t, held, until ? 2 : 1);
  return {
    sql: `UPDATE ${t.table} ${t.alias} SET ${leaseSet(t, "$1")}${h.from} WHERE ${and(h.where, o.where)} RETURNING ${o.returning ?? col(t, t.key)}`,
    params: until ? [o.leaseMs, ...h.params] : h.params,
  };
}

/** Hands held rows back (or ends them), as the caller's `set` says. */
export function giveBackSql(t: JobTable, held: Held, e: EndSpec): Statement {
  const params = e.params ?? [];
  const h = heldSql(t, held, params.length + 1);
  const set = endSet(t, e);
  return {
    sql: `UPDATE ${t.table} ${t.alias} SET ${set}${h.from} WHERE ${and(h.where, e.where)} RETURNING ${col(t, t.key)}`,
    params: [...params, ...h.params],
  };
}

/** Ends the rows (meeting `where`) whose holder's lease is gone, as the caller's `set` says. */
export function sweepSql(t: JobTable, e: EndSpec): Statement {
  const set = endSet(t, e);
  return { sql: `UPDATE ${t.table} ${t.alias} SET ${set} WHERE ${and(e.where, leaseExpired(t))} RETURNING ${col(t, t.key)}`, params: e.params ?? [] };
}

/**
 * Retention of ended jobs: deletes rows of `table` in one of `statuses` whose `endedColumn` (or,
 * when it is null, `created_at`) is older than `days`, `batch` rows a statement and at most `batches`
 * statements a call, so a backlog goes over several calls; answers how many were deleted.
 */
export async function purgeEndedJobs(
  sequelize: Sequelize,
  o: { table: string; statuses: readonly string[]; endedColumn: string; days: number; batch: number; batches: number },
): Promise<number> {
  const sql = `WITH gone AS (
     DELETE FROM ${o.table} WHERE id IN (
       SELECT id FROM ${o.table}
       WHERE status = ANY ($3::text[]) AND coalesce(${o.endedColumn}, created_at) < now() - make_interval(days => $1)
       LIMIT $2
     )
     RETURNING 1
   )
   SELECT count(*)::int AS n FROM gone`;
  let purged = 0;
  for (let i = 0; i < o.batches; i++) {
    const [row] = await queryRows<{ n: number }>(sequelize, sql, [o.days, o.batch, o.statuses]);
    const n = Number(row?.n ?? 0);
    purged += n;
    if (n < o.batch) break;
  }
  return purged;
}
