/**
 * Contact lists and memberships. Bulk membership changes are single set-based statements (the
 * contacts never pass through Node; contacts.queries.ts), and an existing membership is kept,
 * never duplicated (unique index, ON CONFLICT DO NOTHING).
 */
import type { Context } from "moleculer";
import type { Sequelize, Transaction } from "sequelize";
import { API_PREFIX, apiAction, type AuthMeta } from "../../lib/http/api";
import { ApiError, type FieldError } from "../../lib/errors";
import { statementBudgetMs, withHeavySlot, type HeavyOptions } from "../../lib/db/heavy";
import type { Page } from "../../lib/http/paging";
import type { ContactsThis } from "./contacts.actions";
import { toListOut } from "./contacts.models";
import {
  deleteMember,
  deleteMembers,
  findList,
  insertList,
  insertMembers,
  listsPage,
  liveListIds,
  ownContactIds,
  softDeleteLists,
  updateList,
  type AddedMembers,
} from "./contacts.queries";
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
  type ListMembersIn,
  type ListIn,
  type ListOut,
  type MembershipIn,
} from "./contacts.schemas";

type Ctx<P> = Context<P, AuthMeta & { $location?: string }>;

/** Set-based changes over a whole account may take long on millions of contacts. */
export const BULK_TIMEOUT_MS = 300_000;

/** The heavy-operation slot options of a call (lib/db/heavy.ts). */
const heavyOf = (self: ContactsThis, ctx: Ctx<unknown>): HeavyOptions => ({
  companyId: ctx.meta.companyId,
  slots: self.heavyOpsPerAccount,
  statementTimeoutMs: statementBudgetMs(ctx),
  gate: self.heavyGate,
});

async function getList(sequelize: Sequelize, companyId: string, id: number, includeDeleted: boolean): Promise<ListOut> {
  const row = await findList(sequelize, companyId, id, includeDeleted);
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
  const found = await liveListIds(sequelize, companyId, p.listIds, transaction);
  const missingLists = p.listIds.filter((id) => !found.has(id));
  const errors = missingLists.map((id) => ({ path: "listIds", message: `contact list ${id} does not exist in this account` }));
  const named = p.allContacts ? (p.excludeIdsAllContacts ?? []) : (p.contactIds ?? []);
  if (named.length > 0 && !(removal && p.allContacts)) {
    const have = await ownContactIds(sequelize, companyId, named, transaction);
    const path = p.allContacts ? "excludeIdsAllContacts" : "contactIds";
    for (const id of named) if (!have.has(id.toLowerCase())) errors.push({ path, message: `contact ${id} does not exist in this account` });
  }
  if (errors.length) throw unknownIds(errors);
}

/** At most this many unknown ids are named in a 400; the rest are counted (the answer stays small). */
export const MAX_NAMED_ERRORS = 100;

function unknownIds(errors: FieldError[]): ApiError {
  const more = errors.length - MAX_NAMED_ERRORS;
  const detail =
    more > 0
      ? `${errors.length} lists or contacts do not exist in this account; the first ${MAX_NAMED_ERRORS} are named, ${more} more are not.`
      : "Some lists or contacts do not exist in this account.";
  return new ApiError("VALIDATION_ERROR", detail, { errors: errors.slice(0, MAX_NAMED_ERRORS), ...(more > 0 ? { errorsNotShown: more } : {}) });
}

