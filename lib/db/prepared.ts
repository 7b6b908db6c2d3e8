/**
 * A statement planned once per connection (a session's prepared statement, whose generic plan
 * PostgreSQL reuses), for reads over a table of hundreds of partitions that partition pruning cannot narrow:
 * the message history (issue 33). Planning such a statement costs more than running it (400 daily
 * partitions: about 45 ms of planning against 6 ms of execution for a first page, measured in
 * psql, docs/scaling.md), and an unnamed statement with bind parameters, what `pg` sends, is
 * planned on every call.
 *
 * Through PostgreSQL's own SQL (`PREPARE`, `EXECUTE`, `pg_prepared_statements`), so through
 * Sequelize's public query path: Sequelize has no named statements. `EXECUTE` takes no bind
 * parameters, so its arguments are literals written by `pg`'s escapeLiteral (lib/db/literals.ts).
 *
 * Which plan: PostgreSQL's own choice (`plan_cache_mode = auto`): five custom plans, then the
 * generic one whenever its cost is no worse than theirs with their planning counted, which over
 * hundreds of partitions it is; a generic plan that is worse (a value the plan depends on) is never
 * used. Values that shape the plan belong in the statement's text, not in a parameter: a LIMIT
 * given as a parameter is planned as if a tenth of the rows were wanted, which over 100 M rows is a
 * plan that reads them all (a page timed out at 100 M rows with `force_generic_plan` and LIMIT $n).
 *
 * Bounds: a generic plan over 400 partitions holds about 4 MB of the session's memory, so a
 * connection keeps at most PREPARED_PER_SESSION statements of a `family` (the oldest deallocated
 * first). Needs the statements of one transaction (one session) in `exec`: the check, the PREPARE
 * and the EXECUTE must meet the same session.
 */
import { createHash } from "node:crypto";
import type { Exec } from "./db";
import { sqlLiteral } from "./literals";

/** At most this many prepared statements of one family per session. */
export const PREPARED_PER_SESSION = 4;

/** A bind parameter's value and its SQL type (the cast written in the statement after `$n::`). */
export type Param = [value: unknown, cast: string];

/** The name of `sql`'s prepared statement in `family` (lower-case letters and `_`). */
export const preparedName = (family: string, sql: string) => `${family}_${createHash("sha256").update(sql).digest("hex").slice(0, 24)}`;

/**
 * Runs `sql` (placeholders `$1`..`$n`, each with its cast) with `params` as the session's prepared
 * statement of `family`: prepared on this session's first use.
 */
export async function runPrepared<T extends object>(exec: Exec, family: string, sql: string, params: readonly Param[]): Promise<T[]> {
  if (!/^[a-z_]+$/.test(family)) throw new Error(`not a statement family: ${family}`);
  const name = preparedName(family, sql);
  const [state] = await exec<{ ready: boolean; oldest: string | null; n: number }>(
    `SELECT EXISTS (SELECT 1 FROM pg_prepared_statements WHERE name = $1) AS ready,
            (SELECT name FROM pg_prepared_statements WHERE starts_with(name, $2) ORDER BY prepare_time LIMIT 1) AS oldest,
            (SELECT count(*)::int FROM pg_prepared_statements WHERE starts_with(name, $2)) AS n`,
    [name, `${family}_`],
  );
  if (!state!.ready) {
    // Names are this module's (family checked above, a hex digest): safe to write as identifiers.
    if (state!.n >= PREPARED_PER_SESSION && state!.oldest && /^[a-z_]+_[0-9a-f]{24}$/.test(state!.oldest)) await exec(`DEALLOCATE ${state!.oldest}`);
    await exec(`PREPARE ${name} AS ${sql}`);
  }
  return exec<T>(`EXECUTE ${name}(${params.map(([v, cast]) => (v === null ? `NULL::${cast}` : sqlLiteral(v, cast))).join(", ")})`);
}
