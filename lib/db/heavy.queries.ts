/**
 * The SQL of heavy operations (lib/db/heavy.ts): the statement limit of a heavy transaction and the
 * account's heavy-operation slots, PostgreSQL advisory locks held until the transaction ends.
 */
import { QueryTypes, type Sequelize, type Transaction } from "sequelize";
import type { Exec } from "./db";

/** Sets `statement_timeout` to `ms` (whole milliseconds, as text) for the rest of the transaction `exec` runs in. */
export async function setLocalStatementTimeout(exec: Exec, ms: string): Promise<void> {
  await exec(`SELECT set_config('statement_timeout', $1, true)`, [ms]);
}

/** Sets `statement_timeout` to `ms` (whole milliseconds, as text) for the rest of `transaction`. */
export async function setTransactionStatementTimeout(sequelize: Sequelize, ms: string, transaction: Transaction): Promise<void> {
  await sequelize.query(`SELECT set_config('statement_timeout', :ms, true)`, {
    replacements: { ms },
    type: QueryTypes.SELECT,
    transaction,
  });
}

/**
 * Takes the account's heavy-operation slot `slot` (a transaction-level advisory lock on the account
 * and the slot's number, released when `transaction` ends) when no other transaction holds it; true
 * when taken.
 */
export async function tryHeavySlot(sequelize: Sequelize, companyId: string, slot: string, transaction: Transaction): Promise<boolean> {
  const [row] = await sequelize.query<{ ok: boolean }>(`SELECT pg_try_advisory_xact_lock(hashtext('pgw-heavy:' || :companyId || ':' || :slot)) AS ok`, {
    replacements: { companyId, slot },
    type: QueryTypes.SELECT,
    transaction,
  });
  return row?.ok === true;
}
