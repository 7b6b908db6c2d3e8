/**
 * Contact imports on the wire (spec part 4, contract section 4): the upload forms, the 202 and the
 * import's status. The upload and status actions (contacts.imports.ts) import them from here.
 */
import type { SchemaOf } from "../../lib/http/schema-type";
import { uploadedFileSchema, type UploadedFile } from "../../lib/http/upload";
import { listId } from "./contacts.contract";
import { dateTime, uuid } from "./contacts.fields.schemas";

export const IMPORT_STATUSES = ["QUEUED", "PROCESSING", "COMPLETED", "FAILED"] as const;
export type ImportStatus = (typeof IMPORT_STATUSES)[number];
export const MAX_UPLOAD_BYTES = 100 * 1024 * 1024;

const importListId = {
  ...listId,
  description: "Every imported contact (created or updated) is added to this list: a live list of the account (else 400).",
} satisfies SchemaOf<number>;

/** The fields of an import's upload form (multipart/form-data), as the gateway passes them: the file described, `mapping` still JSON text. */
export interface ImportUploadIn {
  file: UploadedFile;
  listId?: number;
  mapping?: string;
}
/** A vCard import's upload form. */
export type ImportVcardIn = Omit<ImportUploadIn, "mapping">;

export const importUploadIn = {
  $id: "ContactImportIn",
  type: "object",
  additionalProperties: false,
  required: ["file"],
  properties: {
    file: uploadedFileSchema,
    listId: importListId,
    mapping: {
      type: "string",
      maxLength: 65536,
      description:
        'A JSON object from column header to contact field (firstName, lastName, gender, phoneNumber, email, isTest) or custom field key (`tier` or `customFields.tier`); null ignores the column. Columns it does not name are matched by their header. Example: `{"Mobile": "phoneNumber", "Notes": null}`. Text that is not a JSON object, more than 500 columns, a header of more than 200 characters or a target that is neither a contact field nor a custom field of the account is a 400.',
      examples: ['{"Mobile":"phoneNumber","E-mail":"email","Tier":"tier"}'],
    },
  },
} satisfies SchemaOf<ImportUploadIn>;

export const importVcardIn = {
  $id: "ContactVcardImportIn",
  type: "object",
  additionalProperties: false,
  required: ["file"],
  properties: { file: uploadedFileSchema, listId: importListId },
} satisfies SchemaOf<ImportVcardIn>;

export interface ImportAccepted {
  importId: string;
  status: ImportStatus;
}

export const importAccepted = {
  $id: "ContactImportAccepted",
  type: "object",
  additionalProperties: false,
  required: ["importId", "status"],
  properties: { importId: uuid, status: { type: "string", enum: [...IMPORT_STATUSES] } },
} satisfies SchemaOf<ImportAccepted>;

export interface ImportOut {
  importId: string;
  status: ImportStatus;
  fileName: string;
  listId: number | null;
  totalRows: number;
  created: number;
  updated: number;
  skipped: number;
  errors: Array<{ row: number; message: string }>;
  failureReason: string | null;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
}

const count = { type: "integer", minimum: 0 } satisfies SchemaOf<number>;
export const importOut = {
  $id: "ContactImport",
  type: "object",
  additionalProperties: false,
  required: [
    "importId",
    "status",
    "fileName",
    "listId",
    "totalRows",
    "created",
    "updated",
    "skipped",
    "errors",
    "failureReason",
    "createdAt",
    "startedAt",
    "finishedAt",
  ],
  properties: {
    importId: uuid,
    status: { type: "string", enum: [...IMPORT_STATUSES] },
    fileName: { type: "string" },
    listId: { ...listId, nullable: true },
    totalRows: { ...count, description: "Data rows read so far (header excluded, blank rows not counted)." },
    created: count,
    updated: { ...count, description: "Rows that matched an existing contact by phone number or email (or one created earlier in the file) and updated it." },
    skipped: { ...count, description: "Rows in error, not imported." },
    errors: {
      type: "array",
      maxItems: 1000,
      description: "The first 1000 rows in error; `row` is the 1-based data row (header excluded) or, for a vCard file, the card.",
      items: {
        type: "object",
        additionalProperties: false,
        required: ["row", "message"],
        properties: { row: { type: "integer", minimum: 1 }, message: { type: "string" } },
      },
    },
    failureReason: { type: "string", nullable: true, description: "Why the import ended FAILED (rows written before that stay written)." },
    createdAt: dateTime,
    startedAt: { ...dateTime, nullable: true },
    finishedAt: { ...dateTime, nullable: true },
  },
} satisfies SchemaOf<ImportOut>;

export interface ImportIdIn {
  importId: string;
}
export const importIdIn = {
  $id: "ContactImportIdIn",
  type: "object",
  additionalProperties: false,
  required: ["importId"],
  properties: { importId: uuid },
} satisfies SchemaOf<ImportIdIn>;
