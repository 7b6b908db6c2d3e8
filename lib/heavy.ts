/**
 * Heavy operations (a statement over every contact of an account) hold a database connection for as
 * long as they run. So that one account cannot take the pool, each runs in a slot: one of
 * HEAVY_OPS_PER_ACCOUNT PostgreSQL advisory locks of the account, taken for the operation's
 * transaction. The lock lives in PostgreSQL, so the cap holds across every node, and it is released
 * with the transaction, whatever happens to the node. Inside the slot `statement_timeout` is the time
 * left to the call, so a call that timed out also stops its SQL. (On embedded PGlite one transaction
 * runs at a time anyway: a slot is always free there.)
 */
import type { Context } from "moleculer";
import { QueryTypes, type Sequelize, type Transaction } from "sequelize";
import { ApiError } from "./errors";

/** Seconds a refused heavy operation is told to wait: the ones running end, or time out, soon. */
export const HEAVY_RETRY_AFTER_S = 5;

/** The 429 when every slot of the account is taken. */
export const heavyBusy = () =>
  new ApiError("RATE_LIMITED", "Too many heavy operations of this account are running; retry shortly.", { retryAfter: HEAVY_RETRY_AFTER_S });

/**
 * Milliseconds an action's SQL may run: the call's timeout (set by Moleculer from the caller's
 * options, else the action's `timeout`, else the broker's requestTimeout) less the time already spent
 * and a margin, so the statement is cancelled just before the caller gives up. 0: no limit.
 */
export function statementBudgetMs(ctx: Context): number {
  const timeout = Number(ctx.options?.timeout ?? (ctx.action as { timeout?: number } | undefined)?.timeout ?? ctx.broker?.options.requestTimeout ?? 0);
  if (!(timeout > 0)) return 0;
  const start = (ctx as { startHrTime?: [number, number] }).startHrTime;
  const spent = start ? (([s, ns]) => s * 1000 + ns / 1e6)(process.hrtime(start)) : 0;
  const margin = Math.min(1000, Math.max(50, timeout * 0.05));
  return Math.max(1, Math.floor(timeout - spent - margin));
}

export interface HeavyOptions {
  companyId: string;
  /** How many heavy operations the account may run at once (HEAVY_OPS_PER_ACCOUNT). */
  slots: number;
  /** statement_timeout for the transaction, in ms (statementBudgetMs); 0 leaves the server's. */
  statementTimeoutMs: number;
}

/**
 * Runs `fn` in a transaction holding one of the account's heavy-operation slots, with its statements
 * limited to `statementTimeoutMs`; throws the 429 of `heavyBusy` when every slot is taken.
 */
export function withHeavySlot<T>(sequelize: Sequelize, o: HeavyOptions, fn: (transaction: Transaction) => Promise<T>): Promise<T> {
  return sequelize.transaction(async (transaction) => {
    let held = false;
    for (let slot = 1; slot <= o.slots && !held; slot++) {
      const [row] = await sequelize.query<{ ok: boolean }>(`SELECT pg_try_advisory_xact_lock(hashtext('pgw-heavy:' || :companyId || ':' || :slot)) AS ok`, {
        replacements: { companyId: o.companyId, slot: String(slot) },
        type: QueryTypes.SELECT,
        transaction,
      });
      held = row?.ok === true;
    }
    if (!held) throw heavyBusy();
    if (o.statementTimeoutMs > 0) {
      await sequelize.query(`SELECT set_config('statement_timeout', :ms, true)`, {
        replacements: { ms: String(Math.floor(o.statementTimeoutMs)) },
        type: QueryTypes.SELECT,
        transaction,
      });
    }
    return fn(transaction);
  });
}
