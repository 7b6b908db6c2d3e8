/**
 * What other services may import from contacts: the contact filters of GET /contacts (schema pieces
 * and types, which the contacts export takes too). Opt-outs (contract section 7; the table
 * `opt_outs` is this service's alone): the body of `contacts.applyOptOuts`, through which inbox
 * (keywords) and tracking's ingress (upstream reports) hand changes over. No SQL: the contacts
 * export's statement is asked of `contacts.exportStatement` (contacts.export.ts).
 *
 * The read-only views contacts publishes (migration 0029), which others read in SQL of their own:
 * `contacts_opted_out (company_id, channel, phone_number)`, `contacts_existing (company_id, id)`,
 * `contacts_live_lists (company_id, id, is_test)`, `contacts_live_list_members (company_id,
 * list_id, contact_id, is_test)` and `contacts_reachable (company_id, id, phone_number, first_name,
 * last_name, custom_fields, communication_refused)`. Their columns are the promise; the tables
 * behind them are contacts' own. `contacts_feed_positions (feed, tx, id)` (migration 0034): how far
 * contacts has followed tracking's status feed, so that tracking drops only days it has read.
 */
import { CHANNELS, type Channel } from "../../lib/messaging/channels";
import { UUID_PATTERN } from "../../lib/http/validator";
import { PHONE_NUMBER_SCHEMA } from "../../lib/messaging/phone";
import { callerOf, type Action } from "../../lib/bus/calls";
import { pagingProperties } from "../../lib/http/paging";
import type { MarkContactedIn } from "./contacts.schemas";

/** The view of contacts' cursors on the feeds it follows (migration 0034). */
export const CONTACTS_FEED_POSITIONS_VIEW = "contacts_feed_positions";

export const GENDERS = ["MALE", "FEMALE", "OTHER"] as const;
export type Gender = (typeof GENDERS)[number];
export const CUSTOM_FIELD_TYPES = ["TEXT", "NUMBER", "DATE", "BOOLEAN"] as const;
export type CustomFieldType = (typeof CUSTOM_FIELD_TYPES)[number];

export const UUID = UUID_PATTERN;
/** A contact list's id, as a schema. */
export const listId = { type: "integer", minimum: 1, maximum: 9007199254740991, examples: [42] } as const;

export const CONTACT_SORTS = [
  "fullName",
  "firstName",
  "lastName",
  "email",
  "phoneNumber",
  "gender",
  "isValid",
  "isTest",
  "lastContactType",
  "lastCampaignType",
  "createdAt",
  "updatedAt",
] as const;
export type ContactSort = (typeof CONTACT_SORTS)[number];

export interface ContactFilters {
  fullName?: string;
  isValid?: boolean;
  communicationSupported?: Channel;
  isTest?: boolean;
  phoneNumber?: string;
  email?: string;
  lastContactType?: Channel;
  lastCampaignType?: Channel;
  gender?: Gender;
  search?: string;
  listIds?: number[];
  optedOut?: Channel | "none";
  [customField: `customFields.${string}`]: string;
}
/** The filters of GET /contacts (also of a list's contacts and, later, of contact exports). */
export const contactFilterProperties = {
  fullName: { type: "string", minLength: 1, maxLength: 200, description: "Case-insensitive part of the full name." },
  isValid: { type: "boolean" },
  communicationSupported: { type: "string", enum: [...CHANNELS] },
  isTest: { type: "boolean" },
  phoneNumber: {
    ...PHONE_NUMBER_SCHEMA,
    description: "Exact number in international format (`+` or `00` and the country code, any spacing).",
    examples: ["+351912345678"],
  },
  email: { type: "string", format: "email", maxLength: 254 },
  lastContactType: { type: "string", enum: [...CHANNELS] },
  lastCampaignType: { type: "string", enum: [...CHANNELS] },
  gender: { type: "string", enum: [...GENDERS] },
  search: { type: "string", minLength: 1, maxLength: 200, description: "Case-insensitive part of the name, phone number or email." },
  listIds: { type: "array", items: listId, minItems: 1, maxItems: 100, description: "Contacts in any of these lists." },
  optedOut: {
    type: "string",
    enum: [...CHANNELS, "none"],
    description: "A channel: contacts whose phone number opted out of it (`GET /contacts/opt-outs`). `none`: contacts opted out of no channel.",
  },
} as const;

