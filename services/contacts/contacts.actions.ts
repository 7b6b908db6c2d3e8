/**
 * Contacts and their custom fields: the actions, and the methods the list and import actions share
 * (their SQL is in contacts.queries.ts; markContacted's in contacts.channels.queries.ts).
 */
import { randomUUID } from "node:crypto";
import type { Context } from "moleculer";
import type { Sequelize, Transaction } from "sequelize";
import { API_PREFIX, apiAction, type AuthMeta } from "../../lib/http/api";
import { ApiError, type FieldError } from "../../lib/errors";
import { statementBudgetMs, withHeavySlot, type HeavyGate } from "../../lib/db/heavy";
import type { Page } from "../../lib/http/paging";
import { toContactOut, toCustomFieldOut } from "./contacts.models";
import { checkCustomFields, normalizeEmail, PHONE_ERROR, toE164 } from "./contacts.normalize";
import {
  contactHolding,
  contactHoldingEither,
  contactsPage,
  customFieldRows,
  customFieldTypes,
  deleteContact,
  deleteCustomField,
  findContact,
  insertCustomField,
  lockContact,
  writeContactRow,
} from "./contacts.queries";
import { markContacted } from "./contacts.channels.queries";
import { type ContactExportFilters, type CustomFieldType } from "./contacts.contract";
import { contactExportSelect } from "./contacts.export";
import {
  contactIdIn,
  contactOut,
  contactPage,
  createContactIn,
  customFieldIn,
  customFieldKeyIn,
  customFieldList,
  customFieldOut,
  emptyIn,
  exportStatementIn,
  listContactsIn,
  markContactedIn,
  updateContactIn,
  type ContactIn,
  type ContactOut,
  type CustomFieldOut,
  type ListContactsIn,
  type MarkContactedIn,
} from "./contacts.schemas";

export interface ContactsThis {
  sequelize: Sequelize;
  /** HEAVY_OPS_PER_ACCOUNT: slots of lib/db/heavy.ts per account. */
  heavyOpsPerAccount: number;
  /** This node's heavy-read slots (searches), shared with every service of the process (lib/db/heavy.ts). */
  heavyGate: HeavyGate;
  customTypes(companyId: string, transaction?: Transaction, lock?: boolean): Promise<Map<string, CustomFieldType>>;
  findContacts(companyId: string, params: ListContactsIn): Promise<Page<ContactOut>>;
  writeContact(ctx: Context<ContactIn & { id?: string }, AuthMeta>, id: string, mode: "insert" | "update"): Promise<ContactOut>;
}

type Ctx<P> = Context<P, AuthMeta & { $location?: string }>;

