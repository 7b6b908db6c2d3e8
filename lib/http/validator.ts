/**
 * Validation: our JSON schemas (they carry an `$id`) are compiled by ajv; everything else (Moleculer's
 * own `$node.*` schemas, in fastest-validator syntax) goes to Moleculer's built-in validator.
 */
import Ajv, { type ErrorObject, type ValidateFunction } from "ajv";
import addFormats from "ajv-formats";
import { Validators } from "moleculer";
import type { FieldError } from "../errors";
import { explainErrors, MESSAGE_KEYWORD } from "./schema-messages";

/** A UUID in either case, as an ajv `pattern` (every id the API hands out is one). */
export const UUID_PATTERN = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
const UUID_RE = new RegExp(UUID_PATTERN);
/** Whether `s` has the shape of a UUID (a column of type uuid would refuse anything else with an error). */
export const isUuid = (s: string): boolean => UUID_RE.test(s);

/** One ajv for the whole process: schemas are registered by `$id` once and shared. */
export const ajv = new Ajv({ allErrors: true, strict: true, strictRequired: false, useDefaults: true, allowUnionTypes: true });
addFormats(ajv);
// `x-message`: the words a schema gives its own rule's failure (lib/http/schema-messages.ts); an annotation to ajv.
ajv.addKeyword({ keyword: MESSAGE_KEYWORD, schemaType: "string" });

/** Compiles a schema once per `$id` (the same schema object may be used by many actions). */
export function compileSchema(schema: { $id?: string }): ValidateFunction {
  if (schema.$id) {
    const existing = ajv.getSchema(schema.$id);
    if (existing) return existing;
  }
  return ajv.compile(schema);
}

/** At most this many field errors are named in an answer; the rest are only counted. */
export const MAX_FIELD_ERRORS = 100;

/**
 * The entry that closes a capped list of field errors: it names no field and counts the distinct
 * errors left out (lib/http/problem.ts turns it into `errorsNotShown`). It crosses the bus with the others.
 */
export interface NotShownMarker extends FieldError {
  errorsNotShown: number;
}

/** JSON Pointer of ajv to the path partners read (`contactIds[3]`, `customFields.a/b`). */
function readablePath(instancePath: string): string {
  if (!instancePath) return "";
  let out = "";
  for (const p of instancePath.split("/")) {
    if (!p) continue;
    out += /^\d+$/.test(p) ? `[${p}]` : `.${p.replace(/~1/g, "/").replace(/~0/g, "~")}`;
  }
  return out.startsWith(".") ? out.slice(1) : out;
}

/**
 * Turns ajv's errors into `{ path, message }` pairs a partner can act on: each distinct error once,
 * the first `max` of them named, then one `NotShownMarker` counting the rest. Linear in the number
 * of errors (a 10,000-item body of bad ids reports 10,000 errors, twice over under `if/then/else`;
 * the old pairwise duplicate check took 11 s for 20,000): the path of an error past the cap is never
 * built.
 */
export function toFieldErrors(errors: ErrorObject[] | null | undefined, max = MAX_FIELD_ERRORS): FieldError[] {
  const out: FieldError[] = [];
  const seen = new Set<string>();
  let notShown = 0;
  for (const e of errors ?? []) {
    const params = e.params as { additionalProperty?: unknown; missingProperty?: unknown };
    const extra = e.keyword === "additionalProperties" ? String(params.additionalProperty) : e.keyword === "required" ? String(params.missingProperty) : "";
    const worded = e.keyword === "additionalProperties" || e.keyword === "required" || e.keyword === "enum" ? "" : (e.message ?? "");
    const key = `${e.instancePath}\u0000${e.keyword}\u0000${extra}\u0000${worded}`;
    if (seen.has(key)) continue;
    seen.add(key);
    if (out.length >= max) {
      notShown++;
      continue;
    }
    let path = readablePath(e.instancePath);
    let message = e.message ?? "is invalid";
    if (e.keyword === "additionalProperties") {
      path = path ? `${path}.${extra}` : extra;
      message = "is not an allowed field";
    } else if (e.keyword === "required") {
      path = path ? `${path}.${extra}` : extra;
      message = "is required";
    } else if (e.keyword === "enum") {
      message = `must be one of ${(e.params as { allowedValues: unknown[] }).allowedValues.join(", ")}`;
    }
    out.push({ path, message });
  }
  if (notShown > 0) out.push({ path: "", message: `${notShown} more errors are not shown`, errorsNotShown: notShown } as NotShownMarker);
  return out;
}

