/**
 * How the import runner (contacts.runner.ts) writes one batch the worker sent: one transaction that
 * locks the rows holding the batch's phone numbers and emails, inserts or updates the contacts, adds
 * them to the list, records opt-outs and the import's counters, so that a row is written whole or
 * not at all and the counters say exactly what is written. The statements are in
 * contacts.imports.queries.ts (opt-outs: contacts.optouts.queries.ts).
 */
import { randomUUID } from "node:crypto";
import type { Sequelize, Transaction } from "sequelize";
import type { Reservation } from "../../lib/jobs/disk-budget";
import { isRetryable, retryOn, RETRYABLE_SQLSTATES } from "../../lib/jobs/jobs";
import type { Channel } from "../../lib/messaging/channels";
import type { ImportRow, RowError } from "./contacts.import-rows";
import type { CustomFieldType } from "./contacts.contract";
import {
  addImportedMembers,
  insertImportedContacts,
  lockHolders,
  lockImportStatus,
  recordBatch,
  shareDeclaredFields,
  shareLiveList,
  updateImportedContacts,
  type ImportedContact,
} from "./contacts.imports.queries";
import { applyChanges, importedOptOuts } from "./contacts.optouts.queries";

const MAX_KEPT_ERRORS = 1000;
const WRITE_ATTEMPTS = 3;

/** The import cannot go on (its list or a custom field it writes was deleted, the node stops). */
export class ImportStopped extends Error {}
/** The batch met a concurrent change (a unique phone or email taken meanwhile): write it again. */
class RetryBatch extends Error {}

export interface Job {
  id: string;
  companyId: string;
  listId: number | null;
  /** The declarations the worker checks cells against (as they were at upload). */
  customTypes: Map<string, CustomFieldType>;
  /** Bytes of the file this node keeps for the import. */
  size: number;
  /** The room the file holds in the node's import budget, given back once the file is removed. */
  reservation?: Reservation;
  keptErrors: number;
}

/** One contact's state as the batch leaves it. */
interface Target {
  id: string;
  isNew: boolean;
  phone: string | null;
  email: string | null;
  firstName?: string;
  lastName?: string;
  gender?: string;
  isTest?: boolean;
  customFields?: Record<string, unknown>;
}

/** Errors a batch meets only because of concurrent writers: a unique phone or email taken, a deadlock, a serialization failure. */
const isConcurrencyError = (err: unknown) => err instanceof RetryBatch || isRetryable(err, RETRYABLE_SQLSTATES);

/** One batch, whole or not at all: retried on a concurrent change, then row by row. */
export async function writeBatch(sequelize: Sequelize, job: Job, rows: ImportRow[], errors: RowError[], totalRows: number): Promise<void> {
  try {
    await retryOn(RETRYABLE_SQLSTATES, WRITE_ATTEMPTS, () => sequelize.transaction((t) => writeOnce(sequelize, job, rows, errors, totalRows, t)), {
      also: isConcurrencyError,
    });
    return;
  } catch (err) {
    if (!isConcurrencyError(err)) throw err;
  }
  if (rows.length <= 1) {
    const failed = rows.map((r) => ({
      row: r.row,
      message: "the row conflicts with a concurrent change to the same phone number or email; import it again",
    }));
    await sequelize.transaction((t) => writeOnce(sequelize, job, [], [...errors, ...failed], totalRows, t));
    return;
  }
  // Rows of one batch that collide with each other (two contacts swapping numbers): one at a time.
  await writeBatch(sequelize, job, [], errors, totalRows);
  for (const r of rows) await writeBatch(sequelize, job, [r], [], totalRows);
}

