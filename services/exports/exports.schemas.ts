/**
 * Export jobs on the wire (spec part 2 Export job, part 4 Exports; contract section 4).
 */
import { pageSchema, pagingProperties, type Page } from "../../lib/http/paging";
import type { SchemaOf } from "../../lib/http/schema-type";
import { RANGE_BYTES } from "../../lib/http/remote-file";
import { contactExportProperties, UUID, customFieldFilter, type ContactExportFilters } from "../contacts/contacts.contract";
import { historyFilterProperties, type HistoryFilters } from "../tracking/tracking.contract";

export const EXPORT_TYPES = ["CONTACTS", "DELIVERY_REPORTS", "MESSAGE_HISTORY"] as const;
export type ExportType = (typeof EXPORT_TYPES)[number];
export const EXPORT_STATUSES = ["QUEUED", "PROCESSING", "COMPLETED", "FAILED", "EXPIRED"] as const;
export type ExportStatus = (typeof EXPORT_STATUSES)[number];

const exportId = { type: "string", pattern: UUID, examples: ["6f1c2a7e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"] } satisfies SchemaOf<string>;
const nullableDate = { type: "string", format: "date-time", nullable: true } satisfies SchemaOf<string | null>;

export interface ExportOut {
  exportId: string;
  type: ExportType;
  status: ExportStatus;
  isAvailableForDownload: boolean;
  rowCount: number | null;
  createdAt: string;
  completedAt: string | null;
  expiresAt: string | null;
  error: string | null;
}

export const exportOut = {
  $id: "ExportJob",
  type: "object",
  additionalProperties: false,
  required: ["exportId", "type", "status", "isAvailableForDownload", "rowCount", "createdAt", "completedAt", "expiresAt", "error"],
  properties: {
    exportId,
    type: { type: "string", enum: [...EXPORT_TYPES] },
    status: {
      type: "string",
      enum: [...EXPORT_STATUSES],
      description:
        "QUEUED (waiting for a worker), PROCESSING, COMPLETED (the file can be downloaded until expiresAt), FAILED (see error) or EXPIRED (the file was deleted; POST /exports/{exportId} runs it again).",
    },
    isAvailableForDownload: {
      type: "boolean",
      description: "True while the file can be downloaded (status COMPLETED); it reverts to false when the file expires.",
    },
    rowCount: { type: "integer", minimum: 0, nullable: true, description: "Data rows in the file (the header row not counted); null until the run completes." },
    createdAt: { type: "string", format: "date-time" },
    completedAt: { ...nullableDate, description: "When the last run completed (or failed)." },
    expiresAt: { ...nullableDate, description: "When the file is deleted (EXPORT_RETENTION_S after completion)." },
    error: { type: "string", nullable: true, description: "Why the last run failed (FAILED), or why an attempt was retried." },
  },
} satisfies SchemaOf<ExportOut>;

export const exportPage = pageSchema("ExportJobPage", exportOut) satisfies SchemaOf<Page<ExportOut>>;

export type ListExportsIn = { page: number; limit: number };

export const listExportsIn = {
  $id: "ListExportsIn",
  type: "object",
  additionalProperties: false,
  properties: {
    page: pagingProperties([], "").page,
    limit: pagingProperties([], "").limit,
  },
} satisfies SchemaOf<ListExportsIn>;

export type ExportIdIn = { exportId: string };
export const exportIdIn = {
  $id: "ExportIdIn",
  type: "object",
  additionalProperties: false,
  required: ["exportId"],
  properties: { exportId },
} satisfies SchemaOf<ExportIdIn>;

export interface ExportLinkOut {
  exportId: string;
  downloadUrl: string;
  expiresAt: string;
}

export const exportLinkOut = {
  $id: "ExportDownload",
  type: "object",
  additionalProperties: false,
  required: ["exportId", "downloadUrl", "expiresAt"],
  properties: {
    exportId,
    downloadUrl: {
      type: "string",
      format: "uri",
      description: "Signed, time-limited URL of the CSV file (UTF-8, header row); no API key needed. Answers gzip when the client accepts it.",
    },
    expiresAt: {
      type: "string",
      format: "date-time",
      description: "When the URL stops working (EXPORT_URL_TTL_S from now, never after the file's own expiry).",
    },
  },
} satisfies SchemaOf<ExportLinkOut>;

export type ContactExportIn = ContactExportFilters;

export const contactExportIn = {
  $id: "ContactExportIn",
  type: "object",
  additionalProperties: false,
  description:
    "The filters of GET /contacts (combined with AND; `customFields.<key>` for a declared custom field) and its sort. An empty body exports every contact.",
  properties: contactExportProperties,
  patternProperties: customFieldFilter,
} satisfies SchemaOf<ContactExportIn>;

export type MessageExportIn = HistoryFilters;

export const messageExportIn = {
  $id: "MessageExportIn",
  type: "object",
  additionalProperties: false,
  description: "The filters of GET /messages/history, every channel (the export is authorised by EXPORTS). An empty body exports everything kept.",
  properties: { ...historyFilterProperties },
} satisfies SchemaOf<MessageExportIn>;

/** The signed download link's query (exports.signing.ts). */
export type DownloadIn = { exportId: string; expires: string; signature: string };
export const downloadIn = {
  $id: "ExportFileIn",
  type: "object",
  additionalProperties: false,
  required: ["exportId", "expires", "signature"],
  properties: {
    // No length limits: whatever was altered is a 403 from the signature check, never a 400.
    exportId: { type: "string" },
    expires: { type: "string" },
    signature: { type: "string" },
  },
} satisfies SchemaOf<DownloadIn>;

export const downloadOut = {
  type: "string",
  format: "binary",
  contentMediaType: "text/csv",
  description: "The CSV file, streamed (Content-Disposition: attachment).",
  examples: [
    "customerMessageId,channel,destination,sentAt,deliveryStatus,statusCode,description,deliveryDate,readAt,text,campaignId,totalParts,price,simulation\norder-1,SMS,'+351912345678,2026-11-20T10:00:00.000Z,DELIVERED,3,delivered,2026-11-20T10:00:04.000Z,,Your code is 1234,,1,0.045,false\n",
  ],
} satisfies SchemaOf<string>;

// Internal actions (other exports nodes, the gateway pulling a file): they take other properties
// too and ignore them, and a parameter that must be given may not be null.

const fileName = { type: "string", maxLength: 100 } satisfies SchemaOf<string>;

/** exports.fileSize: a file this node holds, by name. */
export interface FileSizeIn {
  fileName: string;
}

export const fileSizeIn = { $id: "ExportFileSizeIn", type: "object", required: ["fileName"], properties: { fileName } } satisfies SchemaOf<FileSizeIn>;

/** exports.range: `length` bytes of a file this node holds, from `offset` (lib/http/remote-file.ts). */
export interface FileRangeIn {
  fileName: string;
  offset: number;
  length: number;
}

export const fileRangeIn = {
  $id: "ExportFileRangeIn",
  type: "object",
  required: ["fileName", "offset", "length"],
  properties: { fileName, offset: { type: "integer", minimum: 0 }, length: { type: "integer", minimum: 1, maximum: RANGE_BYTES } },
} satisfies SchemaOf<FileRangeIn>;
