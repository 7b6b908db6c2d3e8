/**
 * The contacts service's SQL for contacts, custom fields, lists and memberships (imports keep theirs
 * in contacts.imports.queries.ts, opt-outs in contacts.optouts.queries.ts, the channels other
 * services report in contacts.channels.queries.ts, the GET /contacts filters in
 * contacts.filters.ts, the export's statement in contacts.export.ts). Every
 * statement filters by the account; bulk membership changes are single set-based statements (the
 * contacts never pass through Node).
 */
import { QueryTypes, type Sequelize, type Transaction } from "sequelize";
import { queryPage, type Page } from "../../lib/http/paging";
import { likeEscape } from "../../lib/db/literals";
import { contactOrder, contactWhere } from "./contacts.filters";
import { CONTACT_COLUMNS, toContactOut, toListOut, type ContactRow, type CustomFieldRow, type ListRow } from "./contacts.models";
import type { CustomFieldType } from "./contacts.contract";
import type { ContactOut, FindListsIn, ListContactsIn, ListIn, ListOut, ListSort, MembershipIn } from "./contacts.schemas";

// --- contacts

/** One contact of the account, or undefined. */
export async function findContact(sequelize: Sequelize, companyId: string, id: string): Promise<ContactRow | undefined> {
  const [row] = await sequelize.query<ContactRow>(`SELECT ${CONTACT_COLUMNS} FROM contacts c WHERE c.company_id = :companyId AND c.id = :id`, {
    replacements: { companyId, id },
    type: QueryTypes.SELECT,
  });
  return row;
}

/** A page of the account's contacts matching the filters (custom fields typed by `types`). */
export function contactsPage(sequelize: Sequelize, companyId: string, params: ListContactsIn, types: Map<string, CustomFieldType>): Promise<Page<ContactOut>> {
  const { page, limit, sortBy, sortOrder } = params;
  const where = contactWhere(companyId, params, types);
  const order = contactOrder(sortBy, sortOrder);
  // Deferred join: the page's ids come from the (index-only) sort order, the rows only for them.
  return queryPage(sequelize, {
    select: `SELECT ${CONTACT_COLUMNS} FROM contacts c
                 JOIN (SELECT c.company_id, c.id FROM contacts c WHERE ${where.sql} ${order} LIMIT :limit OFFSET :offset) page USING (company_id, id) ${order}`,
    count: `SELECT count(*) AS total FROM contacts c WHERE ${where.sql}`,
    replacements: where.replacements,
    page,
    limit,
    map: toContactOut,
  });
}

/** Deletes a contact of the account (its memberships go with it); false when there is none. */
export async function deleteContact(sequelize: Sequelize, companyId: string, id: string): Promise<boolean> {
  const rows = await sequelize.query(`DELETE FROM contacts WHERE company_id = :companyId AND id = :id RETURNING id`, {
    replacements: { companyId, id },
    type: QueryTypes.SELECT,
  });
  return rows.length > 0;
}

/** Holds the account's contact `id` (FOR UPDATE) until `transaction` ends; false when there is none. */
export async function lockContact(sequelize: Sequelize, companyId: string, id: string, transaction: Transaction): Promise<boolean> {
  const [own] = await sequelize.query(`SELECT id FROM contacts WHERE company_id = :companyId AND id = :id FOR UPDATE`, {
    replacements: { companyId, id },
    type: QueryTypes.SELECT,
    transaction,
  });
  return own !== undefined;
}

/** Another contact of the account (not `id`) with this phone number or email, each only when given. */
export async function contactHolding(
  sequelize: Sequelize,
  q: { companyId: string; id: string; phone: string | null; email: string | null },
  transaction: Transaction,
): Promise<{ id: string; phone_number: string | null } | undefined> {
  const { companyId, id, phone, email } = q;
  const [holder] = await sequelize.query<{ id: string; phone_number: string | null }>(
    `SELECT id, phone_number FROM contacts WHERE company_id = :companyId AND id <> :id
            AND ((phone_number = :phone AND :phone IS NOT NULL) OR (email = :email AND :email IS NOT NULL)) LIMIT 1`,
    { replacements: { companyId, id, phone, email }, type: QueryTypes.SELECT, transaction },
  );
  return holder;
}

/** After a unique violation: the contact of the account (not `id`) that took the phone number or email. */
export async function contactHoldingEither(
  sequelize: Sequelize,
  q: { companyId: string; id: string; phone: string | null; email: string | null },
): Promise<{ id: string } | undefined> {
  const { companyId, id, phone, email } = q;
  const [holder] = await sequelize.query<{ id: string }>(
    `SELECT id FROM contacts WHERE company_id = :companyId AND id <> :id AND (phone_number = :phone OR email = :email) LIMIT 1`,
    { replacements: { companyId, id, phone, email }, type: QueryTypes.SELECT },
  );
  return holder;
}

