/**
 * Contact imports: the upload actions (the gateway has received and checked the file; its bytes
 * are pulled from the gateway, uploadedBytes of lib/http/remote-file.ts, and kept under IMPORT_DIR)
 * and the status action. The Importer that runs them is contacts.runner.ts; the SQL of imports is in
 * contacts.imports.queries.ts.
 */
import { randomUUID } from "node:crypto";
import { createWriteStream } from "node:fs";
import { rename, rm } from "node:fs/promises";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { Context } from "moleculer";
import type { Sequelize, Transaction } from "sequelize";
import { API_PREFIX, apiAction, type AuthMeta } from "../../lib/http/api";
import { diskFull, noRoom, type Reservation } from "../../lib/jobs/disk-budget";
import { ApiError, type FieldError } from "../../lib/errors";
import { uploadedBytes } from "../../lib/http/remote-file";
import { Meter, type UploadedFile } from "../../lib/http/upload";
import { iso } from "../../lib/messaging/time";
import { targetOf } from "./contacts.import-rows";
import type { Importer } from "./contacts.runner";
import type { CustomFieldType } from "./contacts.contract";
import { findImport, importListExists, insertImport } from "./contacts.imports.queries";
import type { ImportDbRow } from "./contacts.models";
import {
  importAccepted,
  importIdIn,
  importOut,
  importUploadIn,
  importVcardIn,
  MAX_UPLOAD_BYTES,
  type ImportAccepted,
  type ImportOut,
} from "./contacts.imports.schemas";

const toImportOut = (r: ImportDbRow): ImportOut => ({
  importId: r.id,
  status: r.status,
  fileName: r.file_name,
  listId: r.list_id === null ? null : Number(r.list_id),
  totalRows: r.total_rows,
  created: r.created,
  updated: r.updated,
  skipped: r.skipped,
  errors: r.errors,
  failureReason: r.failure,
  createdAt: iso(r.created_at)!,
  startedAt: iso(r.started_at),
  finishedAt: iso(r.finished_at),
});

export interface ImportsThis {
  sequelize: Sequelize;
  importer: Importer;
  customTypes(companyId: string, transaction?: Transaction, lock?: boolean): Promise<Map<string, CustomFieldType>>;
}

type Ctx<P> = Context<P, AuthMeta & { $location?: string }>;

/** A mapping field: JSON, header -> contact field or custom key (or null); every target must exist. */
function parseMapping(raw: string | undefined, customKeys: string[]): Record<string, string | null> | null {
  if (raw === undefined) return null;
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    throw new ApiError("VALIDATION_ERROR", "mapping must be a JSON object.", { errors: [{ path: "mapping", message: "is not valid JSON" }] });
  }
  if (!value || typeof value !== "object" || Array.isArray(value)) {
    throw new ApiError("VALIDATION_ERROR", "mapping must be a JSON object.", {
      errors: [{ path: "mapping", message: "must be an object from column header to field" }],
    });
  }
  const errors: FieldError[] = [];
  const out: Record<string, string | null> = Object.create(null);
  const entries = Object.entries(value as Record<string, unknown>);
  if (entries.length > 500) errors.push({ path: "mapping", message: "must name at most 500 columns" });
  for (const [column, target] of entries.slice(0, 500)) {
    if (!column.trim() || column.length > 200) errors.push({ path: `mapping.${column}`, message: "the column header must be 1-200 characters" });
    else if (target === null) out[column] = null;
    else if (typeof target !== "string") errors.push({ path: `mapping.${column}`, message: "must be a field name or null" });
    else {
      const resolved = targetOf(target, customKeys, false);
      if (!resolved) errors.push({ path: `mapping.${column}`, message: `"${target.slice(0, 100)}" is not a contact field or a custom field of this account` });
      else out[column] = resolved;
    }
  }
  if (errors.length) throw new ApiError("VALIDATION_ERROR", "The mapping names unknown fields.", { errors });
  return out;
}

/** The upload's bytes, kept under IMPORT_DIR; checked against what the gateway received. */
async function keepFile(stream: Readable, file: UploadedFile, target: string): Promise<void> {
  const part = `${target}.part`;
  const meter = new Meter();
  try {
    await pipeline(stream, meter, createWriteStream(part));
    if (meter.size !== file.size || meter.sha256() !== file.sha256) throw new Error(`the upload arrived incomplete (${meter.size} of ${file.size} bytes)`);
    await rename(part, target);
  } catch (err) {
    await rm(part, { force: true });
    throw err;
  }
}

