/**
 * Durable jobs: background work that must survive a crash is a row, claimed and held through this
 * module, never an event alone. One mechanism for every queue (exports, imports, the notifier's
 * outbox):
 * - claim: `WITH next AS (SELECT ... FOR UPDATE SKIP LOCKED) UPDATE ... SET <owner>, <lease> FROM next`,
 *   so claimants never wait on each other and never take a row another holds;
 * - lease: the row names its holder (a node id, a claim token) and either the time its lease runs
 *   out (`leased_until`) or when its holder was last heard of (a heartbeat, dead after a while);
 * - renew: the holder extends its leases and learns which rows are still its own;
 * - give back: at stop, the holder hands its rows back (what that sets is the caller's to say);
 * - sweep: rows whose holder's lease ran out are ended (what ending sets is the caller's to say);
 * - retry on SQLSTATE: a write that met a concurrent one (deadlock, serialization failure, a unique
 *   key taken meanwhile) is run again;
 * - loops: the timers that run all of this in the background, a failure logged with what failed.
 *
 * Statements go through `rawQuery` (pg on a connection of Sequelize's pool), optionally as named
 * prepared statements: the claim is a hot path.
 */
import type { Sequelize } from "sequelize";
import { rawQuery } from "./db";

export type KeyType = "uuid" | "bigint" | "text";

/** A table of durable jobs: where a row's key, holder and lease live. */
export interface JobTable {
  table: string;
  /** The alias every statement gives the table (callers' SQL fragments use it). */
  alias: string;
  /** The key column and its SQL type. */
  key: string;
  keyType: KeyType;
  /**
   * A column that, with `key`, identifies a row (a table keyed by two columns, as
   * campaign_recipients by (campaign_id, contact_id)): claims match both, and held rows are named
   * with their group's value (`Held.group`), so every statement reaches them by the primary key.
   */
  group?: { column: string; type: KeyType };
  /** The column naming the row's holder: a node id, a claim token. */
  owner: string;
  /**
   * `until`: the column holding when the lease runs out (set to now() + the lease at claim and
   * renewal, dead once past). `heartbeat`: the column holding when the holder was last heard of
   * (set to now(); dead once older than `staleAfterS`).
   */
  lease: { until: string } | { heartbeat: string; staleAfterS: number };
  /**
   * Whether ending a hold (give back, sweep) leaves the holder and the lease columns as they are (a
   * record of who ran it last), instead of clearing them.
   */
  keepHolder?: boolean;
}

/**
 * Which rows a statement acts on: ids of one holder (null: whoever holds them), or each id with its
 * own holder; `group`: the value of the table's group column (required, and only allowed, when the
 * table has one).
 */
export type Held = ({ ids: readonly (string | number)[]; owner: string | null } | { each: readonly { id: string | number; owner: string }[] }) & {
  group?: string | number;
};

export interface ClaimSpec {
  /**
   * The candidates, locked with FOR UPDATE SKIP LOCKED: a condition, order and limit on the table
   * (under its alias), or a whole query of the caller's (it must yield the key column and lock its
   * rows itself; RETURNING may read its other columns under the name `as`).
   */
  candidates: { where: string; orderBy: string; limit: number | string } | string;
  /** The candidate CTE's name (default `next`). */
  as?: string;
  /** The parameter holding the new holder, e.g. `$1`. */
  owner: string;
  /** The parameter holding the lease in milliseconds (for `until` leases), e.g. `$2`. */
  leaseMs?: string;
  /** What else the claim sets, e.g. `status = 'PROCESSING', attempts = j.attempts + 1`. */
  set?: string;
  returning: string;
}

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
  const match = `${col(t, t.key)} = ${as}.${t.key}${t.group ? ` AND ${col(t, t.group.column)} = ${as}.${t.group.column}` : ""}`;
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

export interface EndSpec {
  /** What ending sets besides clearing the holder and lease, e.g. `status = 'QUEUED'`. */
  set?: string;
  /** What else a row must be, e.g. `j.status = 'PROCESSING'`. */
  where?: string;
  /** Parameters `set` and `where` use, numbered from $1. */
  params?: unknown[];
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

/** A job table on a database: claim, renew, give back and sweep, each one statement. */
export class Jobs {
  /** The claim statement, built once from the table and its ClaimSpec. */
  readonly claimStatement: string | null;

  constructor(
    private readonly sequelize: Sequelize,
    readonly table: JobTable,
    claim?: ClaimSpec,
  ) {
    this.claimStatement = claim ? claimSql(table, claim) : null;
  }

  /** Claims rows with the table's claim (`name`: run as a prepared statement of that name). */
  claim<T extends object>(params: unknown[], name?: string): Promise<T[]> {
    if (!this.claimStatement) throw new Error(`${this.table.table}: no claim was described for this table`);
    return rawQuery<T>(this.sequelize, this.claimStatement, params, name);
  }