export const customFieldFilter = { "^customFields\\.[A-Za-z][A-Za-z0-9_]{0,63}$": { type: "string", maxLength: 200 } } as const;

/** The filters and sort of a contacts export (those of GET /contacts). */
export type ContactExportFilters = ContactFilters & { sortBy?: ContactSort; sortOrder?: "asc" | "desc" };
const contactSort = pagingProperties(CONTACT_SORTS, "fullName");
/** Its schema's properties (with `customFieldFilter` as pattern properties). */
export const contactExportProperties = { ...contactFilterProperties, sortBy: contactSort.sortBy, sortOrder: contactSort.sortOrder } as const;

// --- opt-outs: what other services hand to contacts (contract section 7)

export const OPT_OUT_SOURCES = ["KEYWORD", "UPSTREAM", "API", "IMPORT"] as const;
export type OptOutSource = (typeof OPT_OUT_SOURCES)[number];
export const OPT_OUT_ACTIONS = ["OPT_OUT", "OPT_IN"] as const;
export type OptOutAction = (typeof OPT_OUT_ACTIONS)[number];

/** A call carries at most this many changes (an ingress body, an inbound call). */
export const MAX_OPT_OUT_CHANGES = 1000;

/**
 * One number's word on one channel of one account. `at` is when it was said (the inbound message's
 * receivedDate, the carrier's report): a change older than the number's last change is ignored, so a
 * late or repeated report never undoes a newer one (an opt-out wins a tie); a time in the future
 * counts as now. Without `at` the change is made now, after whatever came before.
 */
export interface OptOutChange {
  companyId: string;
  channel: Channel;
  /** E.164. */
  phoneNumber: string;
  action: OptOutAction;
  source: OptOutSource;
  at?: string;
}
export interface ApplyOptOutsIn {
  items: OptOutChange[];
}
export interface ApplyOptOutsOut {
  /** Changes that turned an opt-out on or off (a repeat, or one older than the last change, changes nothing). */
  changed: number;
}

export const applyOptOutsIn = {
  $id: "ContactsApplyOptOutsIn",
  type: "object",
  additionalProperties: false,
  required: ["items"],
  properties: {
    items: {
      type: "array",
      minItems: 1,
      maxItems: MAX_OPT_OUT_CHANGES,
      items: {
        type: "object",
        additionalProperties: false,
        required: ["companyId", "channel", "phoneNumber", "action", "source"],
        properties: {
          companyId: { type: "string", minLength: 1, maxLength: 100, pattern: "^[^\\u0000-\\u001f]+$" },
          channel: { type: "string", enum: [...CHANNELS] },
          phoneNumber: { type: "string", pattern: "^\\+[1-9][0-9]{6,14}$" },
          action: { type: "string", enum: [...OPT_OUT_ACTIONS] },
          source: { type: "string", enum: [...OPT_OUT_SOURCES] },
          at: { type: "string", format: "date-time", maxLength: 40 },
        },
      },
    },
  },
};

/** What other services call of contacts (lib/bus/calls.ts). */
export interface ContactsActions {
  /** What inbox (keywords) and tracking's ingress (upstream reports) call; it resolves once the changes are committed. */
  "contacts.applyOptOuts": Action<ApplyOptOutsIn, ApplyOptOutsOut>;
  "contacts.markContacted": Action<MarkContactedIn, { updated: number }>;
  /** The account's custom fields (key, type, ...), each a key a text may name as a placeholder. */
  "contacts.listCustomFields": Action<Record<string, never>, { data: Array<{ key: string }> }>;
  /**
   * The SELECT of the account's contacts export with these filters and sort (the exports service
   * runs it inside a COPY); a filter naming a custom field the account does not declare is a 400.
   */
  "contacts.exportStatement": Action<ContactExportFilters, { sql: string }>;
}
export const callContacts = callerOf<ContactsActions>();

/** Opt-out keywords (contract section 7): what a message's text says, and handing a request's keywords to contacts (503 when it cannot be reached). */
export { applyKeywords, keywordAction, keywordChanges, type KeywordMessage } from "./contacts.keywords";
