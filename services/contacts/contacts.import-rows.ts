/**
 * One imported row, from the cells of a file to the fields of a contact: which column feeds which
 * field (the partner's mapping, else the header's own name), and each cell checked by the same
 * rules as POST /contacts. Runs in the import worker; nothing here touches the database.
 */
import Ajv from "ajv";
import addFormats from "ajv-formats";
import { customValueError, normalizeEmail, parseCustomFilter, PHONE_ERROR, toE164 } from "./contacts.normalize";
import { CHANNELS, type Channel } from "../../lib/messaging/channels";
import { GENDERS, type CustomFieldType, type Gender } from "./contacts.contract";
import { type CustomValue } from "./contacts.schemas";

/** The contact fields a column can feed (custom fields are `customFields.<key>`). */
export const IMPORT_FIELDS = ["firstName", "lastName", "gender", "phoneNumber", "email", "isTest", "optedOut"] as const;
export type ImportField = (typeof IMPORT_FIELDS)[number];

/** What a row sets on a contact; a field left out (an empty cell) leaves the contact's value as it is. */
export interface ImportRow {
  row: number;
  firstName?: string;
  lastName?: string;
  gender?: Gender;
  phone?: string;
  email?: string;
  isTest?: boolean;
  customFields?: Record<string, CustomValue>;
  /** The channels the row's number is opted out of (contract section 7): `true` all, `false` none, or a list. */
  optedOut?: Channel[];
}

export interface RowError {
  row: number;
  message: string;
}

/** A cell as a file gives it: text (CSV, vCard) or a typed spreadsheet value. */
export type Cell = string | number | boolean | Date | undefined;

/** ajv-formats' email pattern (the one the API's schemas check), read through ajv's public `formats`; run here only on at most 254 characters. */
export const EMAIL_RE = addFormats(new Ajv(), ["email"]).formats.email as RegExp;
/**
 * The longest cell any field reads (a TEXT custom field keeps at most 2000 characters): a longer one
 * is refused, with the field's usual message, before any pattern sees it, so no cell costs more
 * than a bounded amount of work.
 */
export const MAX_CELL_TEXT = 10_000;
/** The longest header or mapping value read as a field's name (a custom key has at most 64 characters). */
const MAX_NAME_TEXT = 1000;
/** Text no database stores faithfully (as the gateway refuses it in JSON bodies). */
const BAD_TEXT = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const squash = (s: string) => s.trim().toLowerCase();
const loose = (s: string) => s.toLowerCase().replace(/[\s_.-]+/g, "");

/**
 * The target of a mapping value or a header: a contact field, `customFields.<key>` for a declared
 * key, or null when it names neither. Case-insensitive; for headers also ignoring spaces,
 * underscores, dots and dashes ("First Name" is firstName).
 */
export function targetOf(name: string, customKeys: readonly string[], lenient: boolean): string | null {
  // No field's or custom key's name comes near this: a longer header names nothing, unread.
  if (name.length > MAX_NAME_TEXT) return null;
  const wanted = squash(name).replace(/^customfields\./, "");
  const field = IMPORT_FIELDS.find((f) => f.toLowerCase() === wanted);
  if (field) return field;
  const custom = customKeys.find((k) => k.toLowerCase() === wanted);
  if (custom) return `customFields.${custom}`;
  if (!lenient) return null;
  const l = loose(wanted);
  const fields = IMPORT_FIELDS.filter((f) => f.toLowerCase() === l);
  const customs = customKeys.filter((k) => loose(k) === l);
  if (fields.length + customs.length !== 1) return null;
  return fields[0] ?? `customFields.${customs[0]}`;
}

/**
 * Column index -> target, from the header row. `mapping` (header -> target or null to ignore) wins
 * over the headers' own names; a mapping entry for a header the file lacks, or two columns feeding
 * one field, ends the import.
 */
export function resolveColumns(header: Cell[], mapping: Record<string, string | null> | null, customKeys: readonly string[]): Array<string | null> {
  const names = header.map((h) => (h === undefined ? "" : String(h instanceof Date ? h.toISOString() : h).trim()));
  const mapped = new Map<string, string | null>();
  if (mapping) {
    for (const [column, target] of Object.entries(mapping)) {
      const exact = names.indexOf(column.trim());
      const at = exact >= 0 ? exact : names.findIndex((n) => squash(n) === squash(column));
      if (at < 0) throw new Error(`The mapping names the column "${column}", which the file's header does not have.`);
      mapped.set(String(at), target === null ? null : targetOf(target, customKeys, false));
    }
  }
  const columns = names.map((n, i) => (mapped.has(String(i)) ? mapped.get(String(i))! : n ? targetOf(n, customKeys, true) : null));
  const seen = new Map<string, number>();
  columns.forEach((target, i) => {
    if (!target) return;
    if (seen.has(target)) throw new Error(`The columns "${names[seen.get(target)!]}" and "${names[i]}" both feed ${target}; map one of them to null.`);
    seen.set(target, i);
  });
  if (!columns.includes("phoneNumber") && !columns.includes("email")) {
    throw new Error(
      `The file has no column for phoneNumber or email (its header: ${
        names
          .filter(Boolean)
          .slice(0, 20)
          .map((n) => `"${n}"`)
          .join(", ") || "empty"
      }).`,
    );
  }
  return columns;
}

const TRUE = new Set(["true", "yes", "y", "1"]);
const FALSE = new Set(["false", "no", "n", "0"]);

function toBoolean(cell: Cell): boolean | undefined {
  if (typeof cell === "boolean") return cell;
  if (typeof cell === "number") return cell === 1 ? true : cell === 0 ? false : undefined;
  const s = String(cell).trim().toLowerCase();
  return TRUE.has(s) ? true : FALSE.has(s) ? false : undefined;
}

