/**
 * The contact filters of GET /contacts as a WHERE clause and an ORDER BY (`contactWhere`,
 * `contactOrder`), for contacts' own pages (contacts.queries.ts) and its export statement
 * (contacts.export.ts, `contacts.exportStatement`), and a contact's `optedOut`. Contacts' own SQL:
 * no other service imports it (issue 33 item 1). What campaigns and the inbox read of contacts
 * (consent, lists, audience) they read through the views of migration 0029, in SQL of their own.
 */
import { CHANNELS } from "../../lib/messaging/channels";
import { ApiError, type FieldError } from "../../lib/errors";
import { likeEscape } from "../../lib/db/literals";
import type { ContactFilters, ContactSort, CustomFieldType } from "./contacts.contract";
import { normalizeEmail, parseCustomFilter, PHONE_ERROR, toE164 } from "./contacts.normalize";

/**
 * Over alias `o` (opt_outs) beside alias `c` (contacts): an active opt-out of the contact's number,
 * on any channel. The channels are spelled out so that each is one probe of the primary key.
 */
const OPTED_OUT_OF_ANY = `o.company_id = c.company_id AND o.channel IN (${CHANNELS.map((ch) => `'${ch}'`).join(", ")}) AND o.phone_number = c.phone_number AND o.opted_out`;

/** A contact's `optedOut` (contract section 7), over alias `c`: the channels its number opted out of, in CHANNELS order. */
export const CONTACT_OPTED_OUT_SQL = `ARRAY(SELECT o.channel FROM opt_outs o WHERE ${OPTED_OUT_OF_ANY}
  ORDER BY array_position(ARRAY[${CHANNELS.map((ch) => `'${ch}'`).join(", ")}]::text[], o.channel))`;

export interface Where {
  sql: string;
  replacements: Record<string, unknown>;
}

/** Builds the WHERE clause for alias `c` (contacts) of one account. */
export function contactWhere(companyId: string, f: ContactFilters, customTypes: Map<string, CustomFieldType>): Where {
  const parts = ["c.company_id = :companyId"];
  const r: Record<string, unknown> = { companyId };
  const errors: FieldError[] = [];
  if (f.fullName !== undefined) {
    parts.push("c.full_name ILIKE :fullName");
    r.fullName = likeEscape(f.fullName);
  }
  if (f.search !== undefined) {
    parts.push("(c.full_name ILIKE :search OR (coalesce(c.phone_number, '') || ' ' || coalesce(c.email, '')) ILIKE :search)");
    r.search = likeEscape(f.search);
  }
  if (f.isValid !== undefined) {
    parts.push("c.is_valid = :isValid");
    r.isValid = f.isValid;
  }
  if (f.isTest !== undefined) {
    parts.push("c.is_test = :isTest");
    r.isTest = f.isTest;
  }
  if (f.communicationSupported !== undefined) {
    // A literal from the validated enum (never the raw input): it matches the per-channel partial indexes.
    const channel = CHANNELS.find((ch) => ch === f.communicationSupported);
    if (!channel) errors.push({ path: "communicationSupported", message: `must be one of ${CHANNELS.join(", ")}` });
    else parts.push(`'${channel}' = ANY (c.communication_supported)`);
  }
  if (f.phoneNumber !== undefined) {
    const e164 = toE164(f.phoneNumber);
    if (!e164) errors.push({ path: "phoneNumber", message: PHONE_ERROR });
    parts.push("c.phone_number = :phoneNumber");
    r.phoneNumber = e164;
  }
  if (f.email !== undefined) {
    parts.push("c.email = :email");
    r.email = normalizeEmail(f.email);
  }
  for (const [col, key] of [
    ["last_contact_type", "lastContactType"],
    ["last_campaign_type", "lastCampaignType"],
    ["gender", "gender"],
  ] as const) {
    if (f[key] !== undefined) {
      parts.push(`c.${col} = :${key}`);
      r[key] = f[key];
    }
  }
  if (f.listIds !== undefined) {
    parts.push(
      `EXISTS (SELECT 1 FROM contact_list_members m JOIN contact_lists l ON l.company_id = m.company_id AND l.id = m.list_id
                WHERE m.company_id = c.company_id AND m.contact_id = c.id AND m.list_id IN (:listIds) AND l.company_id = :companyId AND l.deleted_at IS NULL)`,
    );
    r.listIds = f.listIds;
  }
  if (f.optedOut !== undefined) {
    // Literals from the validated enum only, never the raw input.
    const channel = CHANNELS.find((ch) => ch === f.optedOut);
    if (channel)
      parts.push(`c.phone_number IN (SELECT o.phone_number FROM opt_outs o WHERE o.company_id = :companyId AND o.channel = '${channel}' AND o.opted_out)`);
    else if (f.optedOut === "none") parts.push(`NOT EXISTS (SELECT 1 FROM opt_outs o WHERE ${OPTED_OUT_OF_ANY})`);
    else errors.push({ path: "optedOut", message: `must be one of ${CHANNELS.join(", ")}, none` });
  }
  let n = 0;
  for (const [param, raw] of Object.entries(f)) {
    if (!param.startsWith("customFields.")) continue;
    const key = param.slice("customFields.".length);
    const type = customTypes.get(key);
    if (!type) {
      errors.push({ path: param, message: "is not a custom field of this account" });
      continue;
    }
    const value = parseCustomFilter(type, String(raw));
    if (value === undefined) {
      errors.push({ path: param, message: `is not a valid ${type.toLowerCase()}` });
      continue;
    }
    parts.push(`c.custom_fields @> CAST(:cf${n} AS jsonb)`);
    r[`cf${n}`] = JSON.stringify({ [key]: value });
    n++;
  }
  if (errors.length) throw new ApiError("VALIDATION_ERROR", "The request has invalid filters.", { errors });
  return { sql: parts.join(" AND "), replacements: r };
}

// Names sort case-insensitively, the same on PostgreSQL and PGlite whatever their collations.
const SORT_COLUMNS: Record<ContactSort, string> = {
  fullName: "lower(nullif(c.full_name, ''))", // nameless contacts last (NULLS LAST), not first
  firstName: "lower(c.first_name)",
  lastName: "lower(c.last_name)",
  email: "c.email",
  phoneNumber: "c.phone_number",
  gender: "c.gender",
  isValid: "c.is_valid",
  isTest: "c.is_test",
  lastContactType: "c.last_contact_type",
  lastCampaignType: "c.last_campaign_type",
  createdAt: "c.created_at",
  updatedAt: "c.updated_at",
};

/** A stable ORDER BY: the sort column, then the id in the same direction. */
export function contactOrder(sortBy: ContactSort, sortOrder: "asc" | "desc"): string {
  const dir = sortOrder === "desc" ? "DESC" : "ASC";
  return `ORDER BY ${SORT_COLUMNS[sortBy]} ${dir} NULLS LAST, c.id ${dir}`;
}