export const contactActions = {
  /** Creates a contact (phone in E.164 and/or email, unique in the account). */
  create: apiAction({
    rest: "POST /contacts",
    operation: "CONTACTS",
    summary: "Create a contact",
    description:
      "At least one of phoneNumber (international format, stored as E.164) and email. A phone number or email another contact of the account has is a 409 naming it (`existingId`).",
    params: createContactIn,
    responses: { 201: contactOut },
    errors: [409],
    async handler(this: ContactsThis, ctx: Ctx<ContactIn>): Promise<ContactOut> {
      const out = await this.writeContact(ctx, randomUUID(), "insert");
      ctx.meta.$statusCode = 201;
      ctx.meta.$location = `${API_PREFIX}/contacts/${out.id}`;
      return out;
    },
  }),

  /** Finds the account's contacts by every filter of spec part 2, paged. */
  list: apiAction({
    rest: "GET /contacts",
    operation: "CONTACTS",
    summary: "Find contacts",
    params: listContactsIn,
    responses: { 200: contactPage },
    async handler(this: ContactsThis, ctx: Ctx<ListContactsIn>): Promise<Page<ContactOut>> {
      return this.findContacts(ctx.meta.companyId, ctx.params);
    },
  }),

  /** One contact of the account. */
  get: apiAction({
    rest: "GET /contacts/:id",
    operation: "CONTACTS",
    summary: "Get a contact",
    params: contactIdIn,
    responses: { 200: contactOut },
    errors: [404],
    async handler(this: ContactsThis, ctx: Ctx<{ id: string }>): Promise<ContactOut> {
      const row = await findContact(this.sequelize, ctx.meta.companyId, ctx.params.id);
      if (!row) throw new ApiError("CONTACT_NOT_FOUND", `No contact ${ctx.params.id} in this account.`);
      return toContactOut(row);
    },
  }),

  /** Replaces a contact's fields (memberships unchanged). */
  update: apiAction({
    rest: "PUT /contacts/:id",
    operation: "CONTACTS",
    summary: "Replace a contact",
    description: "Replaces the contact's fields: a field left out is cleared. Memberships are not changed.",
    params: updateContactIn,
    responses: { 200: contactOut },
    errors: [404, 409],
    async handler(this: ContactsThis, ctx: Ctx<ContactIn & { id: string }>): Promise<ContactOut> {
      return this.writeContact(ctx, ctx.params.id, "update");
    },
  }),

  /** Deletes a contact and its memberships. */
  remove: apiAction({
    rest: "DELETE /contacts/:id",
    operation: "CONTACTS",
    summary: "Delete a contact",
    description: "Also removes the contact from every list.",
    params: contactIdIn,
    responses: { 204: null },
    errors: [404],
    async handler(this: ContactsThis, ctx: Ctx<{ id: string }>): Promise<null> {
      if (!(await deleteContact(this.sequelize, ctx.meta.companyId, ctx.params.id)))
        throw new ApiError("CONTACT_NOT_FOUND", `No contact ${ctx.params.id} in this account.`);
      ctx.meta.$statusCode = 204;
      return null;
    },
  }),

  /** Internal (campaigns, inbox): the account's contacts among `contactIds` were just sent a message on `channel`: lastContactType (and lastCampaignType) become it. */
  markContacted: apiAction({
    visibility: "public",
    params: markContactedIn,
    async handler(this: ContactsThis, ctx: Ctx<MarkContactedIn>): Promise<{ updated: number }> {
      const { contactIds, channel, campaign } = ctx.params;
      return { updated: await markContacted(this.sequelize, ctx.meta.companyId, contactIds, channel, campaign ?? false) };
    },
  }),

  /** Internal (exports): the SELECT of the account's contacts export with these filters and sort, which exports runs inside a COPY (400: a filter on a custom field not declared). */
  exportStatement: apiAction({
    visibility: "public",
    params: exportStatementIn,
    async handler(this: ContactsThis, ctx: Ctx<ContactExportFilters>): Promise<{ sql: string }> {
      return { sql: await contactExportSelect(this.sequelize, ctx.meta.companyId, ctx.params) };
    },
  }),

  /** The account's custom field declarations. */
  listCustomFields: apiAction({
    rest: "GET /contacts/custom-fields",
    operation: "CONTACTS",
    summary: "List custom fields",
    params: emptyIn,
    responses: { 200: customFieldList },
    async handler(this: ContactsThis, ctx: Ctx<object>): Promise<{ data: CustomFieldOut[] }> {
      const rows = await customFieldRows(this.sequelize, ctx.meta.companyId);
      return { data: rows.map(toCustomFieldOut) };
    },
  }),

  /** Declares a custom field (key and type) on the account. */
  createCustomField: apiAction({
    rest: "POST /contacts/custom-fields",
    operation: "CONTACTS",
    summary: "Declare a custom field",
    params: customFieldIn,
    responses: { 201: customFieldOut },
    errors: [409],
    async handler(this: ContactsThis, ctx: Ctx<{ key: string; type: CustomFieldType }>): Promise<CustomFieldOut> {
      const row = await insertCustomField(this.sequelize, ctx.meta.companyId, ctx.params.key, ctx.params.type);
      if (!row) throw new ApiError("CUSTOM_FIELD_EXISTS", `The custom field ${ctx.params.key} exists already.`);
      ctx.meta.$statusCode = 201;
      ctx.meta.$location = `${API_PREFIX}/contacts/custom-fields`;
      return toCustomFieldOut(row);
    },
  }),

  /** Removes a custom field declaration and its values from every contact of the account. */
  removeCustomField: apiAction({
    timeout: 300_000, // removes the values from every contact of the account
    rest: "DELETE /contacts/custom-fields/:key",
    operation: "CONTACTS",
    summary: "Remove a custom field",
    description: "Its values are removed from every contact of the account.",
    params: customFieldKeyIn,
    responses: { 204: null },
    errors: [404],
    async handler(this: ContactsThis, ctx: Ctx<{ key: string }>): Promise<null> {
      const { companyId } = ctx.meta;
      const { key } = ctx.params;
      const heavy = { companyId, slots: this.heavyOpsPerAccount, statementTimeoutMs: statementBudgetMs(ctx), gate: this.heavyGate };
      const gone = await withHeavySlot(this.sequelize, heavy, (transaction) => deleteCustomField(this.sequelize, companyId, key, transaction));
      if (!gone) throw new ApiError("CUSTOM_FIELD_NOT_FOUND", `No custom field ${key} in this account.`);
      ctx.meta.$statusCode = 204;
      return null;
    },
  }),
};