/** A contact's columns as written (custom fields as JSON text). */
export interface ContactValues {
  companyId: string;
  id: string;
  firstName: string | null;
  lastName: string | null;
  gender: string | null;
  phone: string | null;
  email: string | null;
  customFields: string;
  isTest: boolean;
}

/**
 * Inserts a contact or replaces the account's contact `values.id`; undefined when there is none to
 * replace. SMS is supported wherever there is a phone number; RCS and WhatsApp come from delivery
 * receipts (kept while the number stays the same).
 */
export async function writeContactRow(
  sequelize: Sequelize,
  mode: "insert" | "update",
  values: ContactValues,
  transaction: Transaction,
): Promise<ContactRow | undefined> {
  const sql =
    mode === "insert"
      ? `INSERT INTO contacts AS c (id, company_id, first_name, last_name, gender, phone_number, email, custom_fields, is_test, communication_supported)
             VALUES (:id, :companyId, :firstName, :lastName, :gender, :phone, :email, CAST(:customFields AS jsonb), :isTest,
                     CASE WHEN CAST(:phone AS text) IS NULL THEN '{}'::text[] ELSE ARRAY['SMS'] END)
             RETURNING ${CONTACT_COLUMNS}`
      : `UPDATE contacts c SET first_name = :firstName, last_name = :lastName, gender = :gender, email = :email, custom_fields = CAST(:customFields AS jsonb),
                 is_test = :isTest, updated_at = now(),
                 communication_supported = CASE
                   WHEN CAST(:phone AS text) IS NULL THEN '{}'::text[]
                   WHEN phone_number IS DISTINCT FROM CAST(:phone AS text) THEN ARRAY['SMS']
                   ELSE communication_supported END,
                 communication_refused = CASE WHEN phone_number IS DISTINCT FROM CAST(:phone AS text) THEN '{}'::text[] ELSE communication_refused END,
                 phone_number = :phone
               WHERE company_id = :companyId AND id = :id
             RETURNING ${CONTACT_COLUMNS}`;
  const [row] = await sequelize.query<ContactRow>(sql, { replacements: { ...values }, type: QueryTypes.SELECT, transaction });
  return row;
}

// --- custom fields

/** The account's custom field declarations; `lock` holds them (FOR SHARE) until the transaction ends. */
export async function customFieldTypes(
  sequelize: Sequelize,
  companyId: string,
  transaction?: Transaction,
  lock = false,
): Promise<Map<string, CustomFieldType>> {
  const rows = await sequelize.query<{ key: string; type: CustomFieldType }>(
    `SELECT key, type FROM contact_custom_fields WHERE company_id = :companyId${lock ? " FOR SHARE" : ""}`,
    {
      replacements: { companyId },
      type: QueryTypes.SELECT,
      transaction,
    },
  );
  return new Map(rows.map((r) => [r.key, r.type]));
}

/** The account's custom field declarations by key. */
export function customFieldRows(sequelize: Sequelize, companyId: string): Promise<CustomFieldRow[]> {
  return sequelize.query<CustomFieldRow>(`SELECT key, type, created_at FROM contact_custom_fields WHERE company_id = :companyId ORDER BY key`, {
    replacements: { companyId },
    type: QueryTypes.SELECT,
  });
}

/** The new declaration, or undefined when the account has this key already. */
export async function insertCustomField(sequelize: Sequelize, companyId: string, key: string, type: CustomFieldType): Promise<CustomFieldRow | undefined> {
  const [row] = await sequelize.query<CustomFieldRow>(
    `INSERT INTO contact_custom_fields (company_id, key, type) VALUES (:companyId, :key, :type)
         ON CONFLICT (company_id, key) DO NOTHING RETURNING key, type, created_at`,
    { replacements: { companyId, key, type }, type: QueryTypes.SELECT },
  );
  return row;
}

/** Removes a declaration and its values from every contact of the account, inside `transaction`; false when there is none. */
export async function deleteCustomField(sequelize: Sequelize, companyId: string, key: string, transaction: Transaction): Promise<boolean> {
  const gone = await sequelize.query(`DELETE FROM contact_custom_fields WHERE company_id = :companyId AND key = :key RETURNING key`, {
    replacements: { companyId, key },
    type: QueryTypes.SELECT,
    transaction,
  });
  if (gone.length === 0) return false;
  await sequelize.query(`UPDATE contacts SET custom_fields = custom_fields - :key WHERE company_id = :companyId AND jsonb_exists(custom_fields, :key)`, {
    replacements: { companyId, key },
    transaction,
  });
  return true;
}

// --- contact lists

