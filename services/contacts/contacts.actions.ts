/**
 * Contacts and their custom fields: the actions, and the helpers the list actions share.
 */
import { randomUUID } from "node:crypto";
import type { Context } from "moleculer";
import { QueryTypes, type Sequelize, type Transaction } from "sequelize";
import { API_PREFIX, apiAction, type AuthMeta } from "../../lib/api";
import { ApiError, type FieldError } from "../../lib/errors";
import { queryPage, type Page } from "../../lib/paging";
import { CONTACT_COLUMNS, toContactOut, toCustomFieldOut, type ContactRow, type CustomFieldRow } from "./contacts.models";
import { checkCustomFields, normalizeEmail, PHONE_ERROR, toE164 } from "./contacts.normalize";
import { contactOrder, contactWhere } from "./contacts.contract";
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
  listContactsIn,
  updateContactIn,
  type ContactIn,
  type ContactOut,
  type CustomFieldOut,
  type CustomFieldType,
  type ListContactsIn,
} from "./contacts.schemas";

export interface ContactsThis {
  sequelize: Sequelize;
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
      const [row] = await this.sequelize.query<ContactRow>(`SELECT ${CONTACT_COLUMNS} FROM contacts c WHERE c.company_id = :companyId AND c.id = :id`, {
        replacements: { companyId: ctx.meta.companyId, id: ctx.params.id },
        type: QueryTypes.SELECT,
      });
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
      const rows = await this.sequelize.query(`DELETE FROM contacts WHERE company_id = :companyId AND id = :id RETURNING id`, {
        replacements: { companyId: ctx.meta.companyId, id: ctx.params.id },
        type: QueryTypes.SELECT,
      });
      if (rows.length === 0) throw new ApiError("CONTACT_NOT_FOUND", `No contact ${ctx.params.id} in this account.`);
      ctx.meta.$statusCode = 204;
      return null;
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
      const rows = await this.sequelize.query<CustomFieldRow>(
        `SELECT key, type, created_at FROM contact_custom_fields WHERE company_id = :companyId ORDER BY key`,
        {
          replacements: { companyId: ctx.meta.companyId },
          type: QueryTypes.SELECT,
        },
      );
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
      const [row] = await this.sequelize.query<CustomFieldRow>(
        `INSERT INTO contact_custom_fields (company_id, key, type) VALUES (:companyId, :key, :type)
         ON CONFLICT (company_id, key) DO NOTHING RETURNING key, type, created_at`,
        { replacements: { companyId: ctx.meta.companyId, ...ctx.params }, type: QueryTypes.SELECT },
      );
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
      await this.sequelize.transaction(async (transaction) => {
        const gone = await this.sequelize.query(`DELETE FROM contact_custom_fields WHERE company_id = :companyId AND key = :key RETURNING key`, {
          replacements: { companyId, key },
          type: QueryTypes.SELECT,
          transaction,
        });
        if (gone.length === 0) throw new ApiError("CUSTOM_FIELD_NOT_FOUND", `No custom field ${key} in this account.`);
        await this.sequelize.query(
          `UPDATE contacts SET custom_fields = custom_fields - :key WHERE company_id = :companyId AND jsonb_exists(custom_fields, :key)`,
          {
            replacements: { companyId, key },
            transaction,
          },
        );
      });
      ctx.meta.$statusCode = 204;
      return null;
    },
  }),
};

