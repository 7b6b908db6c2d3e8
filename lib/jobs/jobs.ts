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
 * The statements are built in jobs.queries.ts (re-exported here) and go through `queryRows`
 * (lib/db/db.ts: Sequelize's public query API), each one statement, atomic by itself.
 */
import type { Sequelize } from "sequelize";
import { queryRows } from "../db/db";
import { claimSql, giveBackSql, renewSql, sweepSql } from "./jobs.queries";

export { claimSql, giveBackSql, heldSql, leaseEnd, leaseExpired, purgeEndedJobs, renewSql, sweepSql, type Statement } from "./jobs.queries";

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
  /**
   * A column of the table's key besides `key` that the candidates also yield, matched too (the
   * whole key: a table keyed `(id, company_id)` then has its rows found by a unique probe, which the
   * planner does not trade for a scan).
   */
  matchAlso?: string;
  returning: string;
}

export interface EndSpec {
  /** What ending sets besides clearing the holder and lease, e.g. `status = 'QUEUED'`. */
  set?: string;
  /** What else a row must be, e.g. `j.status = 'PROCESSING'`. */
  where?: string;
  /** Parameters `set` and `where` use, numbered from $1. */
  params?: unknown[];
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

  /** Claims rows with the table's claim. */
  claim<T extends object>(params: unknown[]): Promise<T[]> {
    if (!this.claimStatement) throw new Error(`${this.table.table}: no claim was described for this table`);
    return queryRows<T>(this.sequelize, this.claimStatement, params);
  }

  /** Renews the leases of held rows; answers the rows (RETURNING `returning`) still ours. */
  async renew<T extends object = { id: string }>(held: Held, o: { leaseMs?: number; where?: string; returning?: string } = {}): Promise<T[]> {
    if (isEmpty(held)) return [];
    const s = renewSql(this.table, held, o);
    return queryRows<T>(this.sequelize, s.sql, s.params);
  }

  /** Hands held rows back (or ends them) as `e` says; answers how many were. */
  async giveBack(held: Held, e: EndSpec = {}): Promise<number> {
    if (isEmpty(held)) return 0;
    const s = giveBackSql(this.table, held, e);
    return (await queryRows(this.sequelize, s.sql, s.params)).length;
  }

  /** Ends rows whose lease is gone as `e` says; answers how many were. */
  async sweep(e: EndSpec): Promise<number> {
    const s = sweepSql(this.table, e);
    return (await queryRows(this.sequelize, s.sql, s.params)).length;
  }
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
