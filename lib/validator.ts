/**
 * Validation: our JSON schemas (they carry an `$id`) are compiled by ajv; everything else (Moleculer's
 * own `$node.*` schemas, in fastest-validator syntax) goes to Moleculer's built-in validator.
 */
import Ajv, { type ErrorObject, type ValidateFunction } from "ajv";
import addFormats from "ajv-formats";
import { Validators } from "moleculer";
import type { FieldError } from "./errors";

/** A UUID in either case, as an ajv `pattern` (every id the API hands out is one). */
export const UUID_PATTERN = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
const UUID_RE = new RegExp(UUID_PATTERN);
/** Whether `s` has the shape of a UUID (a column of type uuid would refuse anything else with an error). */
export const isUuid = (s: string): boolean => UUID_RE.test(s);

/** One ajv for the whole process: schemas are registered by `$id` once and shared. */
export const ajv = new Ajv({ allErrors: true, strict: true, strictRequired: false, useDefaults: true, allowUnionTypes: true });
addFormats(ajv);

/** Compiles a schema once per `$id` (the same schema object may be used by many actions). */
export function compileSchema(schema: { $id?: string }): ValidateFunction {
  if (schema.$id) {
    const existing = ajv.getSchema(schema.$id);
    if (existing) return existing;
  }
  return ajv.compile(schema);
}

/** Turns ajv's errors into `{ path, message }` pairs a partner can act on. */
export function toFieldErrors(errors: ErrorObject[] | null | undefined): FieldError[] {
  const out: FieldError[] = [];
  for (const e of errors ?? []) {
    let path = e.instancePath
      .split("/")
      .filter(Boolean)
      .map((p) => (/^\d+$/.test(p) ? `[${p}]` : `.${p.replace(/~1/g, "/").replace(/~0/g, "~")}`))
      .join("")
      .replace(/^\./, "");
    let message = e.message ?? "is invalid";
    if (e.keyword === "additionalProperties") {
      const extra = String((e.params as { additionalProperty: string }).additionalProperty);
      path = path ? `${path}.${extra}` : extra;
      message = "is not an allowed field";
    } else if (e.keyword === "required") {
      const missing = String((e.params as { missingProperty: string }).missingProperty);
      path = path ? `${path}.${missing}` : missing;
      message = "is required";
    } else if (e.keyword === "enum") {
      message = `must be one of ${(e.params as { allowedValues: unknown[] }).allowedValues.join(", ")}`;
    }
    if (!out.some((o) => o.path === path && o.message === message)) out.push({ path, message });
  }
  return out;
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
    const validate = compileSchema(schema);
    const check: Checker = (params: unknown) => (validate(params) ? true : toFieldErrors(validate.errors));
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