export const contactMethods = {
  /** The account's declarations; `lock` holds them (FOR SHARE) until the transaction ends, so a removal waits for writers. */
  customTypes(this: ContactsThis, companyId: string, transaction?: Transaction, lock = false): Promise<Map<string, CustomFieldType>> {
    return customFieldTypes(this.sequelize, companyId, transaction, lock);
  },

  /** A page of the account's contacts by every filter of spec part 2. */
  async findContacts(this: ContactsThis, companyId: string, params: ListContactsIn): Promise<Page<ContactOut>> {
    const page = async () => contactsPage(this.sequelize, companyId, params, await this.customTypes(companyId));
    // A search (a substring of names, numbers and emails) is a heavy read: the account's share of the node's slots.
    return params.search ? this.heavyGate.run(companyId, page) : page();
  },

  /** Inserts or replaces one contact, checking phone, email and custom fields; 409 names the holder. */
  async writeContact(this: ContactsThis, ctx: Ctx<ContactIn & { id?: string }>, id: string, mode: "insert" | "update"): Promise<ContactOut> {
    const p = ctx.params;
    const { companyId } = ctx.meta;
    const errors: FieldError[] = [];
    const phone = p.phoneNumber == null ? null : toE164(p.phoneNumber);
    if (p.phoneNumber != null && !phone) errors.push({ path: "phoneNumber", message: PHONE_ERROR });
    const email = p.email == null ? null : normalizeEmail(p.email);
    if (p.phoneNumber == null && p.email == null) errors.push({ path: "phoneNumber", message: "a phone number or an email is required" });
    const customFields = p.customFields ?? {};
    try {
      return await this.sequelize.transaction(async (transaction) => {
        if (mode === "update") {
          if (!(await lockContact(this.sequelize, companyId, id, transaction))) throw new ApiError("CONTACT_NOT_FOUND", `No contact ${id} in this account.`);
        }
        errors.push(...checkCustomFields(customFields, await this.customTypes(companyId, transaction, true)));
        if (errors.length) throw new ApiError("VALIDATION_ERROR", "The contact has invalid or missing fields.", { errors });
        const holder = await contactHolding(this.sequelize, { companyId, id, phone, email }, transaction);
        if (holder) {
          const what = phone && holder.phone_number === phone ? "phone number" : "email";
          throw new ApiError("CONTACT_EXISTS", `Contact ${holder.id} of this account has this ${what}.`, { existingId: holder.id });
        }
        const values = {
          companyId,
          id,
          firstName: p.firstName ?? null,
          lastName: p.lastName ?? null,
          gender: p.gender ?? null,
          phone,
          email,
          customFields: JSON.stringify(customFields),
          isTest: p.isTest ?? false,
        };
        const row = await writeContactRow(this.sequelize, mode, values, transaction);
        if (!row) throw new ApiError("CONTACT_NOT_FOUND", `No contact ${id} in this account.`);
        return toContactOut(row);
      });
    } catch (err) {
      // Another request took the phone number or email between our check and our write.
      if ((err as Error).name !== "SequelizeUniqueConstraintError") throw err;
      const holder = await contactHoldingEither(this.sequelize, { companyId, id, phone, email });
      throw new ApiError("CONTACT_EXISTS", "Another contact of this account has this phone number or email.", holder ? { existingId: holder.id } : undefined);
    }
  },
};
