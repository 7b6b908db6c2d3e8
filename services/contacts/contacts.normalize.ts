/**
 * What a contact's fields become before they are stored: phone numbers parsed and validated by
 * libphonenumber-js (full metadata, lib/messaging/phone.ts) into E.164, emails trimmed and lower-cased, custom fields checked
 * against the account's declarations. Every refusal names its field.
 */
import type { FieldError } from "../../lib/errors";
import type { CustomFieldType } from "./contacts.contract";
import type { CustomValue } from "./contacts.schemas";

// The phone number rules are shared (the inbox validates end users' numbers the same way).
export { MAX_PHONE_TEXT, PHONE_ERROR, toE164 } from "../../lib/messaging/phone";

export const normalizeEmail = (email: string) => email.trim().toLowerCase();

const DATE_RE = /^\d{4}-\d{2}-\d{2}$/;
/**
 * A decimal number: each alternative consumes its digits one way only (no `\d+\.?\d*`, which
 * backtracks quadratically over a long run of digits that ends in a stray character).
 */
export const NUMBER_RE = /^-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$/;
/** The longest text read as a number (a double needs at most 24 characters); a longer one is refused unread. */
export const MAX_NUMBER_TEXT = 1000;

/** Checks one custom value against its declared type. */
export function customValueError(type: CustomFieldType, value: unknown): string | null {
  switch (type) {
    case "TEXT":
      return typeof value === "string" && value.length <= 2000 ? null : "must be a text of at most 2000 characters";
    case "NUMBER":
      return typeof value === "number" && Number.isFinite(value) ? null : "must be a number";
    case "BOOLEAN":
      return typeof value === "boolean" ? null : "must be true or false";
    case "DATE":
      return typeof value === "string" &&
        value.length === 10 &&
        DATE_RE.test(value) &&
        !Number.isNaN(Date.parse(`${value}T00:00:00Z`)) &&
        new Date(`${value}T00:00:00Z`).toISOString().startsWith(value)
        ? null
        : "must be a date YYYY-MM-DD";
  }
}

/** Custom field values against the declarations: undeclared keys and wrong types are errors. */
export function checkCustomFields(values: Record<string, CustomValue>, declared: Map<string, CustomFieldType>): FieldError[] {
  const errors: FieldError[] = [];
  for (const [key, value] of Object.entries(values)) {
    const type = declared.get(key);
    if (!type) errors.push({ path: `customFields.${key}`, message: "is not a custom field of this account" });
    else {
      const problem = customValueError(type, value);
      if (problem) errors.push({ path: `customFields.${key}`, message: problem });
    }
  }
  return errors;
}

/** A custom-field filter value (a query string) as the JSON value of its declared type. */
export function parseCustomFilter(type: CustomFieldType, raw: string): CustomValue | undefined {
  switch (type) {
    case "TEXT":
      return raw;
    case "NUMBER": {
      if (raw.length > MAX_NUMBER_TEXT || !NUMBER_RE.test(raw)) return undefined;
      const n = Number(raw);
      // Out of range (Infinity) or a non-zero literal that underflows to 0: not the number asked for.
      if (!Number.isFinite(n) || (n === 0 && /[1-9]/.test(raw.split(/[eE]/)[0]!))) return undefined;
      return n;
    }
    case "BOOLEAN":
      return raw === "true" ? true : raw === "false" ? false : undefined;
    case "DATE":
      return customValueError("DATE", raw) === null ? raw : undefined;
  }
}
