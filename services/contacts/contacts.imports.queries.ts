/**
 * The contacts service's SQL for imports: the upload's row and the status read (contacts.imports.ts),
 * the runner's start, end, sweep and give-back of an import (contacts.runner.ts, through
 * lib/jobs/jobs.ts), and the statements that write one batch in its transaction
 * (contacts.runner-batch.ts): the rows locked, the contacts inserted or updated set-based from one
 * JSON parameter, the list's members and the import's counters. Opt-outs of a batch are
 * contacts.optouts.queries.ts's.
 */
import { QueryTypes, type Sequelize, type Transaction } from "sequelize";
import { jsonParam } from "../../lib/db/db";
import type { UploadedFile } from "../../lib/http/upload";
import type { EndSpec } from "../../lib/jobs/jobs";
import type { ImportDbRow } from "./contacts.models";

// --- the upload and the status read (contacts.imports.ts)

/** Whether the account has the list `listId`, not deleted. */
export async function importListExists(sequelize: Sequelize, companyId: string, listId: number): Promise<boolean> {
  const [list] = await sequelize.query(`SELECT id FROM contact_lists WHERE company_id = $1 AND id = $2 AND deleted_at IS NULL`, {
    bind: [companyId, listId],
    type: QueryTypes.SELECT,
  });
  return !!list;
}

/** A new import's row, QUEUED, held by the node `nodeId` that keeps its file. */
export async function insertImport(
  sequelize: Sequelize,
  v: { id: string; companyId: string; file: UploadedFile; listId: number | null; mapping: Record<string, string | null> | null; nodeId: string },
): Promise<void> {
  await sequelize.query(
    `INSERT INTO contact_imports (id, company_id, kind, file_name, file_size, file_sha256, list_id, mapping, node_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9)`,
    { bind: [v.id, v.companyId, v.file.kind, v.file.name, v.file.size, v.file.sha256, v.listId, v.mapping ? JSON.stringify(v.mapping) : null, v.nodeId] },
  );
}

/** One import of the account (`id` in lower case), or undefined. */
export async function findImport(sequelize: Sequelize, companyId: string, id: string): Promise<ImportDbRow | undefined> {
  const [row] = await sequelize.query<ImportDbRow>(
    `SELECT id, status, file_name, list_id, total_rows, created, updated, skipped, errors, failure, created_at, started_at, finished_at
       FROM contact_imports WHERE company_id = $1 AND id = $2`,
    { bind: [companyId, id], type: QueryTypes.SELECT },
  );
  return row;
}

// --- the runner (contacts.runner.ts)

/** A QUEUED import becomes PROCESSING (its worker started reading the file). */
export async function startImport(sequelize: Sequelize, id: string): Promise<void> {
  await sequelize.query(`UPDATE contact_imports SET status = 'PROCESSING', started_at = now(), heartbeat_at = now() WHERE id = $1 AND status = 'QUEUED'`, {
    bind: [id],
  });
}

/** Ends an import not ended yet: FAILED with `failure`, else COMPLETED; `totalRows` as the worker counted them. */
export async function endImport(sequelize: Sequelize, id: string, failure: string | null, totalRows: number): Promise<void> {
  await sequelize.query(
    `UPDATE contact_imports SET status = $2, failure = $3, finished_at = now(), total_rows = greatest(total_rows, $4),
            started_at = coalesce(started_at, now())
      WHERE id = $1 AND status IN ('QUEUED', 'PROCESSING')`,
    { bind: [id, failure ? "FAILED" : "COMPLETED", failure, totalRows] },
  );
}

/** What ending an import this node held (stopped, or left by its previous process) sets (`Jobs.giveBack`): FAILED with `reason`. */
export const importsEndedFailed = (reason: string): EndSpec => ({
  set: "status = 'FAILED', finished_at = now(), failure = $1",
  where: "i.status IN ('QUEUED', 'PROCESSING')",
  params: [reason],
});

/** What the sweep sets on an import whose node has not been heard of (`Jobs.sweep`). */
export const IMPORTS_SWEPT: EndSpec = {
  set: `status = 'FAILED', finished_at = now(),
        failure = 'The node running the import stopped before it ended; rows counted as created or updated were written. Upload the file again to import the rest (rows already imported are matched and updated).'`,
  where: "i.status IN ('QUEUED', 'PROCESSING')",
};

// --- one batch, in its transaction (contacts.runner-batch.ts)

const select = <T extends object>(sequelize: Sequelize, sql: string, bind: unknown[], transaction: Transaction) =>
  sequelize.query<T>(sql, { bind, type: QueryTypes.SELECT, transaction });

/** Runs a write; answers how many rows it changed. */
async function write(sequelize: Sequelize, sql: string, bind: unknown[], transaction: Transaction): Promise<number> {
  const [, meta] = await sequelize.query(sql, { bind, transaction });
  // Sequelize answers INSERT/UPDATE with the row count itself, other statements with pg's result.
  return typeof meta === "number" ? meta : ((meta as { rowCount?: number } | undefined)?.rowCount ?? 0);
}

/** The import's status, its row held (FOR UPDATE) until `transaction` ends; undefined when it is gone. */
export async function lockImportStatus(sequelize: Sequelize, id: string, transaction: Transaction): Promise<string | undefined> {
  const [own] = await select<{ status: string }>(sequelize, `SELECT status FROM contact_imports WHERE id = $1 FOR UPDATE`, [id], transaction);
  return own?.status;
}

/** Whether the account's list `listId` is live (not deleted), held (FOR SHARE) until `transaction` ends so a deletion waits. */
export async function shareLiveList(sequelize: Sequelize, companyId: string, listId: number, transaction: Transaction): Promise<boolean> {
  const list = await select(
    sequelize,
    `SELECT id FROM contact_lists WHERE company_id = $1 AND id = $2 AND deleted_at IS NULL FOR SHARE`,
    [companyId, listId],
    transaction,
  );
  return list.length > 0;
}

