/**
 * Contacts, custom fields, contact lists and memberships on the wire (spec parts 2 and 4, contract
 * section 4); the lists and memberships are written in contacts.lists.schemas.ts.
 */
import { pageSchema, pagingProperties, type Page, type PageIn } from "../../lib/http/paging";
import type { PropertiesOf, SchemaOf, Subschema } from "../../lib/http/schema-type";
import { CHANNELS, type Channel } from "../../lib/messaging/channels";
import { PHONE_NUMBER_SCHEMA } from "../../lib/messaging/phone";
import { MESSAGE_KEYWORD } from "../../lib/http/schema-messages";
import { dateTime, uuid } from "./contacts.fields.schemas";
import {
  CONTACT_SORTS,
  contactExportProperties,
  contactFilterProperties,
  CUSTOM_FIELD_TYPES,
  customFieldFilter,
  GENDERS,
  listId,
  type ContactExportFilters,
  type ContactFilters,
  type ContactSort,
  type CustomFieldType,
  type Gender,
} from "./contacts.contract";

export * from "./contacts.lists.schemas";

export const CUSTOM_KEY = "^[A-Za-z][A-Za-z0-9_]{0,63}$";

export type CustomValue = string | number | boolean;

export interface ContactOut {
  id: string;
  firstName: string | null;
  lastName: string | null;
  gender: Gender | null;
  phoneNumber: string | null;
  email: string | null;
  customFields: Record<string, CustomValue>;
  isTest: boolean;
  isValid: boolean;
  communicationSupported: Channel[];
  lastContactType: Channel | null;
  lastCampaignType: Channel | null;
  optedOut: Channel[];
  createdAt: string;
  updatedAt: string;
}

export const contactOut = {
  $id: "Contact",
  type: "object",
  additionalProperties: false,
  required: [
    "id",
    "firstName",
    "lastName",
    "gender",
    "phoneNumber",
    "email",
    "customFields",
    "isTest",
    "isValid",
    "communicationSupported",
    "lastContactType",
    "lastCampaignType",
    "optedOut",
    "createdAt",
    "updatedAt",
  ],
  properties: {
    id: uuid,
    firstName: { type: "string", nullable: true, examples: ["Ana"] },
    lastName: { type: "string", nullable: true, examples: ["Silva"] },
    gender: { type: "string", enum: [...GENDERS, null], nullable: true },
    phoneNumber: { type: "string", nullable: true, description: "E.164", examples: ["+351912345678"] },
    email: { type: "string", nullable: true, examples: ["ana@example.com"] },
    customFields: { type: "object", additionalProperties: { type: ["string", "number", "boolean"] }, examples: [{ tier: "gold" }] },
    isTest: { type: "boolean" },
    isValid: { type: "boolean", description: "Reachable on at least one of phone or email." },
    communicationSupported: { type: "array", items: { type: "string", enum: [...CHANNELS] } },
    lastContactType: { type: "string", enum: [...CHANNELS, null], nullable: true },
    lastCampaignType: { type: "string", enum: [...CHANNELS, null], nullable: true },
    optedOut: {
      type: "array",
      items: { type: "string", enum: [...CHANNELS] },
      readOnly: true,
      description:
        "The channels the contact's phone number opted out of in this account (`GET /contacts/opt-outs`); campaigns skip it there. Read only: it belongs to the number, not the contact.",
    },
    createdAt: dateTime,
    updatedAt: dateTime,
  },
} satisfies SchemaOf<ContactOut>;

export interface ContactIn {
  firstName?: string | null;
  lastName?: string | null;
  gender?: Gender | null;
  phoneNumber?: string | null;
  email?: string | null;
  customFields?: Record<string, CustomValue>;
  isTest?: boolean;
}
export type UpdateContactIn = ContactIn & { id: string };
export type ContactIdIn = { id: string };

const contactInProperties = {
  firstName: { type: "string", maxLength: 200, nullable: true, examples: ["Ana"] },
  lastName: { type: "string", maxLength: 200, nullable: true, examples: ["Silva"] },
  gender: { type: "string", enum: [...GENDERS, null], nullable: true },
  phoneNumber: {
    ...PHONE_NUMBER_SCHEMA,
    nullable: true,
    description: "International format: `+` or `00` and the country code, then a number valid in that country (any spacing); stored as E.164.",
    examples: ["+351 912 345 678"],
  },
  email: { type: "string", format: "email", maxLength: 254, nullable: true, examples: ["ana@example.com"] },
  customFields: {
    type: "object",
    maxProperties: 100,
    propertyNames: { pattern: CUSTOM_KEY },
    additionalProperties: { type: ["string", "number", "boolean"], maxLength: 2000 },
    description:
      "Only fields declared on the account (`GET /contacts/custom-fields`), each of its declared type: TEXT a string of at most 2000 characters, NUMBER a number, DATE a string `YYYY-MM-DD` that is a real date, BOOLEAN true or false. Another key or type is a 400.",
    examples: [{ tier: "gold" }],
  },
  isTest: { type: "boolean" },
} satisfies PropertiesOf<ContactIn>;