/** A contact list with its member count, on alias `l`. */
const LIST_SELECT = `SELECT l.id, l.name, l.description, l.is_test, l.created_at, l.updated_at, l.deleted_at,
  (SELECT count(*) FROM contact_list_members m WHERE m.company_id = l.company_id AND m.list_id = l.id) AS contact_count FROM contact_lists l`;

// Names sort case-insensitively, the same on PostgreSQL and PGlite whatever their collations.
const LIST_SORT_COLUMNS: Record<ListSort, string> = { name: "lower(l.name)", createdAt: "l.created_at", updatedAt: "l.updated_at", id: "l.id" };

/** A list of the account with its contact count (a deleted one only with `includeDeleted`), or undefined. */
export async function findList(sequelize: Sequelize, companyId: string, id: number, includeDeleted: boolean): Promise<ListRow | undefined> {
  const [row] = await sequelize.query<ListRow>(
    `${LIST_SELECT} WHERE l.company_id = :companyId AND l.id = :id${includeDeleted ? "" : " AND l.deleted_at IS NULL"}`,
    {
      replacements: { companyId, id },
      type: QueryTypes.SELECT,
    },
  );
  return row;
}

/** A page of the account's lists matching the filters. */
export function listsPage(sequelize: Sequelize, companyId: string, p: FindListsIn): Promise<Page<ListOut>> {
  const parts = ["l.company_id = :companyId"];
  const r: Record<string, unknown> = { companyId };
  if (!p.includeDeleted) parts.push("l.deleted_at IS NULL");
  if (p.search !== undefined) {
    parts.push("l.name ILIKE :search");
    r.search = likeEscape(p.search);
  }
  if (p.id) {
    parts.push("l.id IN (:ids)");
    r.ids = p.id;
  }
  if (p.isTest !== undefined) {
    parts.push("l.is_test = :isTest");
    r.isTest = p.isTest;
  }
  if (p.contactIds) {
    parts.push("EXISTS (SELECT 1 FROM contact_list_members m WHERE m.company_id = l.company_id AND m.list_id = l.id AND m.contact_id IN (:contactIds))");
    r.contactIds = p.contactIds;
  }
  const where = parts.join(" AND ");
  const dir = p.sortOrder === "desc" ? "DESC" : "ASC";
  return queryPage(sequelize, {
    select: `${LIST_SELECT} WHERE ${where} ORDER BY ${LIST_SORT_COLUMNS[p.sortBy]} ${dir}, l.id ${dir} LIMIT :limit OFFSET :offset`,
    count: `SELECT count(*) AS total FROM contact_lists l WHERE ${where}`,
    replacements: r,
    page: p.page,
    limit: p.limit,
    map: toListOut,
  });
}

/** The new list (no contacts yet). */
export async function insertList(sequelize: Sequelize, companyId: string, p: ListIn): Promise<ListRow> {
  const [row] = await sequelize.query<ListRow>(
    `INSERT INTO contact_lists (company_id, name, description, is_test) VALUES (:companyId, :name, :description, :isTest)
         RETURNING id, name, description, is_test, created_at, updated_at, deleted_at, 0 AS contact_count`,
    {
      replacements: {
        companyId,
        name: p.name,
        description: p.description ?? null,
        isTest: p.isTest ?? false,
      },
      type: QueryTypes.SELECT,
    },
  );
  return row!;
}

/** Replaces a list's name, description and isTest; false when the account has no such list (or it is deleted). */
export async function updateList(sequelize: Sequelize, companyId: string, id: number, p: ListIn): Promise<boolean> {
  const rows = await sequelize.query(
    `UPDATE contact_lists SET name = :name, description = :description, is_test = :isTest, updated_at = now()
          WHERE company_id = :companyId AND id = :id AND deleted_at IS NULL RETURNING id`,
    {
      replacements: {
        companyId,
        id,
        name: p.name,
        description: p.description ?? null,
        isTest: p.isTest ?? false,
      },
      type: QueryTypes.SELECT,
    },
  );
  return rows.length > 0;
}

/** Soft-deletes the account's lists among `ids` and their memberships: the ids deleted, ascending. */
export async function softDeleteLists(sequelize: Sequelize, companyId: string, ids: number[]): Promise<number[]> {
  // Two statements in one transaction: the member deletion takes a fresh snapshot after the list
  // rows are locked, so it also removes members an add committed while we waited for the lock.
  const rows = await sequelize.transaction(async (transaction) => {
    const del = await sequelize.query<{ id: string }>(
      `UPDATE contact_lists SET deleted_at = now(), updated_at = now()
            WHERE company_id = :companyId AND id IN (:ids) AND deleted_at IS NULL RETURNING id`,
      { replacements: { companyId, ids }, type: QueryTypes.SELECT, transaction },
    );
    if (del.length > 0) {
      await sequelize.query(`DELETE FROM contact_list_members WHERE company_id = :companyId AND list_id IN (:ids)`, {
        replacements: { companyId, ids: del.map((r) => r.id) },
        transaction,
      });
    }
    return del.sort((a, b) => Number(a.id) - Number(b.id));
  });
  return rows.map((r) => Number(r.id));
}