/** Errors that end the report alone: a collection over its size, whose items are not read one by one. */
const TOO_MANY = new Set(["maxItems", "maxProperties"]);

/**
 * The most values (array items and object members, nested) a body may hold for the pass that
 * collects every error to run: the largest valid body holds about 20,000 (a bulk membership change:
 * 10,000 contact ids and 10,000 exclusions). A larger one is invalid wherever its first error lies,
 * and is answered with that error alone.
 */
export const FULL_REPORT_MAX_VALUES = 25_000;

/** Whether `value` holds more than `max` nested values; stops counting as soon as it does. */
export function holdsMoreThan(value: unknown, max: number): boolean {
  let count = 0;
  const stack: unknown[] = [value];
  while (stack.length) {
    const v = stack.pop();
    if (v === null || typeof v !== "object") continue;
    const items = Array.isArray(v) ? v : Object.values(v);
    count += items.length;
    if (count > max) return true;
    for (const item of items) if (item !== null && typeof item === "object") stack.push(item);
  }
  return false;
}

/** The same options as `ajv`, stopping at the first error: the fast pass of `compileChecker`. */
const ajvFirst = new Ajv({ allErrors: false, strict: true, strictRequired: false, useDefaults: true, allowUnionTypes: true });
addFormats(ajvFirst);
ajvFirst.addKeyword({ keyword: MESSAGE_KEYWORD, schemaType: "string" });

function compileFirstError(schema: { $id?: string }): ValidateFunction {
  if (schema.$id) {
    const existing = ajvFirst.getSchema(schema.$id);
    if (existing) return existing;
  }
  return ajvFirst.compile(schema);
}

/**
 * A checker for one schema: a first pass that stops at the first error (what every valid request
 * pays), and only for an invalid one a pass that collects every error, unless the first error is an
 * array or object over its maximum size, or the body holds more values than any valid one: then the
 * first error alone is the answer, and nothing walks the oversized collection item by item. Every
 * request array carries `maxItems`, so the full pass reads at most ~25,000 values (tens of ms).
 */
export function compileChecker(schema: { $id?: string }): (params: unknown) => true | FieldError[] {
  const first = compileFirstError(schema);
  let all: ValidateFunction | null = null;
  return (params: unknown) => {
    if (first(params)) return true;
    const stop = first.errors?.find((e) => TOO_MANY.has(e.keyword));
    if (stop) return toFieldErrors(explainErrors(schema, [stop]));
    if (holdsMoreThan(params, FULL_REPORT_MAX_VALUES)) return toFieldErrors(explainErrors(schema, first.errors));
    all ??= compileSchema(schema);
    if (all(params)) return true;
    return toFieldErrors(explainErrors(schema, all.errors));
  };
}

// Moleculer's validator middleware treats any answer other than `true` as the list of errors.
type Checker = ((params: unknown) => true | FieldError[]) & { async?: boolean };
type BaseChecker = ReturnType<Validators.Base["compile"]>;

export class SchemaValidator extends Validators.Base {
  private readonly fallback = new Validators.Fastest();

  override init(broker: Parameters<Validators.Base["init"]>[0]): void {
    super.init(broker);
    this.fallback.init(broker);
  }

  override compile(schema: Record<string, unknown>): BaseChecker {
    if (typeof schema.$id !== "string") return this.fallback.compile(schema);
    const check: Checker = compileChecker(schema);
    return check as unknown as BaseChecker;
  }

  override validate(params: Record<string, unknown>, schema: Record<string, unknown>): boolean {
    const res = (this.compile(schema) as unknown as Checker)(params);
    if (res === true) return true;
    throw new Error(res.map((e) => `${e.path} ${e.message}`).join("; "));
  }

  override convertSchemaToMoleculer(schema: Record<string, unknown>): Record<string, unknown> {
    return schema;
  }
}
