/**
 * The statements of the message exports (history and delivery reports), which tracking writes over
 * its own `messages` and hands to the exports service (`tracking.exportStatement`): exports runs
 * them inside a COPY in its worker pool and never names tracking's tables or columns itself (issue
 * 33 item 1). COPY takes no parameters, so the filters' values are inlined as escaped literals.
 */
import { csvSelect, isoCell, type CsvColumns } from "../../lib/db/csv";
import { sqlLiteral } from "../../lib/db/literals";
import { CHANNELS, DELIVERY_STATUSES } from "../../lib/messaging/channels";
import type { SchemaOf } from "../../lib/http/schema-type";
import type { HistoryFilters } from "./tracking.contract";
import { companyId, historyFilterProperties } from "./tracking.schemas";
import { historyConditions } from "./tracking.filters";

/** The message exports tracking writes statements for. */
export const MESSAGE_EXPORT_TYPES = ["MESSAGE_HISTORY", "DELIVERY_REPORTS"] as const;
export type MessageExportType = (typeof MESSAGE_EXPORT_TYPES)[number];

const statusName = `CASE m.status_code ${DELIVERY_STATUSES.map((s) => `WHEN ${s.code} THEN '${s.name}'`).join(" ")} ELSE 'UNKNOWN' END`;
const statusDescription = `CASE m.status_code ${DELIVERY_STATUSES.map((s) => `WHEN ${s.code} THEN '${s.description}'`).join(" ")} ELSE 'unknown' END`;

const STATUS_COLUMNS: CsvColumns = [
  ["customerMessageId", "csv_cell(m.customer_message_id)"],
  ["channel", "m.channel"],
  ["destination", "csv_cell(m.destination)"],
  ["sentAt", isoCell("m.sent_at")],
  ["deliveryStatus", statusName],
  ["statusCode", "m.status_code"],
  ["description", statusDescription],
  ["deliveryDate", isoCell("m.delivery_date")],
  ["readAt", isoCell("m.read_at")],
];
const PART_COLUMNS: CsvColumns = [
  ["totalParts", "m.total_parts"],
  ["price", "trim_scale(m.price)"],
  ["simulation", "m.simulation::text"],
];

export const HISTORY_COLUMNS: CsvColumns = [...STATUS_COLUMNS, ["text", "csv_cell(m.text)"], ["campaignId", "csv_cell(m.campaign_id)"], ...PART_COLUMNS];
export const DELIVERY_REPORT_COLUMNS: CsvColumns = [...STATUS_COLUMNS, ...PART_COLUMNS, ["campaignId", "csv_cell(m.campaign_id)"]];

/** The history filters of an account's export; history lists sent messages, delivery reports the messages with a receipt, newest first. */
export function messageExportSelect(type: MessageExportType, companyId: string, filters: HistoryFilters): string {
  const where = historyConditions(companyId, CHANNELS, filters, sqlLiteral);
  if (type === "MESSAGE_HISTORY") {
    return `SELECT ${csvSelect(HISTORY_COLUMNS)} FROM messages m WHERE ${[...where, "m.sent_at IS NOT NULL"].join(" AND ")} ORDER BY m.sent_at DESC, m.id DESC`;
  }
  return `SELECT ${csvSelect(DELIVERY_REPORT_COLUMNS)} FROM messages m WHERE ${[...where, "m.delivery_date IS NOT NULL"].join(" AND ")} ORDER BY m.delivery_date DESC, m.id DESC`;
}

/** `tracking.exportStatement` (internal, the exports service): which message export, of which account, with the history filters. */
export interface ExportStatementIn {
  companyId: string;
  type: MessageExportType;
  filters: HistoryFilters;
}
export const exportStatementIn = {
  $id: "TrackingExportStatementIn",
  type: "object",
  required: ["companyId", "type", "filters"],
  additionalProperties: false,
  properties: {
    companyId,
    type: { type: "string", enum: [...MESSAGE_EXPORT_TYPES] },
    filters: { type: "object", additionalProperties: false, properties: historyFilterProperties },
  },
} satisfies SchemaOf<ExportStatementIn>;
