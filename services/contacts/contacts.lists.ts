/**
 * Contact lists and memberships. Bulk membership changes are single set-based statements (the
 * contacts never pass through Node), and an existing membership is kept, never duplicated
 * (unique index, ON CONFLICT DO NOTHING).
 */
import type { Context } from "moleculer";
import { QueryTypes, type Sequelize, type Transaction } from "sequelize";
import { API_PREFIX, apiAction, type AuthMeta } from "../../lib/api";
import { ApiError } from "../../lib/errors";
import { queryPage, type Page } from "../../lib/paging";
import type { ContactsThis } from "./contacts.actions";
import { likeEscape } from "./contacts.contract";
import { LIST_SELECT, toListOut, type ListRow } from "./contacts.models";
import {
  addMembersIn,
  addMembersOut,
  associationIdIn,
  contactPage,
  createListIn,
  deleteListsIn,
  deleteListsOut,
  findListsIn,
  listIdIn,
  listMembersIn,
  listOut,
  listPage,
  removeMembersIn,
  removeMembersOut,
  updateListIn,
  type ContactOut,
  type FindListsIn,
  type ListContactsIn,
  type ListIn,
  type ListOut,
  type ListSort,
  type MembershipIn,
} from "./contacts.schemas";

// Names sort case-insensitively, the same on PostgreSQL and PGlite whatever their collations.
const LIST_SORT_COLUMNS: Record<ListSort, string> = { name: "lower(l.name)", createdAt: "l.created_at", updatedAt: "l.updated_at", id: "l.id" };

type Ctx<P> = Context<P, AuthMeta & { $location?: string }>;

/** Set-based changes over a whole account may take long on millions of contacts. */
export const BULK_TIMEOUT_MS = 300_000;

async function getList(sequelize: Sequelize, companyId: string, id: number, includeDeleted: boolean): Promise<ListOut> {
  const [row] = await sequelize.query<ListRow>(
    `${LIST_SELECT} WHERE l.company_id = :companyId AND l.id = :id${includeDeleted ? "" : " AND l.deleted_at IS NULL"}`,
    {
      replacements: { companyId, id },
      type: QueryTypes.SELECT,
    },
  );
  if (!row) throw new ApiError("LIST_NOT_FOUND", `No contact list ${id} in this account.`);
  return toListOut(row);
}

/** Repeated ids in a bulk body count once (UUIDs whatever their case). */
function dedupe(p: MembershipIn): MembershipIn {
  const uniq = (ids?: string[]) => (ids ? [...new Map(ids.map((id) => [id.toLowerCase(), id])).values()] : undefined);
  return { ...p, listIds: [...new Set(p.listIds)], contactIds: uniq(p.contactIds), excludeIdsAllContacts: uniq(p.excludeIdsAllContacts) };
}

/**
 * Bulk bodies: lists (own, not deleted) and contacts (own) that do not exist are a 400 naming them.
 * Inside `transaction` the lists are held (FOR SHARE) until it ends: a deletion waits for it.
 */
async function checkBulk(sequelize: Sequelize, companyId: string, p: MembershipIn, removal: boolean, transaction?: Transaction): Promise<void> {
  if (!p.allContacts && !p.contactIds) {
    throw new ApiError("VALIDATION_ERROR", "contactIds is required unless allContacts is true.", {
      errors: [{ path: "contactIds", message: "is required when allContacts is false" }],
    });
  }
  const lists = await sequelize.query<{ id: string }>(
    `SELECT id FROM contact_lists WHERE company_id = :companyId AND id IN (:ids) AND deleted_at IS NULL${transaction ? " FOR SHARE" : ""}`,
    { replacements: { companyId, ids: p.listIds }, type: QueryTypes.SELECT, transaction },
  );
  const found = new Set(lists.map((l) => Number(l.id)));
  const missingLists = p.listIds.filter((id) => !found.has(id));
  const errors = missingLists.map((id) => ({ path: "listIds", message: `contact list ${id} does not exist in this account` }));
  const named = p.allContacts ? (p.excludeIdsAllContacts ?? []) : (p.contactIds ?? []);
  if (named.length > 0 && !(removal && p.allContacts)) {
    const rows = await sequelize.query<{ id: string }>(`SELECT id FROM contacts WHERE company_id = :companyId AND id IN (:ids)`, {
      replacements: { companyId, ids: named },
      type: QueryTypes.SELECT,
      transaction,
    });
    const have = new Set(rows.map((r) => r.id.toLowerCase()));
    const path = p.allContacts ? "excludeIdsAllContacts" : "contactIds";
    for (const id of named) if (!have.has(id.toLowerCase())) errors.push({ path, message: `contact ${id} does not exist in this account` });
  }
  if (errors.length) throw new ApiError("VALIDATION_ERROR", "Some lists or contacts do not exist in this account.", { errors: errors.slice(0, 100) });
}

