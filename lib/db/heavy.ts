/**
 * Heavy operations (a statement over every contact of an account, a campaign's preview or
 * statistics, the message history, a search) hold a database connection for as long as they run.
 * So that one account cannot take a node's pool, each first passes this node's gate (`HeavyGate`):
 * at most HEAVY_OPS_PER_ACCOUNT of one account at once and HEAVY_OPS_PER_NODE in all, the rest
 * waiting in their account's own queue (at most HEAVY_QUEUE_PER_ACCOUNT, served round-robin across
 * accounts, each for at most HEAVY_QUEUE_WAIT_MS) and refused past it with 429 and `Retry-After`,
 * before they ask the pool for a connection; so an interactive request always finds one. Then
 * an operation that writes over the whole account takes one of the account's PostgreSQL advisory
 * locks (`withHeavySlot`: the cap then holds across every node, and is released with the
 * transaction whatever happens to the node). Inside, `statement_timeout` is the smaller of the time
 * left to the call and the limit of the operation's class (`HEAVY_STATEMENT_TIMEOUT_MS`), so a call
 * that timed out also stops its SQL. (On embedded PGlite one transaction runs at a time anyway: the
 * gate is what keeps one account's reads from queueing everyone else's behind them.) The statements
 * (the statement limit, the advisory locks) are in heavy.queries.ts.
 */
import type { Context } from "moleculer";
import type { Sequelize, Transaction } from "sequelize";
import { execOf, inTransaction, type Exec } from "./db";
import { setLocalStatementTimeout, setTransactionStatementTimeout, tryHeavySlot } from "./heavy.queries";
import { ApiError } from "../errors";

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

/** How a node shares its heavy-operation slots (lib/config.ts names the variables). */
export interface HeavyLimits {
  /** HEAVY_OPS_PER_ACCOUNT: one account's heavy operations running at once on this node. */
  perAccount: number;
  /** HEAVY_OPS_PER_NODE: every account's together (a part of the node's database pool). */
  perNode: number;
  /** HEAVY_QUEUE_PER_ACCOUNT: how many of one account's may wait; one more is a 429 at once. */
  queuePerAccount: number;
  /** HEAVY_QUEUE_WAIT_MS: how long one may wait for a slot before its 429. */
  queueWaitMs: number;
  /**
   * Embedded PGlite: one session serves every connection in turn, and holds it for a transaction's
   * whole length. Heavy reads then run one at a time on the node and statement by statement (no
   * transaction), so another account's request waits at most for one statement, not for a queue.
   */
  oneSession: boolean;
  /** HEAVY_STATEMENT_TIMEOUT_MS: what a heavy read's statements may take at most (less when its call has less left). */
  statementTimeoutMs: number;
}

interface Waiter {
  companyId: string;
  resolve(release: () => void): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

/**
 * A node's heavy-operation slots, shared fairly: per account at most `perAccount` running and
 * `queuePerAccount` waiting (FIFO in the account); a freed slot goes to the next account in turn
 * (round-robin over the accounts that wait), so a second account's first operation never waits
 * behind the first account's queue. Memory is bounded by the waiters themselves (an account with
 * nothing running or waiting holds no entry).
 */
export class HeavyGate {
  private running = 0;
  private readonly active = new Map<string, number>();
  /** Accounts with waiters, in turn order; each with its own FIFO. */
  private readonly queues = new Map<string, Waiter[]>();

  constructor(readonly limits: HeavyLimits) {}

  /** Waits for a slot of `companyId`; answers the function that gives it back (call it once). */
  enter(companyId: string): Promise<() => void> {
    if (this.free(companyId) && !this.queues.has(companyId)) return Promise.resolve(this.take(companyId));
    const queue = this.queues.get(companyId);
    if ((queue?.length ?? 0) >= this.limits.queuePerAccount || this.limits.queueWaitMs <= 0) return Promise.reject(heavyBusy());
    return new Promise((resolve, reject) => {
      const w: Waiter = {
        companyId,
        resolve,
        reject,
        timer: setTimeout(() => this.drop(w), this.limits.queueWaitMs),
      };
      if (queue) queue.push(w);
      else this.queues.set(companyId, [w]);
    });
  }

  /** Runs `fn` in a slot of `companyId` (see `enter`). */
  async run<T>(companyId: string, fn: () => Promise<T>): Promise<T> {
    const release = await this.enter(companyId);
    try {
      return await fn();
    } finally {
      release();
    }
  }

  /** What an operator (and a test) reads: running in all, and one account's running and waiting. */
  usage(companyId?: string): { running: number; account: number; waiting: number } {
    return {
      running: this.running,
      account: companyId ? (this.active.get(companyId) ?? 0) : 0,
      waiting: companyId ? (this.queues.get(companyId)?.length ?? 0) : 0,
    };
  }

  private free(companyId: string): boolean {
    return this.running < this.limits.perNode && (this.active.get(companyId) ?? 0) < this.limits.perAccount;
  }

