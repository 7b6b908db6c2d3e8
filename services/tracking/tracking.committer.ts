/**
 * How ingestion reaches the database: group commit (concurrent submissions written together, one
 * transaction for many requests) over `writeItems`, retried after a deadlock, a serialization
 * failure or a lost race.
 */
import type { Sequelize } from "sequelize";
import { rawTransaction } from "../../lib/db";
import { RETRYABLE_SQLSTATES, retryOn } from "../../lib/jobs";
import type { IngestItem } from "./tracking.fold";
import { RetryWrite, writeItems, type WriteEffects } from "./tracking.writes";

/** Runs `writeItems` in a transaction, again (up to 5 times) after a deadlock, serialization failure or lost race. */
export function writeWithRetry(sequelize: Sequelize, items: IngestItem[]): Promise<WriteEffects> {
  return retryOn(RETRYABLE_SQLSTATES, 5, () => rawTransaction(sequelize, (exec) => writeItems(exec, items)), {
    also: (err) => err instanceof RetryWrite,
    delayMs: (n) => 5 * n + Math.random() * 10,
  });
}

/**
 * Group commit: concurrent submissions are written together, one transaction for many requests,
 * which is what lets single-object posts go past the cost of one commit each. A submission's
 * promise settles once its rows are committed. If a group fails, its submissions are written one
 * by one, so one bad submission never fails another.
 */
export class GroupCommitter {
  private queue: Array<{ items: IngestItem[]; resolve: () => void; reject: (e: unknown) => void }> = [];
  private running = 0;

  constructor(
    private readonly write: (items: IngestItem[]) => Promise<void>,
    private readonly maxConcurrent = 2,
    private readonly maxItems = 2000,
  ) {}

  submit(items: IngestItem[]): Promise<void> {
    return new Promise((resolve, reject) => {
      this.queue.push({ items, resolve, reject });
      this.pump();
    });
  }

  /** Submissions waiting for a transaction (for metrics and tests). */
  get pending(): number {
    return this.queue.length;
  }

  private pump(): void {
    while (this.running < this.maxConcurrent && this.queue.length > 0) {
      const group = [this.queue.shift()!];
      let n = group[0]!.items.length;
      while (this.queue.length > 0 && n + this.queue[0]!.items.length <= this.maxItems) {
        const next = this.queue.shift()!;
        n += next.items.length;
        group.push(next);
      }
      this.running++;
      void this.flush(group).finally(() => {
        this.running--;
        this.pump();
      });
    }
  }

  private async flush(group: Array<{ items: IngestItem[]; resolve: () => void; reject: (e: unknown) => void }>): Promise<void> {
    try {
      await this.write(group.length === 1 ? group[0]!.items : group.flatMap((g) => g.items));
      for (const g of group) g.resolve();
    } catch (err) {
      if (group.length === 1) return group[0]!.reject(err);
      for (const g of group) {
        try {
          await this.write(g.items);
          g.resolve();
        } catch (e) {
          g.reject(e);
        }
      }
    }
  }
}