/** The contacts a bulk membership body names, as SQL over alias `c`. */
function memberFilter(p: MembershipIn): { sql: string; replacements: Record<string, unknown> } {
  if (!p.allContacts) return { sql: "c.id IN (:contactIds)", replacements: { contactIds: p.contactIds } };
  if (p.excludeIdsAllContacts?.length) return { sql: "c.id NOT IN (:exclude)", replacements: { exclude: p.excludeIdsAllContacts } };
  return { sql: "TRUE", replacements: {} };
}

export const listActions = {
  /** Finds the account's lists (deleted ones only with includeDeleted). */
  findLists: apiAction({
    rest: "GET /contacts/list",
    operation: "CONTACTS",
    summary: "Find contact lists",
    params: findListsIn,
    responses: { 200: listPage },
    async handler(this: ContactsThis, ctx: Ctx<FindListsIn>): Promise<Page<ListOut>> {
      const p = ctx.params;
      const parts = ["l.company_id = :companyId"];
      const r: Record<string, unknown> = { companyId: ctx.meta.companyId };
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
        parts.push("EXISTS (SELECT 1 FROM contact_list_members m WHERE m.list_id = l.id AND m.contact_id IN (:contactIds))");
        r.contactIds = p.contactIds;
      }
      const where = parts.join(" AND ");
      const dir = p.sortOrder === "desc" ? "DESC" : "ASC";
      return queryPage(this.sequelize, {
        select: `${LIST_SELECT} WHERE ${where} ORDER BY ${LIST_SORT_COLUMNS[p.sortBy]} ${dir}, l.id ${dir} LIMIT :limit OFFSET :offset`,
        count: `SELECT count(*) AS total FROM contact_lists l WHERE ${where}`,
        replacements: r,
        page: p.page,
        limit: p.limit,
        map: toListOut,
      });
    },
  }),

  /** Creates a list. */
  createList: apiAction({
    rest: "POST /contacts/list",
    operation: "CONTACTS",
    summary: "Create a contact list",
    params: createListIn,
    responses: { 201: listOut },
    async handler(this: ContactsThis, ctx: Ctx<ListIn>): Promise<ListOut> {
      const [row] = await this.sequelize.query<ListRow>(
        `INSERT INTO contact_lists (company_id, name, description, is_test) VALUES (:companyId, :name, :description, :isTest)
         RETURNING id, name, description, is_test, created_at, updated_at, deleted_at, 0 AS contact_count`,
        {
          replacements: {
            companyId: ctx.meta.companyId,
            name: ctx.params.name,
            description: ctx.params.description ?? null,
            isTest: ctx.params.isTest ?? false,
          },
          type: QueryTypes.SELECT,
        },
      );
      const out = toListOut(row!);
      ctx.meta.$statusCode = 201;
      ctx.meta.$location = `${API_PREFIX}/contacts/list/${out.id}`;
      return out;
    },
  }),

  /** Replaces a list's name, description and isTest; membership is untouched. */
  updateList: apiAction({
    rest: "PUT /contacts/list/:id",
    operation: "CONTACTS",
    summary: "Update a contact list",
    params: updateListIn,
    responses: { 200: listOut },
    errors: [404],
    async handler(this: ContactsThis, ctx: Ctx<ListIn & { id: number }>): Promise<ListOut> {
      const rows = await this.sequelize.query(
        `UPDATE contact_lists SET name = :name, description = :description, is_test = :isTest, updated_at = now()
          WHERE company_id = :companyId AND id = :id AND deleted_at IS NULL RETURNING id`,
        {
          replacements: {
            companyId: ctx.meta.companyId,
            id: ctx.params.id,
            name: ctx.params.name,
            description: ctx.params.description ?? null,
            isTest: ctx.params.isTest ?? false,
          },
          type: QueryTypes.SELECT,
        },
      );
      if (rows.length === 0) throw new ApiError("LIST_NOT_FOUND", `No contact list ${ctx.params.id} in this account.`);
      return getList(this.sequelize, ctx.meta.companyId, ctx.params.id, false);
    },
  }),

  /** A list with its contact count; a deleted list still answers, with deleted: true. */
  getList: apiAction({
    rest: "GET /contacts/list/:id",
    operation: "CONTACTS",
    summary: "Get a contact list",
    params: listIdIn,
    responses: { 200: listOut },
    errors: [404],
    handler(this: ContactsThis, ctx: Ctx<{ id: number }>): Promise<ListOut> {
      return getList(this.sequelize, ctx.meta.companyId, ctx.params.id, true);
    },
  }),

  /** Soft-deletes lists (irreversible): their memberships go, their contacts stay. */
  deleteLists: apiAction({
    timeout: BULK_TIMEOUT_MS,
    rest: "DELETE /contacts/list",
    operation: "CONTACTS",
    summary: "Delete contact lists",
    description: "Soft and irreversible: memberships are removed, contacts are kept. Unknown, foreign or already deleted ids are reported in `notFound`.",
    params: deleteListsIn,
    responses: { 200: deleteListsOut },
    async handler(this: ContactsThis, ctx: Ctx<{ ids: number[] }>): Promise<{ deleted: number[]; notFound: number[] }> {
      const ids = [...new Set(ctx.params.ids)];
      // Two statements in one transaction: the member deletion takes a fresh snapshot after the list
      // rows are locked, so it also removes members an add committed while we waited for the lock.
      const rows = await this.sequelize.transaction(async (transaction) => {
        const del = await this.sequelize.query<{ id: string }>(
          `UPDATE contact_lists SET deleted_at = now(), updated_at = now()
            WHERE company_id = :companyId AND id IN (:ids) AND deleted_at IS NULL RETURNING id`,
          { replacements: { companyId: ctx.meta.companyId, ids }, type: QueryTypes.SELECT, transaction },
        );
        if (del.length > 0) {
          await this.sequelize.query(`DELETE FROM contact_list_members WHERE list_id IN (:ids)`, { replacements: { ids: del.map((r) => r.id) }, transaction });
        }
        return del.sort((a, b) => Number(a.id) - Number(b.id));
      });
      const deleted = rows.map((r) => Number(r.id));
      return { deleted, notFound: ids.filter((id) => !deleted.includes(id)) };
    },
  }),

  /** The contacts of a list, with every filter of GET /contacts (default sort fullName). */
  listMembers: apiAction({
    rest: "GET /contacts/list/:listId/contacts",
    operation: "CONTACTS",
    summary: "Contacts of a list",
    params: listMembersIn,
    responses: { 200: contactPage },
    errors: [404],
    async handler(this: ContactsThis, ctx: Ctx<ListContactsIn & { listId: number }>): Promise<Page<ContactOut>> {
      const { listId, ...filters } = ctx.params;
      await getList(this.sequelize, ctx.meta.companyId, listId, false);
      return this.findContacts(ctx.meta.companyId, { ...filters, listIds: [listId] });
    },
  }),

  /** Adds contacts (or all contacts but some) to lists, in one statement; existing members are kept. */
  addMembers: apiAction({
    timeout: BULK_TIMEOUT_MS,
    rest: "POST /contacts/list/contacts",
    operation: "CONTACTS",
    summary: "Add contacts to lists",
    description:
      "Adding a contact already in a list keeps the existing association. With allContacts: true every contact of the account is added (one statement, whatever the size), except excludeIdsAllContacts.",
    params: addMembersIn,
    responses: { 201: addMembersOut },
    async handler(this: ContactsThis, ctx: Ctx<MembershipIn>) {
      const { companyId } = ctx.meta;
      const p = dedupe(ctx.params);
      const f = memberFilter(p);
      const addOnce = () =>
        this.sequelize.transaction(async (transaction) => {
          await checkBulk(this.sequelize, companyId, p, false, transaction);
          const [row] = await this.sequelize.query<{ total: string; created: string; ids: Array<string | number> | null }>(
            `WITH cand AS (
               SELECT l.id AS list_id, c.id AS contact_id
                 FROM contacts c CROSS JOIN contact_lists l
                WHERE c.company_id = :companyId AND ${f.sql}
                  AND l.company_id = :companyId AND l.id IN (:listIds) AND l.deleted_at IS NULL),
             ins AS (
               INSERT INTO contact_list_members (company_id, list_id, contact_id)
               SELECT :companyId, list_id, contact_id FROM cand
               ON CONFLICT (list_id, contact_id) DO NOTHING RETURNING id)
             SELECT (SELECT count(*) FROM cand) AS total, (SELECT count(*) FROM ins) AS created,
                    (SELECT array_agg(id ORDER BY id) FROM (SELECT id FROM ins ORDER BY id LIMIT 1000) first) AS ids`,
            { replacements: { companyId, listIds: p.listIds, ...f.replacements }, type: QueryTypes.SELECT, transaction },
          );
          return row;
        });
      let row: Awaited<ReturnType<typeof addOnce>> | undefined;
      for (let attempt = 1; !row; attempt++) {
        try {
          row = await addOnce();
        } catch (err) {
          // A contact deleted while the statement ran: the next attempt no longer selects it.
          if ((err as Error).name !== "SequelizeForeignKeyConstraintError") throw err;
          if (attempt >= 3) throw new ApiError("CONCURRENT_CHANGE", "Contacts were deleted while they were being added; retry the request.");
        }
      }
      const created = Number(row!.created);
      ctx.meta.$statusCode = 201;
      ctx.meta.$location = `${API_PREFIX}/contacts/list`;
      const ids = (row!.ids ?? []).map(Number);
      return { ids, ...(created > ids.length ? { idsTruncated: true } : {}), created, existing: Number(row!.total) - created };
    },
  }),

  /** Removes contacts (or all but some) from lists; contacts and lists stay. */
  removeMembers: apiAction({
    timeout: BULK_TIMEOUT_MS,
    rest: "DELETE /contacts/list/contacts",
    operation: "CONTACTS",
    summary: "Remove contacts from lists",
    description: "contactIds is required unless allContacts is true. Removing deletes neither contacts nor lists.",
    params: removeMembersIn,
    responses: { 200: removeMembersOut },
    async handler(this: ContactsThis, ctx: Ctx<MembershipIn>): Promise<{ deleted: number }> {
      const { companyId } = ctx.meta;
      const p = dedupe(ctx.params);
      await checkBulk(this.sequelize, companyId, p, true);
      const f = memberFilter(p);
      const [row] = await this.sequelize.query<{ deleted: string }>(
        `WITH d AS (
           DELETE FROM contact_list_members m USING contacts c
            WHERE m.company_id = :companyId AND m.list_id IN (:listIds) AND c.id = m.contact_id AND ${f.sql}
           RETURNING 1)
         SELECT count(*) AS deleted FROM d`,
        { replacements: { companyId, listIds: p.listIds, ...f.replacements }, type: QueryTypes.SELECT },
      );
      return { deleted: Number(row!.deleted) };
    },
  }),

  /** Removes one association by its id. */
  removeMember: apiAction({
    rest: "DELETE /contacts/list/contacts/:id",
    operation: "CONTACTS",
    summary: "Delete an association",
    params: associationIdIn,
    responses: { 200: removeMembersOut },
    errors: [404],
    async handler(this: ContactsThis, ctx: Ctx<{ id: number }>): Promise<{ deleted: number }> {
      const rows = await this.sequelize.query(
        `DELETE FROM contact_list_members m USING contact_lists l
          WHERE m.id = :id AND m.company_id = :companyId AND l.id = m.list_id AND l.deleted_at IS NULL RETURNING m.id`,
        { replacements: { companyId: ctx.meta.companyId, id: ctx.params.id }, type: QueryTypes.SELECT },
      );
      if (rows.length === 0) throw new ApiError("ASSOCIATION_NOT_FOUND", `No association ${ctx.params.id} in this account.`);
      return { deleted: 1 };
    },
  }),
};