const OPTED_OUT_MESSAGE = `optedOut must be true, false or a list of channels (${CHANNELS.join(", ")}) separated by commas`;

/** An `optedOut` cell: true (every channel), false or `none` (none), or channels separated by commas (or semicolons, pipes, spaces). */
export function toOptedOut(cell: Cell): Channel[] | undefined {
  const flag = toBoolean(cell);
  if (flag !== undefined) return flag ? [...CHANNELS] : [];
  const text = String(cell).trim().toUpperCase();
  if (text === "NONE") return [];
  const names = text.split(/[\s,;|]+/).filter(Boolean);
  if (names.length === 0 || names.length > 10 || names.some((n) => !(CHANNELS as readonly string[]).includes(n))) return undefined;
  return CHANNELS.filter((ch) => names.includes(ch));
}

const isoDate = (d: Date) => d.toISOString().slice(0, 10);

function toCustom(type: CustomFieldType, cell: Cell): CustomValue | undefined {
  if (type === "BOOLEAN") return toBoolean(cell);
  if (type === "NUMBER" && typeof cell === "number") return Number.isFinite(cell) ? cell : undefined;
  if (type === "DATE" && cell instanceof Date) return Number.isNaN(cell.getTime()) ? undefined : isoDate(cell);
  const text = cell instanceof Date ? isoDate(cell) : String(cell).trim();
  if (type === "TEXT") return customValueError("TEXT", text) === null ? text : undefined;
  return parseCustomFilter(type, text);
}

const CUSTOM_MESSAGES: Record<CustomFieldType, string> = {
  TEXT: "must be a text of at most 2000 characters",
  NUMBER: "must be a number",
  BOOLEAN: "must be true or false",
  DATE: "must be a date YYYY-MM-DD",
};

/** What a field says of a cell it refuses (an over-long cell is refused so, unread). */
function refusal(target: string, customTypes: ReadonlyMap<string, CustomFieldType>): string {
  switch (target) {
    case "firstName":
    case "lastName":
      return `${target} must be at most 200 characters`;
    case "gender":
      return `gender must be one of ${GENDERS.join(", ")}`;
    case "phoneNumber":
      return `phoneNumber ${PHONE_ERROR}`;
    case "email":
      return "email must be a valid email address";
    case "isTest":
      return "isTest must be true or false";
    case "optedOut":
      return OPTED_OUT_MESSAGE;
    default: {
      const key = target.slice("customFields.".length);
      const type = customTypes.get(key);
      return type ? `customFields.${key} ${CUSTOM_MESSAGES[type]}` : `customFields.${key} is not a custom field of this account`;
    }
  }
}

const isEmpty = (cell: Cell) => cell === undefined || cell === null || (typeof cell === "string" && cell.trim() === "");

/** The cells of one row, by column target, checked; an error names every bad field. */
export function buildRow(row: number, cells: Cell[], columns: Array<string | null>, customTypes: ReadonlyMap<string, CustomFieldType>): ImportRow | RowError {
  const out: ImportRow = { row };
  const problems: string[] = [];
  for (let i = 0; i < columns.length; i++) {
    const target = columns[i];
    const cell = cells[i];
    if (!target || isEmpty(cell)) continue;
    if (typeof cell === "string" && cell.length > MAX_CELL_TEXT) {
      problems.push(refusal(target, customTypes));
      continue;
    }
    if (typeof cell === "string" && BAD_TEXT.test(cell)) {
      problems.push(`${target} must not contain NUL or unpaired surrogate characters`);
      continue;
    }
    const text = () => (cell instanceof Date ? isoDate(cell) : String(cell).trim());
    switch (target) {
      case "firstName":
      case "lastName": {
        const v = text();
        if (v.length > 200) problems.push(`${target} must be at most 200 characters`);
        else out[target] = v;
        break;
      }
      case "gender": {
        const v = text().toUpperCase();
        if ((GENDERS as readonly string[]).includes(v)) out.gender = v as Gender;
        else problems.push(`gender must be one of ${GENDERS.join(", ")}`);
        break;
      }
      case "phoneNumber": {
        const v = typeof cell === "number" ? String(cell) : text();
        const e164 = v.length <= 32 ? toE164(v) : null;
        if (e164) out.phone = e164;
        else problems.push(`phoneNumber ${PHONE_ERROR}`);
        break;
      }
      case "email": {
        const v = text();
        if (v.length <= 254 && EMAIL_RE.test(v)) out.email = normalizeEmail(v);
        else problems.push("email must be a valid email address");
        break;
      }
      case "isTest": {
        const v = toBoolean(cell);
        if (v === undefined) problems.push("isTest must be true or false");
        else out.isTest = v;
        break;
      }
      case "optedOut": {
        const v = toOptedOut(cell);
        if (v === undefined) problems.push(OPTED_OUT_MESSAGE);
        else out.optedOut = v;
        break;
      }
      default: {
        const key = target.slice("customFields.".length);
        const type = customTypes.get(key);
        const v = type ? toCustom(type, cell) : undefined;
        if (!type) problems.push(`customFields.${key} is not a custom field of this account`);
        else if (v === undefined) problems.push(`customFields.${key} ${CUSTOM_MESSAGES[type]}`);
        else (out.customFields ??= {})[key] = v;
      }
    }
  }
  if (problems.length) return { row, message: problems.join("; ") };
  if (out.phone === undefined && out.email === undefined) return { row, message: "a phone number or an email is required" };
  return out;
}

export const isRowError = (r: ImportRow | RowError): r is RowError => "message" in r;
