/**
 * From an HTTP request to action params: query and path values arrive as strings and are coerced
 * by the action's own JSON schema (integers, numbers, booleans, comma-separated arrays); body values
 * are never coerced. A name given in two places (query and body, say) is refused, and so is a
 * `writeOnly` field (a secret) given in the query string.
 */
import type { JsonSchema } from "../../lib/http/api";
import { ApiError } from "../../lib/errors";
import { checkText } from "../../lib/http/text";

const INT_RE = /^-?\d{1,16}$/; // the schema's maximum decides beyond 2^53
const NUM_RE = /^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/;

function typesOf(schema: JsonSchema | undefined): string[] {
  if (!schema) return [];
  const t = schema.type;
  return Array.isArray(t) ? (t as string[]) : typeof t === "string" ? [t] : [];
}

/** Coerces one string (or list of strings, from repeated query keys) to what `schema` expects. */
export function coerceValue(value: unknown, schema: JsonSchema | undefined): unknown {
  const types = typesOf(schema);
  if (types.includes("array")) {
    const items = (schema?.items ?? undefined) as JsonSchema | undefined;
    const list = Array.isArray(value)
      ? value.flatMap((v) => (typeof v === "string" ? v.split(",") : [v]))
      : typeof value === "string"
        ? value === ""
          ? []
          : value.split(",")
        : value;
    return Array.isArray(list) ? list.map((v) => coerceValue(typeof v === "string" ? v.trim() : v, items)) : list;
  }
  if (typeof value !== "string") return value;
  if (types.includes("string")) return value;
  if (types.includes("integer") && INT_RE.test(value)) return Number(value);
  if (types.includes("number") && NUM_RE.test(value)) return Number(value);
  if (types.includes("boolean") && (value === "true" || value === "false")) return value === "true";
  if (types.includes("null") && value === "null") return null;
  return value;
}

export function coerceStrings(values: Record<string, unknown>, schema: JsonSchema | undefined): Record<string, unknown> {
  const props = (schema?.properties ?? {}) as Record<string, JsonSchema>;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(values)) {
    const prop = Object.prototype.hasOwnProperty.call(props, k) ? props[k] : undefined;
    Object.defineProperty(out, k, { value: coerceValue(v, prop), enumerable: true, writable: true, configurable: true });
  }
  return out;
}

function isEmpty(values: Record<string, unknown>): boolean {
  for (const k in values) if (Object.prototype.hasOwnProperty.call(values, k)) return false;
  return true;
}

/** Merges query, body and path values into one params object; a name may come from one place only. */
export function mergeParams(
  query: Record<string, unknown>,
  body: unknown,
  path: Record<string, unknown>,
  schema: JsonSchema | undefined,
): Record<string, unknown> {
  if (body === undefined && isEmpty(query) && isEmpty(path)) return {}; // most GETs: nothing to merge
  const out: Record<string, unknown> = {};
  const sources: Array<[string, Record<string, unknown>]> = [
    ["query", coerceStrings(query, schema)],
    ["body", body && typeof body === "object" && !Array.isArray(body) ? (body as Record<string, unknown>) : {}],
    ["path", coerceStrings(path, schema)],
  ];
  // A write-only field (a secret: an access token) is taken from the body only; URLs end up in logs.
  const props = (schema?.properties ?? {}) as Record<string, JsonSchema>;
  for (const k of Object.keys(query)) {
    if (Object.prototype.hasOwnProperty.call(props, k) && props[k]?.writeOnly === true) {
      throw new ApiError("VALIDATION_ERROR", `"${k}" is a secret: send it in the JSON body, never in the URL.`, {
        errors: [{ path: k, message: "must be sent in the body, not in the query string" }],
      });
    }
  }
  if (Array.isArray(body) || (body !== undefined && body !== null && typeof body !== "object")) {
    throw new ApiError("VALIDATION_ERROR", "The request body must be a JSON object.", { errors: [{ path: "", message: "must be object" }] });
  }
  for (const [where, values] of sources) {
    checkText(values);
    for (const [k, v] of Object.entries(values)) {
      if (Object.prototype.hasOwnProperty.call(out, k)) {
        throw new ApiError("VALIDATION_ERROR", `"${k}" is given more than once (again in the ${where}).`, {
          errors: [{ path: k, message: `is given more than once (again in the ${where})` }],
        });
      }
      // defineProperty: a "__proto__" key stays an own (and so refused) field, not a prototype.
      Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
    }
  }
  return out;
}

/**
 * The query string's parameter names, before the parser sees them: one with an empty name (`?=x`)
 * is dropped by the parser, and an action that declares no parameters has no schema to refuse
 * unknown ones, so both are refused here as any unknown parameter is (400).
 */
export function checkQueryNames(url: string | undefined, query: Record<string, unknown>, schema: JsonSchema | undefined): void {
  const q = url ? url.indexOf("?") : -1;
  if (q >= 0 && url!.length > q + 1) {
    for (const pair of url!.slice(q + 1).split("&")) {
      if (pair.startsWith("=")) {
        throw new ApiError("VALIDATION_ERROR", "A query parameter has an empty name.", {
          errors: [{ path: "", message: "is not an allowed field (a query parameter with an empty name)" }],
        });
      }
    }
  }
  if (schema) return;
  const names = Object.keys(query);
  if (names.length > 0) {
    throw new ApiError("VALIDATION_ERROR", "This operation takes no query parameters.", {
      errors: names.slice(0, 100).map((path) => ({ path, message: "is not an allowed field" })),
    });
  }
}