async function acceptUpload(this: ImportsThis, ctx: Ctx<{ file: UploadedFile; listId?: number; mapping?: string }>): Promise<ImportAccepted> {
  const { companyId } = ctx.meta;
  const { file, listId } = ctx.params;
  const stream = uploadedBytes(ctx);
  let reservation: Reservation | null = null;
  try {
    if (!stream) throw new ApiError("VALIDATION_ERROR", "The upload carries no file.", { errors: [{ path: "file", message: "is required" }] });
    const types = await this.customTypes(companyId);
    const mapping = parseMapping(ctx.params.mapping, [...types.keys()]);
    if (listId !== undefined) {
      if (!(await importListExists(this.sequelize, companyId, listId)))
        throw new ApiError("VALIDATION_ERROR", `Contact list ${listId} does not exist in this account.`, {
          errors: [{ path: "listId", message: `contact list ${listId} does not exist in this account` }],
        });
    }
    // Reserved (check and count at once) before a byte is kept, so concurrent uploads cannot all pass.
    reservation = this.importer.disk.reserve(companyId, file.size);
    if (!reservation) {
      throw noRoom(this.importer.disk, companyId, file.size, {
        account: "This account's imports waiting on this service take all the room it may use; retry once some have ended.",
        node: "Too many imports are waiting on this service; retry in a few minutes.",
      });
    }
    const id = randomUUID();
    try {
      await keepFile(stream, file, this.importer.fileOf(id));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOSPC") throw diskFull("No room for the file on this service now; retry in a few minutes.");
      throw err;
    }
    try {
      await insertImport(this.sequelize, { id, companyId, file, listId: listId ?? null, mapping, nodeId: ctx.broker.nodeID });
    } catch (err) {
      await rm(this.importer.fileOf(id), { force: true });
      throw err;
    }
    this.importer.enqueue({ id, companyId, listId: listId ?? null, customTypes: types, size: file.size, reservation }, file.kind, mapping);
    reservation = null; // the import holds it now, until its file is removed
    ctx.meta.$statusCode = 202;
    // moleculer-web sets Location itself only for 201 and 3xx.
    ctx.meta.$location = `${API_PREFIX}/contacts/imports/${id}`;
    ctx.meta.$responseHeaders = { ...ctx.meta.$responseHeaders, Location: ctx.meta.$location };
    return { importId: id, status: "QUEUED" };
  } finally {
    reservation?.release();
    // Nothing more is pulled from the gateway once the action has its answer.
    stream?.destroy();
  }
}

const UPLOAD_TIMEOUT_MS = 120_000;

export const importActions = {
  /** CSV or XLSX: 202 with the import's id; the rows are imported in the background. */
  upload: apiAction({
    rest: "POST /contacts/upload",
    tag: "imports",
    operation: "CONTACTS",
    summary: "Import contacts from a CSV or XLSX file",
    description:
      "multipart/form-data: `file` (CSV or XLSX, judged by content; at most 100 MiB), optional `listId` and `mapping`. The first row is the header; " +
      "without a mapping, headers are contact field names or custom field keys (case-insensitive). A row whose phone number or email matches a contact updates it " +
      "(empty cells leave fields as they are); other rows create contacts. Bad rows are reported and skipped. Follow the import at the Location answered.",
    timeout: UPLOAD_TIMEOUT_MS,
    upload: { field: "file", maxBytes: MAX_UPLOAD_BYTES, accept: ["csv", "xlsx"], description: "The contacts" },
    params: importUploadIn,
    responses: { 202: importAccepted },
    errors: [],
    handler: acceptUpload,
  }),

  /** vCard 3.0/4.0: one contact per card. */
  uploadVcard: apiAction({
    rest: "POST /contacts/upload/vcard",
    tag: "imports",
    operation: "CONTACTS",
    summary: "Import contacts from a vCard file",
    description:
      "multipart/form-data: `file` (VCF, vCard 3.0 or 4.0, at most 100 MiB) and optional `listId`. Each card gives firstName and lastName (N, else FN), " +
      "phoneNumber (the preferred or mobile TEL), email (the preferred EMAIL) and gender (4.0 GENDER). Matching and errors as for CSV; `row` is the card's number.",
    timeout: UPLOAD_TIMEOUT_MS,
    upload: { field: "file", maxBytes: MAX_UPLOAD_BYTES, accept: ["vcard"], description: "The vCards" },
    params: importVcardIn,
    responses: { 202: importAccepted },
    errors: [],
    handler: acceptUpload,
  }),

  /** An import's state and counters. */
  getImport: apiAction({
    rest: "GET /contacts/imports/:importId",
    tag: "imports",
    operation: "CONTACTS",
    summary: "Get a contact import",
    params: importIdIn,
    responses: { 200: importOut },
    errors: [404],
    async handler(this: ImportsThis, ctx: Ctx<{ importId: string }>): Promise<ImportOut> {
      const row = await findImport(this.sequelize, ctx.meta.companyId, ctx.params.importId.toLowerCase());
      if (!row) throw new ApiError("IMPORT_NOT_FOUND", `No contact import ${ctx.params.importId} in this account.`);
      return toImportOut(row);
    },
  }),

  /** Ends FAILED the imports whose node went away (runs on its own every few seconds; for operators in the REPL). */
  sweepImports: apiAction({
    visibility: "public",
    async handler(this: ImportsThis): Promise<{ failed: number }> {
      return { failed: await this.importer.sweep() };
    },
  }),
};