  /** Renews the leases of held rows; answers the rows (RETURNING `returning`) still ours. */
  async renew<T extends object = { id: string }>(held: Held, o: { leaseMs?: number; where?: string; returning?: string } = {}): Promise<T[]> {
    if (isEmpty(held)) return [];
    const s = renewSql(this.table, held, o);
    return rawQuery<T>(this.sequelize, s.sql, s.params);
  }

  /** Hands held rows back (or ends them) as `e` says; answers how many were. */
  async giveBack(held: Held, e: EndSpec = {}): Promise<number> {
    if (isEmpty(held)) return 0;
    const s = giveBackSql(this.table, held, e);
    return (await rawQuery(this.sequelize, s.sql, s.params)).length;
  }

  /** Ends rows whose lease is gone as `e` says; answers how many were. */
  async sweep(e: EndSpec): Promise<number> {
    const s = sweepSql(this.table, e);
    return (await rawQuery(this.sequelize, s.sql, s.params)).length;
  }
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
    const [row] = await rawQuery<{ n: number }>(sequelize, sql, [o.days, o.batch, o.statuses]);
    const n = Number(row?.n ?? 0);
    purged += n;
    if (n < o.batch) break;
  }
  return purged;
}

const isEmpty = (held: Held) => ("each" in held ? held.each.length === 0 : held.ids.length === 0);

/** Deadlock, serialization failure, a unique key taken by a concurrent writer: what running again may cure. */
export const RETRYABLE_SQLSTATES: readonly string[] = ["40P01", "40001", "23505"];

/** The SQLSTATE of a database error: pg's own (`code`) or wrapped by Sequelize (`original`/`parent`). */
export function sqlstateOf(err: unknown): string | undefined {
  const e = err as { code?: unknown; original?: { code?: unknown }; parent?: { code?: unknown } } | null | undefined;
  for (const c of [e?.code, e?.original?.code, e?.parent?.code]) if (typeof c === "string" && /^[0-9A-Z]{5}$/.test(c)) return c;
  return undefined;
}

/** Whether an error is one of `sqlstates` (a Sequelize unique-constraint error counts as 23505). */
export function isRetryable(err: unknown, sqlstates: readonly string[] = RETRYABLE_SQLSTATES): boolean {
  if (sqlstates.includes("23505") && (err as Error | null)?.name === "SequelizeUniqueConstraintError") return true;
  const code = sqlstateOf(err);
  return code !== undefined && sqlstates.includes(code);
}

export interface RetryOptions {
  /** Other errors worth running again (a race the caller detected itself). */
  also?: (err: unknown) => boolean;
  /** Milliseconds to wait before attempt `n + 1` (none by default). */
  delayMs?: (n: number) => number;
}

/** Runs `fn`, again after an error of `sqlstates` (or `also`), up to `attempts` runs in all; the last error is thrown. */
export async function retryOn<T>(sqlstates: readonly string[], attempts: number, fn: (attempt: number) => Promise<T>, o: RetryOptions = {}): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (err) {
      if (attempt >= attempts || !(isRetryable(err, sqlstates) || o.also?.(err))) throw err;
      const wait = o.delayMs?.(attempt) ?? 0;
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
  }
}

interface Warns {
  warn(o: object, m: string): void;
}

/** The timers of a component's background loops: each failure logged with what failed; stop() ends them all. */
export class Loops {
  private readonly timers = new Set<NodeJS.Timeout>();
  private stopped = false;

  constructor(private readonly log: Warns) {}

  /**
   * Runs `fn` every `ms` (and at once with `runNow`). `unref` (the default) lets the process exit
   * while the loop waits.
   */
  every(ms: number, what: string, fn: () => unknown, o: { unref?: boolean; runNow?: boolean; firstAfterMs?: number } = {}): void {
    const run = () => {
      try {
        const out = fn();
        if (out instanceof Promise) out.catch((err) => this.log.warn({ err }, `${what} failed`));
      } catch (err) {
        this.log.warn({ err }, `${what} failed`);
      }
    };
    const repeat = () => {
      const t = setInterval(run, ms);
      if (o.unref ?? true) t.unref();
      this.timers.add(t);
    };
    if (o.firstAfterMs !== undefined) {
      // A first run later than at once, then every `ms` (a loop that must not start with the process).
      const first: NodeJS.Timeout = setTimeout(() => {
        this.timers.delete(first);
        run();
        if (!this.stopped) repeat();
      }, o.firstAfterMs);
      if (o.unref ?? true) first.unref();
      this.timers.add(first);
      return;
    }
    repeat();
    if (o.runNow) run();
  }

  /** Ends every loop (a run in progress finishes on its own). */
  stop(): void {
    this.stopped = true;
    for (const t of this.timers) clearInterval(t);
    this.timers.clear();
  }
}
