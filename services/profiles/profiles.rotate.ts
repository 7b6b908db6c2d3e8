/**
 * Key rotation: re-seals every token not already under the current SECRETS_KEY, in batches of
 * `batchSize` rows (never the whole table in memory). Each batch runs in one transaction that holds
 * its rows `FOR UPDATE`: a concurrent PUT token either commits first (the row is read again as it
 * now is, and left alone when already under the current key) or waits for the batch, so a token
 * given meanwhile is never overwritten with an older one. Rows that cannot be opened (their key is
 * neither SECRETS_KEY nor SECRETS_KEY_PREVIOUS, or they do not authenticate) are left as they are
 * and named by id as they are met (`onFailure`), never by content, and never collected. A node not
 * yet rolled may write under the old key behind the walk: at the end the rows not under the current
 * key are counted again and walked again (up to `maxPasses` walks); what is still left is `remaining`.
 * The statements are in profiles.rotate.queries.ts.
 */
import type { Sequelize } from "sequelize";
import { SecretUnreadableError, type SecretBox } from "../../lib/security/secrets";
import { profileAad, toSealed } from "./profiles.models";
import { countNotUnderKey, countUnderKey, lockNotUnderKey, writeToken } from "./profiles.rotate.queries";

export interface RotateResult {
  rotated: number;
  alreadyCurrent: number;
  /** Rows no configured key opens, as the last walk found them (each also given to `onFailure`). */
  failed: number;
  /** Rows not under the current key when the rotation ended (the unreadable ones included): 0 once done. */
  remaining: number;
}

export interface RotateOptions {
  batchSize?: number;
  /** Walks over the rows not under the current key, at most (a row written under the old key behind a walk is caught by the next). */
  maxPasses?: number;
  /** Called once per unreadable row as it is met (ids and the reason, never a token); nothing of them is kept in memory. */
  onFailure?: (id: string, reason: string) => void;
  /** Called after each committed batch (progress). */
  onBatch?: (pass: number, rows: number) => Promise<void> | void;
}

const FIRST_UUID = "00000000-0000-0000-0000-000000000000";

/** One walk over the rows not under the current key, in id order; the counts of this walk. */
async function walk(
  sequelize: Sequelize,
  box: SecretBox,
  pass: number,
  opts: RotateOptions & { batchSize: number },
  report: (id: string, reason: string) => void,
) {
  const counts = { rotated: 0, failed: 0 };
  let after = FIRST_UUID;
  for (;;) {
    const seen = await sequelize.transaction(async (transaction) => {
      const rows = await lockNotUnderKey(sequelize, { keyId: box.currentKeyId, after, limit: opts.batchSize }, transaction);
      for (const row of rows) {
        const aad = profileAad(row.company_id, row.id);
        let plain: string;
        try {
          plain = box.open(toSealed(row), aad);
        } catch (err) {
          if (!(err instanceof SecretUnreadableError)) throw err;
          counts.failed++;
          report(row.id, err.message);
          continue;
        }
        const sealed = box.seal(plain, aad);
        await writeToken(sequelize, row.id, sealed, transaction);
        counts.rotated++;
      }
      return rows.length ? { last: rows[rows.length - 1]!.id, n: rows.length } : null;
    });
    // A batch may come back short when rows changed under its lock; only an empty one ends the walk.
    if (seen === null) return counts;
    after = seen.last;
    await opts.onBatch?.(pass, seen.n);
  }
}

/** How many failed ids are remembered so that a later walk does not report them again (beyond it, one may be reported twice). */
const REPORTED_CAP = 1000;

export async function rotateTokens(sequelize: Sequelize, box: SecretBox, opts: RotateOptions = {}): Promise<RotateResult> {
  const batchSize = opts.batchSize ?? 500;
  const maxPasses = opts.maxPasses ?? 3;
  const alreadyCurrent = await countUnderKey(sequelize, box.currentKeyId);
  const reported = new Set<string>();
  const report = (id: string, reason: string) => {
    if (reported.has(id)) return;
    if (reported.size < REPORTED_CAP) reported.add(id);
    opts.onFailure?.(id, reason);
  };
  const result: RotateResult = { rotated: 0, alreadyCurrent, failed: 0, remaining: 0 };
  for (let pass = 1; ; pass++) {
    const counts = await walk(sequelize, box, pass, { ...opts, batchSize }, report);
    result.rotated += counts.rotated;
    result.failed = counts.failed;
    result.remaining = await countNotUnderKey(sequelize, box.currentKeyId);
    // Done when every row left behind is one this walk could not open; else rows were written under an old key behind it.
    if (result.remaining <= counts.failed || pass >= maxPasses) return result;
  }
}