/** The account's declarations among `keys`, held (FOR SHARE) until `transaction` ends so a removal waits. */
export function shareDeclaredFields(
  sequelize: Sequelize,
  companyId: string,
  keys: string[],
  transaction: Transaction,
): Promise<Array<{ key: string; type: string }>> {
  return select<{ key: string; type: string }>(
    sequelize,
    `SELECT key, type FROM contact_custom_fields WHERE company_id = $1 AND key = ANY($2::text[]) FOR SHARE`,
    [companyId, keys],
    transaction,
  );
}

/** The account's contacts holding any of `phones` or `emails`, locked (FOR UPDATE, in id order) until `transaction` ends. */
export function lockHolders(
  sequelize: Sequelize,
  companyId: string,
  phones: string[],
  emails: string[],
  transaction: Transaction,
): Promise<Array<{ id: string; phone_number: string | null; email: string | null }>> {
  return select<{ id: string; phone_number: string | null; email: string | null }>(
    sequelize,
    `SELECT id, phone_number, email FROM contacts
      WHERE company_id = $1
        AND (phone_number = ANY (ARRAY(SELECT jsonb_array_elements_text($2::jsonb))) OR email = ANY (ARRAY(SELECT jsonb_array_elements_text($3::jsonb))))
      ORDER BY id FOR UPDATE`,
    [companyId, jsonParam(() => phones), jsonParam(() => emails)],
    transaction,
  );
}

/** A contact as a batch writes it (a field left undefined is not in the file: an update keeps the contact's). */
export interface ImportedContact {
  id: string;
  first_name?: string;
  last_name?: string;
  gender?: string;
  phone: string | null;
  email: string | null;
  custom_fields: Record<string, unknown>;
  is_test?: boolean;
}

// The batch's contacts as rows of its one JSON parameter ($2).
const RECORDS = `jsonb_to_recordset($2::jsonb) AS u(id uuid, first_name text, last_name text, gender text, phone text, email text, custom_fields jsonb, is_test boolean)`;

/**
 * Inserts new contacts (ON CONFLICT DO NOTHING); answers how many were (fewer: a phone number or
 * email was taken meanwhile). `rows` is called only as the statement is written (jsonParam), so the
 * large JSON text is never held across the wait for the answer.
 */
export function insertImportedContacts(sequelize: Sequelize, companyId: string, rows: () => ImportedContact[], transaction: Transaction): Promise<number> {
  return write(
    sequelize,
    `INSERT INTO contacts (id, company_id, first_name, last_name, gender, phone_number, email, custom_fields, is_test, communication_supported)
     SELECT u.id, $1, u.first_name, u.last_name, u.gender, u.phone, u.email, u.custom_fields, coalesce(u.is_test, false),
            CASE WHEN u.phone IS NULL THEN '{}'::text[] ELSE ARRAY['SMS'] END
       FROM ${RECORDS}
     ON CONFLICT DO NOTHING`,
    [companyId, jsonParam(rows)],
    transaction,
  );
}

/** Updates existing contacts with what the file gives (empty cells keep the contact's values); `rows` as for insertImportedContacts. */
export async function updateImportedContacts(sequelize: Sequelize, companyId: string, rows: () => ImportedContact[], transaction: Transaction): Promise<void> {
  await write(
    sequelize,
    `UPDATE contacts c SET
        first_name = coalesce(u.first_name, c.first_name),
        last_name = coalesce(u.last_name, c.last_name),
        gender = coalesce(u.gender, c.gender),
        communication_supported = CASE
          WHEN u.phone IS NULL THEN '{}'::text[]
          WHEN c.phone_number IS DISTINCT FROM u.phone THEN ARRAY['SMS']
          ELSE c.communication_supported END,
        communication_refused = CASE WHEN c.phone_number IS DISTINCT FROM u.phone THEN '{}'::text[] ELSE c.communication_refused END,
        phone_number = u.phone,
        email = u.email,
        custom_fields = c.custom_fields || u.custom_fields,
        is_test = coalesce(u.is_test, c.is_test),
        updated_at = now()
       FROM ${RECORDS}
      WHERE c.company_id = $1 AND c.id = u.id`,
    [companyId, jsonParam(rows)],
    transaction,
  );
}

/** Adds the contacts `contactIds` (called as the statement is written) to the list; an existing association is kept. */
export async function addImportedMembers(
  sequelize: Sequelize,
  companyId: string,
  listId: number,
  contactIds: () => string[],
  transaction: Transaction,
): Promise<void> {
  await write(
    sequelize,
    `INSERT INTO contact_list_members (company_id, list_id, contact_id)
     SELECT $1, $2, (jsonb_array_elements_text($3::jsonb))::uuid ON CONFLICT (company_id, list_id, contact_id) DO NOTHING`,
    [companyId, listId, jsonParam(contactIds)],
    transaction,
  );
}

/** Adds a batch's counters and kept row errors to its import (and hears from it: heartbeat_at). */
export async function recordBatch(
  sequelize: Sequelize,
  id: string,
  c: { totalRows: number; created: number; updated: number; skipped: number; errors: Array<{ row: number; message: string }> },
  transaction: Transaction,
): Promise<void> {
  await write(
    sequelize,
    `UPDATE contact_imports SET total_rows = greatest(total_rows, $2), created = created + $3, updated = updated + $4, skipped = skipped + $5,
            errors = errors || $6::jsonb, heartbeat_at = now()
      WHERE id = $1`,
    [id, c.totalRows, c.created, c.updated, c.skipped, JSON.stringify(c.errors)],
    transaction,
  );
}
