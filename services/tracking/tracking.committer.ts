/**
 * How ingestion reaches the database: group commit (lib/db/group-commit.ts: concurrent submissions
 * written together, one transaction for many requests) over `writeItems`, retried after a deadlock,
 * a serialization failure or a lost race.
 */
import type { Sequelize } from "sequelize";
import { inTransaction } from "../../lib/db/db";
import { RETRYABLE_SQLSTATES, retryOn } from "../../lib/jobs/jobs";
import type { WriteItem } from "./tracking.fold";
import { RetryWrite, writeItems, type WriteEffects } from "./tracking.writes";

/** Runs `writeItems` in a transaction, again (up to 5 times) after a deadlock, serialization failure or lost race. */
export function writeWithRetry(sequelize: Sequelize, items: WriteItem[]): Promise<WriteEffects> {
  return retryOn(RETRYABLE_SQLSTATES, 5, () => inTransaction(sequelize, (exec) => writeItems(exec, items)), {
    also: (err) => err instanceof RetryWrite,
    delayMs: (n) => 5 * n + Math.random() * 10,
  });
}
