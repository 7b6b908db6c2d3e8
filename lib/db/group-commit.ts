/**
 * Group commit: concurrent submissions written together, one transaction for many requests, which is
 * what lets many small posts go past the cost of one commit each. Used by tracking's ingress
 * (registrations, receipts, reads) and by the inbox (inbound messages).
 *
 * - No fixed wait: a submission starts a transaction at once while fewer than `maxConcurrent` are in
 *   flight; otherwise it queues, and the next free slot takes everything queued (within the bounds)
 *   as one group. An idle node answers a lone call after one transaction; a busy one gathers what
 *   arrived while the previous commit ran.
 * - Bounded groups: a group takes further submissions only while its items stay within `maxItems`
 *   and its estimated bytes within `maxBytes` (a submission larger than either goes alone).
 * - Each submission is atomic: a group commits all its submissions or none, and a submission is
 *   never split. Each submission's promise settles once its group committed (or for good failed).
 * - A failure is isolated: when a group's write fails, the group is halved and each half written
 *   again (one after the other), down to the submission that fails, which alone gets the error; the
 *   others commit. One bad submission among n costs about 2 log2(n) extra transactions, not n.
 *   An error that says nothing of the data (the database unreachable, the pool exhausted, the server
 *   shutting down) fails the whole group at once instead: writing it again piece by piece would only
 *   multiply the wait.
 */
import { sqlstateOf } from "../jobs/jobs";

export interface GroupCommitOptions<T> {
  /** Groups in flight at once (each holds one database connection). */
  maxConcurrent?: number;
  /** The most items a group gathers (one submission above it still goes, alone). */
  maxItems?: number;
  /** The most bytes (as `bytes` estimates them) a group gathers (one submission above it still goes, alone). */
  maxBytes?: number;
  /** A submission's item count (1 by default). */
  items?: (input: T) => number;
  /** A submission's size in bytes, estimated (0 by default: only `maxItems` bounds a group). */
  bytes?: (input: T) => number;
  /** Whether a failed group is halved and written again; by default, unless {@link isInfrastructureError}. */
  isolate?: (err: unknown) => boolean;
}

/** What a committer did since it was made (for metrics and tests). */
export interface GroupCommitStats {
  /** Transactions committed. */
  groups: number;
  /** Submissions committed. */
  committed: number;
  /** Submissions failed. */
  failed: number;
  /** The most submissions one committed group held. */
  largest: number;
  /** Failed groups halved to isolate a failing submission. */
  splits: number;
}

interface Entry<T, R> {
  input: T;
  items: number;
  bytes: number;
  resolve: (r: R) => void;
  reject: (e: unknown) => void;
}

/**
 * An error about the way to the database rather than the data: a connection refused, reset or timed
 * out, the pool exhausted, the server shutting down or out of resources (SQLSTATE classes 08, 53,
 * 57, 58).
 */
export function isInfrastructureError(err: unknown): boolean {
  const state = sqlstateOf(err);
  if (state !== undefined) return /^(08|53|57|58)/.test(state);
  type Failure = { name?: unknown; code?: unknown; message?: unknown };
  const e = err as (Failure & { original?: Failure }) | null | undefined;
  if (typeof e?.name === "string" && /^Sequelize(Connection|HostNotFound|HostNotReachable|AccessDenied|InvalidConnection)/.test(e.name)) return true;
  // Sequelize wraps the driver's error of a statement (a socket reset mid-query) and keeps it as `original`.
  for (const f of [e, e?.original]) {
    if (typeof f?.code === "string" && /^E(CONN|PIPE|TIMEDOUT|HOSTUNREACH|NETUNREACH|AI_AGAIN|NOTFOUND)/.test(f.code)) return true;
    if (
      typeof f?.message === "string" &&
      /^Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error/.test(f.message)
    )
      return true;
  }
  return false;
}

/**
 * Writes submissions in groups through `write`, which gets the inputs of one group (in submission
 * order) and, in one transaction, writes them all or none; it answers one result per input, in the
 * same order, once committed (its after-commit work, such as announcements, done).
 */
export class GroupCommitter<T, R = void> {
  private queue: Entry<T, R>[] = [];
  private running = 0;
  private readonly maxConcurrent: number;
  private readonly maxItems: number;
  private readonly maxBytes: number;
  private readonly itemsOf: (input: T) => number;
  private readonly bytesOf: (input: T) => number;
  private readonly isolate: (err: unknown) => boolean;
  readonly stats: GroupCommitStats = { groups: 0, committed: 0, failed: 0, largest: 0, splits: 0 };

  constructor(
    private readonly write: (inputs: T[]) => Promise<R[]>,
    o: GroupCommitOptions<T> = {},
  ) {
    this.maxConcurrent = o.maxConcurrent ?? 2;
    this.maxItems = o.maxItems ?? 2000;
    this.maxBytes = o.maxBytes ?? Infinity;
    this.itemsOf = o.items ?? (() => 1);
    this.bytesOf = o.bytes ?? (() => 0);
    this.isolate = o.isolate ?? ((err) => !isInfrastructureError(err));
  }

  /** Writes `input` with whatever else is queued; settles once committed (or failed). */
  submit(input: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.queue.push({ input, items: this.itemsOf(input), bytes: this.bytesOf(input), resolve, reject });
      this.pump();
    });
  }

  /** Submissions waiting for a transaction. */
  get pending(): number {
    return this.queue.length;
  }

  /** Groups being written now. */
  get inFlight(): number {
    return this.running;
  }

  private pump(): void {
    while (this.running < this.maxConcurrent && this.queue.length > 0) {
      const group = [this.queue.shift()!];
      let items = group[0]!.items;
      let bytes = group[0]!.bytes;
      while (this.queue.length > 0 && items + this.queue[0]!.items <= this.maxItems && bytes + this.queue[0]!.bytes <= this.maxBytes) {
        const next = this.queue.shift()!;
        items += next.items;
        bytes += next.bytes;
        group.push(next);
      }
      this.running++;
      void this.flush(group).finally(() => {
        this.running--;
        this.pump();
      });
    }
  }

  /** Writes a group; on failure, its halves one after the other, down to the failing submissions. */
  private async flush(group: Entry<T, R>[]): Promise<void> {
    let results: R[];
    try {
      results = await this.write(group.map((g) => g.input));
    } catch (err) {
      if (group.length === 1 || !this.isolate(err)) {
        this.stats.failed += group.length;
        for (const g of group) g.reject(err);
        return;
      }
      this.stats.splits++;
      const half = Math.ceil(group.length / 2);
      await this.flush(group.slice(0, half));
      await this.flush(group.slice(half));
      return;
    }
    this.stats.groups++;
    this.stats.committed += group.length;
    this.stats.largest = Math.max(this.stats.largest, group.length);
    group.forEach((g, i) => g.resolve(results[i]!));
  }
}