  private take(companyId: string): () => void {
    this.running++;
    this.active.set(companyId, (this.active.get(companyId) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.running--;
      const n = (this.active.get(companyId) ?? 1) - 1;
      if (n > 0) this.active.set(companyId, n);
      else this.active.delete(companyId);
      this.next();
    };
  }

  /** Hands freed slots to waiting accounts in turn (an account served goes to the back of the turn). */
  private next(): void {
    for (let turns = this.queues.size; turns > 0 && this.running < this.limits.perNode; turns--) {
      const [companyId, queue] = this.queues.entries().next().value as [string, Waiter[]];
      this.queues.delete(companyId);
      if ((this.active.get(companyId) ?? 0) < this.limits.perAccount) {
        const w = queue.shift()!;
        clearTimeout(w.timer);
        w.resolve(this.take(companyId));
      }
      if (queue.length) this.queues.set(companyId, queue);
    }
  }

  private drop(w: Waiter): void {
    const queue = this.queues.get(w.companyId);
    const at = queue?.indexOf(w) ?? -1;
    if (at < 0) return;
    queue!.splice(at, 1);
    if (!queue!.length) this.queues.delete(w.companyId);
    w.reject(heavyBusy());
  }
}

const gates = new WeakMap<object, HeavyGate>();

/** lib/config.ts's HEAVY_* settings. */
export interface HeavyConfig {
  heavyOpsPerAccount: number;
  heavyOpsPerNode: number;
  heavyQueuePerAccount: number;
  heavyQueueWaitMs: number;
  heavyStatementTimeoutMs: number;
}

/**
 * The node's one gate for a database (every service of a process shares its pool, so its gate),
 * with the limits of `config`; embedded PGlite (one session): one heavy operation at a time.
 */
export function heavyGateOf(db: { sequelize: Sequelize; embedded: boolean }, config: HeavyConfig): HeavyGate {
  let gate = gates.get(db.sequelize);
  if (!gate) {
    gate = new HeavyGate({
      perAccount: db.embedded ? 1 : config.heavyOpsPerAccount,
      perNode: db.embedded ? 1 : config.heavyOpsPerNode,
      queuePerAccount: config.heavyQueuePerAccount,
      queueWaitMs: config.heavyQueueWaitMs,
      oneSession: db.embedded,
      statementTimeoutMs: config.heavyStatementTimeoutMs,
    });
    gates.set(db.sequelize, gate);
  }
  return gate;
}

/**
 * Runs a heavy read of an account through the node's gate, in one transaction (`exec` runs its
 * statements) whose statements stop after the gate's statement limit, or the time left to the call
 * when that is less (taken once the slot is held: the wait for it is not the call's to spend). The
 * account is the partner's (`ctx.meta`), or `companyId` for an internal action that names it in
 * its params (another service asks on a partner's behalf).
 */
export function withHeavyRead<T>(
  sequelize: Sequelize,
  gate: HeavyGate,
  ctx: Context<unknown, { companyId?: string }>,
  fn: (exec: Exec) => Promise<T>,
  companyId: string | undefined = ctx.meta.companyId,
): Promise<T> {
  if (companyId === undefined) throw new Error("a heavy read needs its account");
  if (gate.limits.oneSession) return gate.run(companyId, () => fn(execOf(sequelize)));
  return gate.run(companyId, () =>
    inTransaction(sequelize, async (exec) => {
      const ms = heavyTimeoutMs(ctx as Context, gate.limits.statementTimeoutMs);
      if (ms > 0) await setLocalStatementTimeout(exec, String(Math.floor(ms)));
      return fn(exec);
    }),
  );
}

/** The statement limit of a heavy call: the time left to it, and at most its class's limit. */
export const heavyTimeoutMs = (ctx: Context, classLimitMs: number): number => {
  const left = statementBudgetMs(ctx);
  return left > 0 && classLimitMs > 0 ? Math.min(left, classLimitMs) : Math.max(left, classLimitMs);
};

export interface HeavyOptions {
  companyId: string;
  /** How many heavy operations the account may run at once (HEAVY_OPS_PER_ACCOUNT). */
  slots: number;
  /** statement_timeout for the transaction, in ms (statementBudgetMs); 0 leaves the server's. */
  statementTimeoutMs: number;
  /** The node's gate, passed before the pool is asked for a connection (absent: only the advisory lock). */
  gate?: HeavyGate;
}

/**
 * Runs `fn` in a transaction holding one of the account's heavy-operation slots, with its statements
 * limited to `statementTimeoutMs`; throws the 429 of `heavyBusy` when every slot is taken.
 */
export function withHeavySlot<T>(sequelize: Sequelize, o: HeavyOptions, fn: (transaction: Transaction) => Promise<T>): Promise<T> {
  if (o.gate) {
    const { gate, ...rest } = o;
    return gate.run(o.companyId, () => withHeavySlot(sequelize, rest, fn));
  }
  return sequelize.transaction(async (transaction) => {
    let held = false;
    for (let slot = 1; slot <= o.slots && !held; slot++) {
      held = await tryHeavySlot(sequelize, o.companyId, String(slot), transaction);
    }
    if (!held) throw heavyBusy();
    if (o.statementTimeoutMs > 0) {
      await setTransactionStatementTimeout(sequelize, String(Math.floor(o.statementTimeoutMs)), transaction);
    }
    return fn(transaction);
  });
}