export const contactMethods = {
  /** The account's declarations; `lock` holds them (FOR SHARE) until the transaction ends, so a removal waits for writers. */
  async customTypes(this: ContactsThis, companyId: string, transaction?: Transaction, lock = false) {
    const rows = await this.sequelize.query<{ key: string; type: CustomFieldType }>(
      `SELECT key, type FROM contact_custom_fields WHERE company_id = :companyId${lock ? " FOR SHARE" : ""}`,
      {
        replacements: { companyId },
        type: QueryTypes.SELECT,
        transaction,
      },
    );
    return new Map(rows.map((r) => [r.key, r.type]));
  },

  async findContacts(this: ContactsThis, companyId: string, params: ListContactsIn): Promise<Page<ContactOut>> {
    const { page, limit, sortBy, sortOrder } = params;
    const where = contactWhere(companyId, params, await this.customTypes(companyId));
    const order = contactOrder(sortBy, sortOrder);
    // Deferred join: the page's ids come from the (index-only) sort order, the rows only for them.
    return queryPage(this.sequelize, {
      select: `SELECT ${CONTACT_COLUMNS} FROM contacts c
                 JOIN (SELECT c.id FROM contacts c WHERE ${where.sql} ${order} LIMIT :limit OFFSET :offset) page USING (id) ${order}`,
      count: `SELECT count(*) AS total FROM contacts c WHERE ${where.sql}`,
      replacements: where.replacements,
      page,
      limit,
      map: toContactOut,
    });
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
          const [own] = await this.sequelize.query(`SELECT id FROM contacts WHERE company_id = :companyId AND id = :id FOR UPDATE`, {
            replacements: { companyId, id },
            type: QueryTypes.SELECT,
            transaction,
          });
          if (!own) throw new ApiError("CONTACT_NOT_FOUND", `No contact ${id} in this account.`);
        }
        errors.push(...checkCustomFields(customFields, await this.customTypes(companyId, transaction, true)));
        if (errors.length) throw new ApiError("VALIDATION_ERROR", "The contact has invalid or missing fields.", { errors });
        const [holder] = await this.sequelize.query<{ id: string; phone_number: string | null }>(
          `SELECT id, phone_number FROM contacts WHERE company_id = :companyId AND id <> :id
            AND ((phone_number = :phone AND :phone IS NOT NULL) OR (email = :email AND :email IS NOT NULL)) LIMIT 1`,
          { replacements: { companyId, id, phone, email }, type: QueryTypes.SELECT, transaction },
        );
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
        // SMS is supported wherever there is a phone number; RCS and WhatsApp come from delivery receipts.
        const sql =
          mode === "insert"
            ? `INSERT INTO contacts (id, company_id, first_name, last_name, gender, phone_number, email, custom_fields, is_test, communication_supported)
             VALUES (:id, :companyId, :firstName, :lastName, :gender, :phone, :email, CAST(:customFields AS jsonb), :isTest,
                     CASE WHEN CAST(:phone AS text) IS NULL THEN '{}'::text[] ELSE ARRAY['SMS'] END)
             RETURNING ${CONTACT_COLUMNS}`
            : `UPDATE contacts SET first_name = :firstName, last_name = :lastName, gender = :gender, email = :email, custom_fields = CAST(:customFields AS jsonb),
                 is_test = :isTest, updated_at = now(),
                 communication_supported = CASE
                   WHEN CAST(:phone AS text) IS NULL THEN '{}'::text[]
                   WHEN phone_number IS DISTINCT FROM CAST(:phone AS text) THEN ARRAY['SMS']
                   ELSE communication_supported END,
                 phone_number = :phone
               WHERE company_id = :companyId AND id = :id
             RETURNING ${CONTACT_COLUMNS}`;
        const [row] = await this.sequelize.query<ContactRow>(sql, { replacements: values, type: QueryTypes.SELECT, transaction });
        if (!row) throw new ApiError("CONTACT_NOT_FOUND", `No contact ${id} in this account.`);
        return toContactOut(row);
      });
    } catch (err) {
      // Another request took the phone number or email between our check and our write.
      if ((err as Error).name !== "SequelizeUniqueConstraintError") throw err;
      const [holder] = await this.sequelize.query<{ id: string }>(
        `SELECT id FROM contacts WHERE company_id = :companyId AND id <> :id AND (phone_number = :phone OR email = :email) LIMIT 1`,
        { replacements: { companyId, id, phone, email }, type: QueryTypes.SELECT },
      );
      throw new ApiError("CONTACT_EXISTS", "Another contact of this account has this phone number or email.", holder ? { existingId: holder.id } : undefined);
    }
  },
};