/** At least one of phoneNumber and email, and not null (what the service checks, said where the document shows it). */
const phoneOrEmail = {
  anyOf: [
    { required: ["phoneNumber"], properties: { phoneNumber: { type: "string" } } },
    { required: ["email"], properties: { email: { type: "string" } } },
  ],
  [MESSAGE_KEYWORD]: "a phone number or an email is required",
} satisfies Subschema<ContactIn>;

export const createContactIn = {
  $id: "ContactIn",
  type: "object",
  additionalProperties: false,
  description: "At least one of phoneNumber and email.",
  properties: contactInProperties,
  ...phoneOrEmail,
} satisfies SchemaOf<ContactIn>;

export const updateContactIn = {
  $id: "ContactUpdateIn",
  type: "object",
  additionalProperties: false,
  required: ["id"],
  description: "Replaces the contact's fields: a field left out is cleared. At least one of phoneNumber and email.",
  properties: { id: uuid, ...contactInProperties },
  ...phoneOrEmail,
} satisfies SchemaOf<UpdateContactIn>;

export const contactIdIn = {
  $id: "ContactIdIn",
  type: "object",
  additionalProperties: false,
  required: ["id"],
  properties: { id: uuid },
} satisfies SchemaOf<ContactIdIn>;

export type ListContactsIn = ContactFilters & PageIn<ContactSort>;

export const listContactsIn = {
  $id: "ListContactsIn",
  type: "object",
  additionalProperties: false,
  description:
    "Filters combine with AND. `customFields.<key>=value` filters by a declared custom field: a key the account does not declare, or a value not of the field's type (NUMBER a number, DATE `YYYY-MM-DD`, BOOLEAN `true` or `false`), is a 400.",
  properties: { ...contactFilterProperties, ...pagingProperties(CONTACT_SORTS, "fullName") },
  patternProperties: customFieldFilter,
} satisfies SchemaOf<ListContactsIn>;

/** A list's contacts: GET /contacts's filters but `listIds` (the path names the list). */
export type ListMembersIn = Omit<ListContactsIn, "listIds"> & { listId: number };
const { listIds: _fixedByThePath, ...memberFilterProperties } = contactFilterProperties;
export const listMembersIn = {
  $id: "ListMembersIn",
  type: "object",
  additionalProperties: false,
  required: ["listId"],
  properties: { listId, ...memberFilterProperties, ...pagingProperties(CONTACT_SORTS, "fullName") },
  patternProperties: customFieldFilter,
} satisfies SchemaOf<ListMembersIn>;

export const contactPage = pageSchema("ContactPage", contactOut) satisfies SchemaOf<Page<ContactOut>>;

// --- custom fields

export interface CustomFieldOut {
  key: string;
  type: CustomFieldType;
  createdAt: string;
}
export type CustomFieldIn = { key: string; type: CustomFieldType };
export type CustomFieldKeyIn = { key: string };
export type EmptyIn = Record<string, never>;
export const customFieldOut = {
  $id: "CustomField",
  type: "object",
  additionalProperties: false,
  required: ["key", "type", "createdAt"],
  properties: {
    key: { type: "string", pattern: CUSTOM_KEY, examples: ["tier"] },
    type: { type: "string", enum: [...CUSTOM_FIELD_TYPES] },
    createdAt: dateTime,
  },
} satisfies SchemaOf<CustomFieldOut>;
export const customFieldIn = {
  $id: "CustomFieldIn",
  type: "object",
  additionalProperties: false,
  required: ["key", "type"],
  properties: { key: { type: "string", pattern: CUSTOM_KEY, examples: ["tier"] }, type: { type: "string", enum: [...CUSTOM_FIELD_TYPES] } },
} satisfies SchemaOf<CustomFieldIn>;
export const customFieldKeyIn = {
  $id: "CustomFieldKeyIn",
  type: "object",
  additionalProperties: false,
  required: ["key"],
  properties: { key: { type: "string", pattern: CUSTOM_KEY, examples: ["tier"] } },
} satisfies SchemaOf<CustomFieldKeyIn>;
export const customFieldList = {
  $id: "CustomFieldList",
  type: "object",
  additionalProperties: false,
  required: ["data"],
  properties: { data: { type: "array", items: customFieldOut } },
} satisfies SchemaOf<{ data: CustomFieldOut[] }>;
export const emptyIn = { $id: "EmptyIn", type: "object", additionalProperties: false, properties: {} } satisfies SchemaOf<EmptyIn>;

// --- what other services call

export interface MarkContactedIn {
  contactIds: string[];
  channel: Channel;
  /** Also lastCampaignType (a campaign's message), besides lastContactType. */
  campaign?: boolean;
}

export const markContactedIn = {
  $id: "MarkContactedIn",
  type: "object",
  additionalProperties: false,
  required: ["contactIds", "channel"],
  properties: {
    contactIds: { type: "array", items: uuid, minItems: 1, maxItems: 1000 },
    channel: { type: "string", enum: [...CHANNELS] },
    campaign: { type: "boolean" },
  },
} satisfies SchemaOf<MarkContactedIn>;

/** `contacts.exportStatement` (internal, the exports service): the contacts export's filters and sort; the account is the caller's. */
export const exportStatementIn = {
  $id: "ContactsExportStatementIn",
  type: "object",
  additionalProperties: false,
  properties: contactExportProperties,
  patternProperties: customFieldFilter,
} satisfies SchemaOf<ContactExportFilters>;
