/**
 * Contacts, custom fields, contact lists and memberships on the wire (spec parts 2 and 4, contract
 * section 4).
 */
import { pageSchema, pagingProperties, type PageIn } from "../../lib/paging";
import { CHANNELS, type Channel } from "../../lib/channels";
import { PHONE_NUMBER_SCHEMA } from "../../lib/phone";
import { MESSAGE_KEYWORD } from "../../lib/schema-messages";
import { dateTime, uuid } from "./contacts.fields.schemas";
import {
  CONTACT_SORTS,
  contactFilterProperties,
  CUSTOM_FIELD_TYPES,
  customFieldFilter,
  GENDERS,
  listId,
  type ContactFilters,
  type ContactSort,
  type CustomFieldType,
  type Gender,
} from "./contacts.contract";

export const CUSTOM_KEY = "^[A-Za-z][A-Za-z0-9_]{0,63}$";
/** Bulk bodies name at most this many contacts. */
export const MAX_BULK_IDS = 10000;

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
};

export interface ContactIn {
  firstName?: string | null;
  lastName?: string | null;
  gender?: Gender | null;
  phoneNumber?: string | null;
  email?: string | null;
  customFields?: Record<string, CustomValue>;
  isTest?: boolean;
}

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
};

/** At least one of phoneNumber and email, and not null (what the service checks, said where the document shows it). */
const phoneOrEmail = {
  anyOf: [
    { required: ["phoneNumber"], properties: { phoneNumber: { type: "string" } } },
    { required: ["email"], properties: { email: { type: "string" } } },
  ],
  [MESSAGE_KEYWORD]: "a phone number or an email is required",
};

export const createContactIn = {
  $id: "ContactIn",
  type: "object",
  additionalProperties: false,
  description: "At least one of phoneNumber and email.",
  properties: contactInProperties,
  ...phoneOrEmail,
};

export const updateContactIn = {
  $id: "ContactUpdateIn",
  type: "object",
  additionalProperties: false,
  required: ["id"],
  description: "Replaces the contact's fields: a field left out is cleared. At least one of phoneNumber and email.",
  properties: { id: uuid, ...contactInProperties },
  ...phoneOrEmail,
};

export const contactIdIn = { $id: "ContactIdIn", type: "object", additionalProperties: false, required: ["id"], properties: { id: uuid } };

export type ListContactsIn = ContactFilters & PageIn<ContactSort>;

export const listContactsIn = {
  $id: "ListContactsIn",
  type: "object",
  additionalProperties: false,
  description:
    "Filters combine with AND. `customFields.<key>=value` filters by a declared custom field: a key the account does not declare, or a value not of the field's type (NUMBER a number, DATE `YYYY-MM-DD`, BOOLEAN `true` or `false`), is a 400.",
  properties: { ...contactFilterProperties, ...pagingProperties(CONTACT_SORTS, "fullName") },
  patternProperties: customFieldFilter,
};

const { listIds: _fixedByThePath, ...memberFilterProperties } = contactFilterProperties;
export const listMembersIn = {
  $id: "ListMembersIn",
  type: "object",
  additionalProperties: false,
  required: ["listId"],
  properties: { listId, ...memberFilterProperties, ...pagingProperties(CONTACT_SORTS, "fullName") },
  patternProperties: customFieldFilter,
};

export const contactPage = pageSchema("ContactPage", contactOut);

// --- custom fields

export interface CustomFieldOut {
  key: string;
  type: CustomFieldType;
  createdAt: string;
}
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
};
export const customFieldIn = {
  $id: "CustomFieldIn",
  type: "object",
  additionalProperties: false,
  required: ["key", "type"],
  properties: { key: { type: "string", pattern: CUSTOM_KEY, examples: ["tier"] }, type: { type: "string", enum: [...CUSTOM_FIELD_TYPES] } },
};
export const customFieldKeyIn = {
  $id: "CustomFieldKeyIn",
  type: "object",
  additionalProperties: false,
  required: ["key"],
  properties: { key: { type: "string", pattern: CUSTOM_KEY, examples: ["tier"] } },
};
export const customFieldList = {
  $id: "CustomFieldList",
  type: "object",
  additionalProperties: false,
  required: ["data"],
  properties: { data: { type: "array", items: customFieldOut } },
};
export const emptyIn = { $id: "EmptyIn", type: "object", additionalProperties: false, properties: {} };

// --- contact lists and memberships

export interface ListOut {
  id: number;
  name: string;
  description: string | null;
  isTest: boolean;
  createdAt: string;
  updatedAt: string;
  contactCount: number;
  deleted: boolean;
  deletedAt: string | null;
}
export const listOut = {
  $id: "ContactList",
  type: "object",
  additionalProperties: false,
  required: ["id", "name", "description", "isTest", "createdAt", "updatedAt", "contactCount", "deleted", "deletedAt"],
  properties: {
    id: listId,
    name: { type: "string", examples: ["VIP customers"] },
    description: { type: "string", nullable: true, examples: ["Spent over 1000 last year"] },
    isTest: { type: "boolean" },
    createdAt: dateTime,
    updatedAt: dateTime,
    contactCount: { type: "integer", minimum: 0 },
    deleted: { type: "boolean" },
    deletedAt: { ...dateTime, nullable: true },
  },
};
export const listPage = pageSchema("ContactListPage", listOut);

