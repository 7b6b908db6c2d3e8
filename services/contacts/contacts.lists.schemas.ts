/** Contact lists and memberships on the wire (spec parts 2 and 4, contract section 4); contacts.schemas.ts exports them too. */
import { pageSchema, pagingProperties, type Page, type PageIn } from "../../lib/http/paging";
import type { PropertiesOf, SchemaOf } from "../../lib/http/schema-type";
import { dateTime, uuid } from "./contacts.fields.schemas";
import { listId } from "./contacts.contract";

/** Bulk bodies name at most this many contacts. */
export const MAX_BULK_IDS = 10000;

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
} satisfies SchemaOf<ListOut>;
export const listPage = pageSchema("ContactListPage", listOut) satisfies SchemaOf<Page<ListOut>>;

export interface ListIn {
  name: string;
  description?: string | null;
  isTest?: boolean;
}
export type UpdateListIn = ListIn & { id: number };
export type ListIdIn = { id: number };
const listInProperties = {
  name: { type: "string", minLength: 1, maxLength: 200, examples: ["VIP customers"] },
  description: { type: "string", maxLength: 2000, nullable: true },
  isTest: { type: "boolean", description: "A list used only for test sends." },
} satisfies PropertiesOf<ListIn>;
export const createListIn = {
  $id: "ContactListIn",
  type: "object",
  additionalProperties: false,
  required: ["name"],
  properties: listInProperties,
} satisfies SchemaOf<ListIn>;
export const updateListIn = {
  $id: "ContactListUpdateIn",
  type: "object",
  additionalProperties: false,
  required: ["id", "name"],
  description: "Replaces name, description and isTest (left out: cleared / false). Membership is not changed.",
  properties: { id: listId, ...listInProperties },
} satisfies SchemaOf<UpdateListIn>;
export const listIdIn = {
  $id: "ContactListIdIn",
  type: "object",
  additionalProperties: false,
  required: ["id"],
  properties: { id: listId },
} satisfies SchemaOf<ListIdIn>;

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
} satisfies SchemaOf<FindListsIn>;
export type DeleteListsIn = { ids: number[] };
export type DeleteListsOut = { deleted: number[]; notFound: number[] };
export const deleteListsIn = {
  $id: "DeleteContactListsIn",
  type: "object",
  additionalProperties: false,
  required: ["ids"],
  properties: { ids: { type: "array", items: listId, minItems: 1, maxItems: 1000, description: "Comma-separated list ids." } },
} satisfies SchemaOf<DeleteListsIn>;
export const deleteListsOut = {
  $id: "DeleteContactListsOut",
  type: "object",
  additionalProperties: false,
  required: ["deleted", "notFound"],
  properties: { deleted: { type: "array", items: listId }, notFound: { type: "array", items: listId } },
} satisfies SchemaOf<DeleteListsOut>;

export interface MembershipIn {
  listIds: number[];
  contactIds?: string[];
  allContacts: boolean;
  excludeIdsAllContacts?: string[];
}
export type AddMembersOut = { ids: number[]; idsTruncated?: boolean; created: number; existing: number };
export type RemoveMembersOut = { deleted: number };
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
} satisfies PropertiesOf<MembershipIn>;
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
} satisfies SchemaOf<MembershipIn>;
export const removeMembersIn = {
  ...addMembersIn,
  $id: "RemoveMembersIn",
  description: "contactIds is required unless allContacts is true.",
} satisfies SchemaOf<MembershipIn>;
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
} satisfies SchemaOf<AddMembersOut>;
export const removeMembersOut = {
  $id: "RemoveMembersOut",
  type: "object",
  additionalProperties: false,
  required: ["deleted"],
  properties: { deleted: { type: "integer", minimum: 0 } },
} satisfies SchemaOf<RemoveMembersOut>;
export const associationIdIn = {
  $id: "AssociationIdIn",
  type: "object",
  additionalProperties: false,
  required: ["id"],
  properties: { id: listId },
} satisfies SchemaOf<ListIdIn>;
