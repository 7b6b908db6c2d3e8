/**
 * The SELECT of each export type, for PostgreSQL's own COPY: every cell is made text by the query
 * (timestamps in ISO 8601 UTC as the API writes them, booleans `true`/`false`, statuses by name),
 * and every cell a partner's data can start is passed through csv_cell (formula injection). COPY
 * takes no parameters, so the filters' values are inlined as escaped literals.
 */
import pg from "pg";
import { QueryTypes, type Sequelize } from "sequelize";
import { injectReplacements } from "sequelize/lib/utils/sql";
import { CHANNELS, DELIVERY_STATUSES } from "../../lib/channels";
import { contactOrder, contactWhere, type CustomFieldType } from "../contacts/contacts.contract";
import { historyConditions } from "../tracking/tracking.contract";
import type { ContactExportIn, ExportType, MessageExportIn } from "./exports.schemas";

/** A value as an SQL literal of the given type (strings escaped by pg's own escapeLiteral). */
export function sqlLiteral(value: unknown, cast: string): string {
  if (Array.isArray(value)) return `ARRAY[${value.map((v) => pg.escapeLiteral(String(v))).join(", ")}]::${cast}`;
  if (typeof value === "number" && Number.isFinite(value)) return `${value}::${cast}`;
  return `${pg.escapeLiteral(String(value))}::${cast}`;
}

const iso = (col: string) => `to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
const statusName = `CASE m.status_code ${DELIVERY_STATUSES.map((s) => `WHEN ${s.code} THEN '${s.name}'`).join(" ")} ELSE 'UNKNOWN' END`;
const statusDescription = `CASE m.status_code ${DELIVERY_STATUSES.map((s) => `WHEN ${s.code} THEN '${s.description}'`).join(" ")} ELSE 'unknown' END`;

/** Columns: header name -> expression. Order is the file's column order. */
type Columns = Array<[string, string]>;

const STATUS_COLUMNS: Columns = [
  ["customerMessageId", "csv_cell(m.customer_message_id)"],
  ["channel", "m.channel"],
  ["destination", "csv_cell(m.destination)"],
  ["sentAt", iso("m.sent_at")],
  ["deliveryStatus", statusName],
  ["statusCode", "m.status_code"],
  ["description", statusDescription],
  ["deliveryDate", iso("m.delivery_date")],
  ["readAt", iso("m.read_at")],
];
const PART_COLUMNS: Columns = [
  ["totalParts", "m.total_parts"],
  ["price", "trim_scale(m.price)"],
  ["simulation", "m.simulation::text"],
];

export const HISTORY_COLUMNS: Columns = [...STATUS_COLUMNS, ["text", "csv_cell(m.text)"], ["campaignId", "csv_cell(m.campaign_id)"], ...PART_COLUMNS];
export const DELIVERY_REPORT_COLUMNS: Columns = [...STATUS_COLUMNS, ...PART_COLUMNS, ["campaignId", "csv_cell(m.campaign_id)"]];

export const CONTACT_COLUMNS: Columns = [
  ["id", "c.id"],
  ["firstName", "csv_cell(c.first_name)"],
  ["lastName", "csv_cell(c.last_name)"],
  ["gender", "c.gender"],
  ["phoneNumber", "csv_cell(c.phone_number)"],
  ["email", "csv_cell(c.email)"],
  ["isTest", "c.is_test::text"],
  ["isValid", "c.is_valid::text"],
  ["communicationSupported", "array_to_string(c.communication_supported, ',')"],
  ["lastContactType", "c.last_contact_type"],
  ["lastCampaignType", "c.last_campaign_type"],
  ["createdAt", iso("c.created_at")],
  ["updatedAt", iso("c.updated_at")],
];

const select = (columns: Columns) => columns.map(([name, expr]) => `${expr} AS "${name}"`).join(", ");

/** The message exports: the history filters; history lists sent messages, delivery reports the messages with a receipt. */
export function messageExportSql(type: Exclude<ExportType, "CONTACTS">, companyId: string, filters: MessageExportIn): string {
  const where = historyConditions(companyId, CHANNELS, filters, sqlLiteral);
  if (type === "MESSAGE_HISTORY") {
    return `SELECT ${select(HISTORY_COLUMNS)} FROM messages m WHERE ${[...where, "m.sent_at IS NOT NULL"].join(" AND ")} ORDER BY m.sent_at DESC, m.id DESC`;
  }
  return `SELECT ${select(DELIVERY_REPORT_COLUMNS)} FROM messages m WHERE ${[...where, "m.delivery_date IS NOT NULL"].join(" AND ")} ORDER BY m.delivery_date DESC, m.id DESC`;
}

/**
 * The contacts export: every contact field, then one `customFields.<key>` column per custom field
 * the account declares (as declared when the run starts), filtered and sorted as GET /contacts.
 * A filter naming a custom field that no longer exists is the ApiError of contactWhere.
 */
export async function contactExportSql(sequelize: Sequelize, companyId: string, filters: ContactExportIn): Promise<string> {
  const declared = await sequelize.query<{ key: string; type: CustomFieldType }>(
    "SELECT key, type FROM contact_custom_fields WHERE company_id = $1 ORDER BY key",
    {
      bind: [companyId],
      type: QueryTypes.SELECT,
    },
  );
  const { sortBy = "fullName", sortOrder = "asc", ...only } = filters;
  const where = contactWhere(companyId, only, new Map(declared.map((d) => [d.key, d.type])));
  const custom: Columns = declared.map((d) => [`customFields.${d.key}`, `csv_cell(c.custom_fields ->> ${pg.escapeLiteral(d.key)})`]);
  const sql = `SELECT ${select([...CONTACT_COLUMNS, ...custom])} FROM contacts c WHERE ${where.sql} ${contactOrder(sortBy, sortOrder)}`;
  return injectReplacements(sql, (sequelize as unknown as { dialect: Parameters<typeof injectReplacements>[1] }).dialect, where.replacements);
}