export interface ListIn {
  name: string;
  description?: string | null;
  isTest?: boolean;
}
const listInProperties = {
  name: { type: "string", minLength: 1, maxLength: 200, examples: ["VIP customers"] },
  description: { type: "string", maxLength: 2000, nullable: true },
  isTest: { type: "boolean", description: "A list used only for test sends." },
};
export const createListIn = { $id: "ContactListIn", type: "object", additionalProperties: false, required: ["name"], properties: listInProperties };
export const updateListIn = {
  $id: "ContactListUpdateIn",
  type: "object",
  additionalProperties: false,
  required: ["id", "name"],
  description: "Replaces name, description and isTest (left out: cleared / false). Membership is not changed.",
  properties: { id: listId, ...listInProperties },
};
export const listIdIn = { $id: "ContactListIdIn", type: "object", additionalProperties: false, required: ["id"], properties: { id: listId } };

export const LIST_SORTS = ["name", "createdAt", "updatedAt", "id"] as const;
export type ListSort = (typeof LIST_SORTS)[number];
export interface FindListsIn extends PageIn<ListSort> {
  search?: string;
  id?: number[];
  contactIds?: string[];
  isTest?: boolean;
  includeDeleted: boolean;
}
export const findListsIn = {
  $id: "FindContactListsIn",
  type: "object",
  additionalProperties: false,
  properties: {
    search: { type: "string", minLength: 1, maxLength: 200, description: "Case-insensitive part of the name." },
    id: { type: "array", items: listId, minItems: 1, maxItems: 1000, description: "Only these list ids (comma-separated)." },
    contactIds: { type: "array", items: uuid, minItems: 1, maxItems: 1000, description: "Only lists that contain any of these contacts (comma-separated)." },
    isTest: { type: "boolean", description: "true: only test lists; false: no test lists." },
    includeDeleted: { type: "boolean", default: false },
    ...pagingProperties(LIST_SORTS, "name"),
  },
};
export const deleteListsIn = {
  $id: "DeleteContactListsIn",
  type: "object",
  additionalProperties: false,
  required: ["ids"],
  properties: { ids: { type: "array", items: listId, minItems: 1, maxItems: 1000, description: "Comma-separated list ids." } },
};
export const deleteListsOut = {
  $id: "DeleteContactListsOut",
  type: "object",
  additionalProperties: false,
  required: ["deleted", "notFound"],
  properties: { deleted: { type: "array", items: listId }, notFound: { type: "array", items: listId } },
};

export interface MembershipIn {
  listIds: number[];
  contactIds?: string[];
  allContacts: boolean;
  excludeIdsAllContacts?: string[];
}
const membershipProperties = {
  listIds: { type: "array", items: listId, minItems: 1, maxItems: 100, description: "Repeats are ignored." },
  contactIds: {
    type: "array",
    items: uuid,
    maxItems: MAX_BULK_IDS,
    description: "Repeats are ignored. At least one unless allContacts is true (then it may be empty and is not used).",
  },
  allContacts: { type: "boolean", default: false, description: "All contacts of the account, except excludeIdsAllContacts." },
  excludeIdsAllContacts: { type: "array", items: uuid, maxItems: MAX_BULK_IDS },
};
export const addMembersIn = {
  $id: "AddMembersIn",
  type: "object",
  additionalProperties: false,
  required: ["listIds"],
  description: "Either contactIds, or allContacts: true (with optional excludeIdsAllContacts).",
  properties: membershipProperties,
  // contactIds names at least one contact, except beside allContacts: true (contract: an empty list is accepted there).
  // Its items are checked once, above: repeating `items` here reported every bad id twice.
  if: { properties: { allContacts: { const: true } }, required: ["allContacts"] },
  then: {},
  else: { required: ["contactIds"], properties: { contactIds: { type: "array", items: {}, minItems: 1 } } },
};
export const removeMembersIn = { ...addMembersIn, $id: "RemoveMembersIn", description: "contactIds is required unless allContacts is true." };
export const addMembersOut = {
  $id: "AddMembersOut",
  type: "object",
  additionalProperties: false,
  required: ["ids", "created", "existing"],
  properties: {
    ids: { type: "array", items: listId, description: "Ids of the associations created (the first 1000 in id order when more)." },
    idsTruncated: { type: "boolean", description: "Present and true when more associations were created than `ids` lists." },
    created: { type: "integer", minimum: 0 },
    existing: { type: "integer", minimum: 0, description: "Contacts that were in the list already (kept, not duplicated)." },
  },
};
export const removeMembersOut = {
  $id: "RemoveMembersOut",
  type: "object",
  additionalProperties: false,
  required: ["deleted"],
  properties: { deleted: { type: "integer", minimum: 0 } },
};
export const associationIdIn = { $id: "AssociationIdIn", type: "object", additionalProperties: false, required: ["id"], properties: { id: listId } };

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
};