export const listActions = {
  /** Finds the account's lists (deleted ones only with includeDeleted). */
  findLists: apiAction({
    rest: "GET /contacts/list",
    tag: "lists",
    operation: "CONTACTS",
    summary: "Find contact lists",
    params: findListsIn,
    responses: { 200: listPage },
    async handler(this: ContactsThis, ctx: Ctx<FindListsIn>): Promise<Page<ListOut>> {
      const page = () => listsPage(this.sequelize, ctx.meta.companyId, ctx.params);
      // A search by name is a heavy read: the account's share of the node's slots (lib/db/heavy.ts).
      return ctx.params.search ? this.heavyGate.run(ctx.meta.companyId, page) : page();
    },
  }),

  /** Creates a list. */
  createList: apiAction({
    rest: "POST /contacts/list",
    tag: "lists",
    operation: "CONTACTS",
    summary: "Create a contact list",
    params: createListIn,
    responses: { 201: listOut },
    async handler(this: ContactsThis, ctx: Ctx<ListIn>): Promise<ListOut> {
      const out = toListOut(await insertList(this.sequelize, ctx.meta.companyId, ctx.params));
      ctx.meta.$statusCode = 201;
      ctx.meta.$location = `${API_PREFIX}/contacts/list/${out.id}`;
      return out;
    },
  }),

  /** Replaces a list's name, description and isTest; membership is untouched. */
  updateList: apiAction({
    rest: "PUT /contacts/list/:id",
    tag: "lists",
    operation: "CONTACTS",
    summary: "Update a contact list",
    params: updateListIn,
    responses: { 200: listOut },
    errors: [404],
    async handler(this: ContactsThis, ctx: Ctx<ListIn & { id: number }>): Promise<ListOut> {
      if (!(await updateList(this.sequelize, ctx.meta.companyId, ctx.params.id, ctx.params)))
        throw new ApiError("LIST_NOT_FOUND", `No contact list ${ctx.params.id} in this account.`);
      return getList(this.sequelize, ctx.meta.companyId, ctx.params.id, false);
    },
  }),

  /** A list with its contact count; a deleted list still answers, with deleted: true. */
  getList: apiAction({
    rest: "GET /contacts/list/:id",
    tag: "lists",
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
    tag: "lists",
    operation: "CONTACTS",
    summary: "Delete contact lists",
    description: "Soft and irreversible: memberships are removed, contacts are kept. Unknown, foreign or already deleted ids are reported in `notFound`.",
    params: deleteListsIn,
    responses: { 200: deleteListsOut },
    async handler(this: ContactsThis, ctx: Ctx<{ ids: number[] }>): Promise<{ deleted: number[]; notFound: number[] }> {
      const ids = [...new Set(ctx.params.ids)];
      const deleted = await softDeleteLists(this.sequelize, ctx.meta.companyId, ids);
      return { deleted, notFound: ids.filter((id) => !deleted.includes(id)) };
    },
  }),

  /** The contacts of a list, with every filter of GET /contacts (default sort fullName). */
  listMembers: apiAction({
    rest: "GET /contacts/list/:listId/contacts",
    tag: "lists",
    operation: "CONTACTS",
    summary: "Contacts of a list",
    params: listMembersIn,
    responses: { 200: contactPage },
    errors: [404],
    async handler(this: ContactsThis, ctx: Ctx<ListMembersIn>): Promise<Page<ContactOut>> {
      const { listId, ...filters } = ctx.params;
      await getList(this.sequelize, ctx.meta.companyId, listId, false);
      return this.findContacts(ctx.meta.companyId, { ...filters, listIds: [listId] });
    },
  }),

  /** Adds contacts (or all contacts but some) to lists, in one statement; existing members are kept. */
  addMembers: apiAction({
    timeout: BULK_TIMEOUT_MS,
    rest: "POST /contacts/list/contacts",
    tag: "lists",
    operation: "CONTACTS",
    summary: "Add contacts to lists",
    description:
      "Adding a contact already in a list keeps the existing association. With allContacts: true every contact of the account is added (one statement, whatever the size), except excludeIdsAllContacts.",
    params: addMembersIn,
    responses: { 201: addMembersOut },
    async handler(this: ContactsThis, ctx: Ctx<MembershipIn>) {
      const { companyId } = ctx.meta;
      const p = dedupe(ctx.params);
      const add = async (transaction: Transaction) => {
        await checkBulk(this.sequelize, companyId, p, false, transaction);
        return insertMembers(this.sequelize, companyId, p, transaction);
      };
      // Over the whole account it is a heavy operation: one of the account's slots (429 when none is free).
      const addOnce = () => (p.allContacts ? withHeavySlot(this.sequelize, heavyOf(this, ctx), add) : this.sequelize.transaction(add));
      let row: AddedMembers | undefined;
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
    tag: "lists",
    operation: "CONTACTS",
    summary: "Remove contacts from lists",
    description:
      "A JSON body, like the one of `POST /contacts/list/contacts` (up to 10,000 ids in `contactIds` or `excludeIdsAllContacts`: more than a URL can carry). contactIds is required unless allContacts is true. Removing deletes neither contacts nor lists.",
    jsonBody: true,
    params: removeMembersIn,
    responses: { 200: removeMembersOut },
    async handler(this: ContactsThis, ctx: Ctx<MembershipIn>): Promise<{ deleted: number }> {
      const { companyId } = ctx.meta;
      const p = dedupe(ctx.params);
      await checkBulk(this.sequelize, companyId, p, true);
      // Over the whole account it is a heavy operation: one of the account's slots (429 when none is free).
      if (p.allContacts) return { deleted: await withHeavySlot(this.sequelize, heavyOf(this, ctx), (tx) => deleteMembers(this.sequelize, companyId, p, tx)) };
      return { deleted: await deleteMembers(this.sequelize, companyId, p) };
    },
  }),

  /** Removes one association by its id. */
  removeMember: apiAction({
    rest: "DELETE /contacts/list/contacts/:id",
    tag: "lists",
    operation: "CONTACTS",
    summary: "Delete an association",
    params: associationIdIn,
    responses: { 200: removeMembersOut },
    errors: [404],
    async handler(this: ContactsThis, ctx: Ctx<{ id: number }>): Promise<{ deleted: number }> {
      if (!(await deleteMember(this.sequelize, ctx.meta.companyId, ctx.params.id)))
        throw new ApiError("ASSOCIATION_NOT_FOUND", `No association ${ctx.params.id} in this account.`);
      return { deleted: 1 };
    },
  }),
};