async function writeOnce(
  sequelize: Sequelize,
  job: Job,
  rows: ImportRow[],
  workerErrors: RowError[],
  totalRows: number,
  transaction: Transaction,
): Promise<void> {
  const { companyId } = job;
  // An import ended meanwhile (swept as stale after a long pause, say) writes nothing more.
  if ((await lockImportStatus(sequelize, job.id, transaction)) !== "PROCESSING")
    throw new ImportStopped("The import was ended while it ran; rows counted as created or updated were written.");
  if (job.listId !== null) {
    if (!(await shareLiveList(sequelize, companyId, job.listId, transaction)))
      throw new ImportStopped(`The contact list ${job.listId} was deleted during the import; rows counted as created or updated were written.`);
  }
  const usedKeys = [...new Set(rows.flatMap((r) => (r.customFields ? Object.keys(r.customFields) : [])))];
  if (usedKeys.length) {
    const declared = await shareDeclaredFields(sequelize, companyId, usedKeys, transaction);
    // Removed, or removed and declared again with another type: the cells were checked against the old one.
    const gone = usedKeys.filter((k) => !declared.some((d) => d.key === k && d.type === job.customTypes.get(k)));
    if (gone.length)
      throw new ImportStopped(`The custom field ${gone.join(", ")} was removed during the import; rows counted as created or updated were written.`);
  }

  // Who holds the batch's phone numbers and emails now (locked until the batch commits).
  const phones = [...new Set(rows.map((r) => r.phone).filter((p): p is string => !!p))];
  const emails = [...new Set(rows.map((r) => r.email).filter((e): e is string => !!e))];
  const holders = rows.length ? await lockHolders(sequelize, companyId, phones, emails, transaction) : [];
  const phoneOwner = new Map<string, string>();
  const emailOwner = new Map<string, string>();
  const targets = new Map<string, Target>();
  for (const h of holders) {
    if (h.phone_number) phoneOwner.set(h.phone_number, h.id);
    if (h.email) emailOwner.set(h.email, h.id);
    targets.set(h.id, { id: h.id, isNew: false, phone: h.phone_number, email: h.email });
  }
  const errors = [...workerErrors];
  let created = 0;
  let updated = 0;
  const touched = new Set<string>();
  const optOuts: Array<{ phone: string; channels: Channel[] }> = [];
  for (const r of rows) {
    const byPhone = r.phone ? phoneOwner.get(r.phone) : undefined;
    const byEmail = r.email ? emailOwner.get(r.email) : undefined;
    if (byPhone && byEmail && byPhone !== byEmail) {
      errors.push({ row: r.row, message: `the phone number belongs to contact ${byPhone} and the email to contact ${byEmail}` });
      continue;
    }
    const number = r.phone ?? targets.get((byPhone ?? byEmail)!)?.phone;
    if (r.optedOut && !number) {
      errors.push({ row: r.row, message: "optedOut needs a phone number: neither the row nor the contact it matches has one" });
      continue;
    }
    if (r.optedOut) optOuts.push({ phone: number!, channels: r.optedOut });
    let target = targets.get((byPhone ?? byEmail)!);
    if (target) updated++;
    else {
      target = { id: randomUUID(), isNew: true, phone: null, email: null };
      targets.set(target.id, target);
      created++;
    }
    const t = target;
    if (r.phone && t.phone !== r.phone) {
      if (t.phone && phoneOwner.get(t.phone) === t.id) phoneOwner.delete(t.phone);
      t.phone = r.phone;
      phoneOwner.set(r.phone, t.id);
    }
    if (r.email && t.email !== r.email) {
      if (t.email && emailOwner.get(t.email) === t.id) emailOwner.delete(t.email);
      t.email = r.email;
      emailOwner.set(r.email, t.id);
    }
    if (r.firstName !== undefined) t.firstName = r.firstName;
    if (r.lastName !== undefined) t.lastName = r.lastName;
    if (r.gender !== undefined) t.gender = r.gender;
    if (r.isTest !== undefined) t.isTest = r.isTest;
    if (r.customFields) t.customFields = { ...t.customFields, ...r.customFields };
    touched.add(t.id);
  }

  const changed = [...touched].map((id) => targets.get(id)!);
  // Each batch crosses to PostgreSQL as one JSON text (serialised natively, parsed by the server):
  // far less garbage on this thread than binding one array per column; made only as the statement
  // is written (the queries bind it with jsonParam), so the large text is never held across the
  // wait for its answer.
  const rowsOf = (list: Target[]) => (): ImportedContact[] =>
    list.map((t) => ({
      id: t.id,
      first_name: t.firstName,
      last_name: t.lastName,
      gender: t.gender,
      phone: t.phone,
      email: t.email,
      custom_fields: t.customFields ?? {},
      is_test: t.isTest,
    }));
  const fresh = changed.filter((t) => t.isNew);
  if (fresh.length) {
    const inserted = await insertImportedContacts(sequelize, companyId, rowsOf(fresh), transaction);
    // A phone number or email taken by another writer since the lookup: read the holders again.
    if (inserted !== fresh.length) throw new RetryBatch();
  }
  const existing = changed.filter((t) => !t.isNew);
  if (existing.length) await updateImportedContacts(sequelize, companyId, rowsOf(existing), transaction);
  if (job.listId !== null && changed.length) {
    await addImportedMembers(sequelize, companyId, job.listId, () => changed.map((t) => t.id), transaction);
  }
  // Opt-outs belong to the number (contract section 7), set in the batch's transaction.
  await applyChanges(sequelize, transaction, importedOptOuts(companyId, optOuts));
  errors.sort((a, b) => a.row - b.row);
  const kept = errors.slice(0, Math.max(0, MAX_KEPT_ERRORS - job.keptErrors));
  await recordBatch(sequelize, job.id, { totalRows, created, updated, skipped: errors.length, errors: kept }, transaction);
  // Counted only once the transaction commits (a retried batch is counted once).
  transaction.afterCommit(() => {
    job.keptErrors += kept.length;
  });
}