// --- memberships

/** The account's lists among `ids` that are not deleted; inside `transaction` they are held (FOR SHARE) until it ends. */
export async function liveListIds(sequelize: Sequelize, companyId: string, ids: number[], transaction?: Transaction): Promise<Set<number>> {
  const lists = await sequelize.query<{ id: string }>(
    `SELECT id FROM contact_lists WHERE company_id = :companyId AND id IN (:ids) AND deleted_at IS NULL${transaction ? " FOR SHARE" : ""}`,
    { replacements: { companyId, ids }, type: QueryTypes.SELECT, transaction },
  );
  return new Set(lists.map((l) => Number(l.id)));
}

/** The account's contacts among `ids`, lower-cased. */
export async function ownContactIds(sequelize: Sequelize, companyId: string, ids: string[], transaction?: Transaction): Promise<Set<string>> {
  const rows = await sequelize.query<{ id: string }>(`SELECT id FROM contacts WHERE company_id = :companyId AND id IN (:ids)`, {
    replacements: { companyId, ids },
    type: QueryTypes.SELECT,
    transaction,
  });
  return new Set(rows.map((r) => r.id.toLowerCase()));
}

/** The contacts a bulk membership body names, as SQL over alias `c`. */
function memberFilter(p: MembershipIn): { sql: string; replacements: Record<string, unknown> } {
  if (!p.allContacts) return { sql: "c.id IN (:contactIds)", replacements: { contactIds: p.contactIds } };
  if (p.excludeIdsAllContacts?.length) return { sql: "c.id NOT IN (:exclude)", replacements: { exclude: p.excludeIdsAllContacts } };
  return { sql: "TRUE", replacements: {} };
}

export interface AddedMembers {
  /** Associations asked for (existing ones included). */
  total: string;
  created: string;
  /** The first 1000 created association ids, ascending. */
  ids: Array<string | number> | null;
}

/** Adds the contacts a body names to its lists in one statement; an existing association is kept (ON CONFLICT DO NOTHING). */
export async function insertMembers(sequelize: Sequelize, companyId: string, p: MembershipIn, transaction: Transaction): Promise<AddedMembers> {
  const f = memberFilter(p);
  const [row] = await sequelize.query<AddedMembers>(
    `WITH cand AS (
               SELECT l.id AS list_id, c.id AS contact_id
                 FROM contacts c CROSS JOIN contact_lists l
                WHERE c.company_id = :companyId AND ${f.sql}
                  AND l.company_id = :companyId AND l.id IN (:listIds) AND l.deleted_at IS NULL),
             ins AS (
               INSERT INTO contact_list_members (company_id, list_id, contact_id)
               SELECT :companyId, list_id, contact_id FROM cand
               ON CONFLICT (company_id, list_id, contact_id) DO NOTHING RETURNING id)
             SELECT (SELECT count(*) FROM cand) AS total, (SELECT count(*) FROM ins) AS created,
                    (SELECT array_agg(id ORDER BY id) FROM (SELECT id FROM ins ORDER BY id LIMIT 1000) first) AS ids`,
    { replacements: { companyId, listIds: p.listIds, ...f.replacements }, type: QueryTypes.SELECT, transaction },
  );
  return row!;
}

/** Removes the contacts a body names from its lists in one statement: how many associations went. */
export async function deleteMembers(sequelize: Sequelize, companyId: string, p: MembershipIn, transaction?: Transaction): Promise<number> {
  const f = memberFilter(p);
  const [row] = await sequelize.query<{ deleted: string }>(
    `WITH d AS (
           DELETE FROM contact_list_members m USING contacts c
            WHERE m.company_id = :companyId AND m.list_id IN (:listIds) AND c.company_id = m.company_id AND c.id = m.contact_id AND ${f.sql}
           RETURNING 1)
         SELECT count(*) AS deleted FROM d`,
    { replacements: { companyId, listIds: p.listIds, ...f.replacements }, type: QueryTypes.SELECT, transaction },
  );
  return Number(row!.deleted);
}

/** Removes one association of the account (of a list not deleted); false when there is none. */
export async function deleteMember(sequelize: Sequelize, companyId: string, id: number): Promise<boolean> {
  const rows = await sequelize.query(
    `DELETE FROM contact_list_members m USING contact_lists l
          WHERE m.id = :id AND m.company_id = :companyId AND l.company_id = m.company_id AND l.id = m.list_id AND l.deleted_at IS NULL RETURNING m.id`,
    { replacements: { companyId, id }, type: QueryTypes.SELECT },
  );
  return rows.length > 0;
}
