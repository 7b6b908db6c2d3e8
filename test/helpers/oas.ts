/**
 * The OpenAPI document as a test reads it: its operations with their parameters, bodies and
 * responses ($refs resolved), one ajv (2020-12 dialect, ajv-formats) that validates any schema of
 * the document, and fast-check arbitraries built from its schemas, so that a walk generates what the
 * document calls valid (test/e2e/conformance.spec.ts).
 *
 * A generator may be told, per field name, of a value source that knows the running app (`hints`):
 * ids of seeded resources, numbers that really are phone numbers, and so on. Such values are mixed
 * with the schema's own `examples` and with values drawn from the schema alone, so every part of
 * what the schema allows keeps being tried.
 */
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import fc from "fast-check";

export type Schema = Record<string, any>;
export type In = "path" | "query" | "header";

export interface Param {
  name: string;
  in: In;
  required: boolean;
  schema: Schema;
  description: string;
}

export interface Answer {
  /** Media type -> schema (absent: the answer has no body). */
  content: Record<string, Schema | undefined>;
  headers: Record<string, Schema>;
}

export interface Operation {
  key: string;
  method: string;
  path: string;
  description: string;
  params: Param[];
  body: { required: boolean; mediaType: "application/json" | "multipart/form-data"; schema: Schema } | null;
  responses: Record<string, Answer>;
  needsKey: boolean;
}

const BASE = "https://conformance.local/openapi.json";
/** The keys of a path item that are operations (OpenAPI 3.1). */
export const METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

export class OpenApi {
  private readonly ajv: Ajv2020;
  private readonly compiled = new Map<string, ReturnType<Ajv2020["compile"]>>();

  constructor(readonly doc: any) {
    this.ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
    addFormats(this.ajv);
    this.ajv.addSchema({ $id: BASE, components: doc.components });
  }

  deref<T = Schema>(x: any): T {
    while (x && typeof x.$ref === "string" && x.$ref.startsWith("#/")) {
      x = x.$ref
        .slice(2)
        .split("/")
        .reduce((o: any, k: string) => o[k.replace(/~1/g, "/").replace(/~0/g, "~")], this.doc);
    }
    return x;
  }

  /** ajv's messages for `value` against `schema` (a schema of the document), or null when valid. */
  errors(schema: Schema, value: unknown): string[] | null {
    const text = JSON.stringify(schema);
    let v = this.compiled.get(text);
    if (!v) {
      v = this.ajv.compile(JSON.parse(text.replace(/"#\/components\//g, `"${BASE}#/components/`)));
      this.compiled.set(text, v);
    }
    if (v(value)) return null;
    return (v.errors ?? []).map((e) => `${e.instancePath || "/"} ${e.message}`);
  }

  isValid(schema: Schema, value: unknown): boolean {
    return this.errors(schema, value) === null;
  }

  operations(): Operation[] {
    const out: Operation[] = [];
    for (const [path, item] of Object.entries(this.doc.paths as Record<string, Record<string, any>>)) {
      for (const [method, op] of Object.entries(item)) {
        if (!METHODS.includes(method)) continue;
        const params = [...(item.parameters ?? []), ...(op.parameters ?? [])]
          .map((p) => this.deref(p))
          .map((p) => ({ name: p.name, in: p.in, required: !!p.required, schema: this.deref(p.schema ?? {}), description: p.description ?? "" }));
        const content = op.requestBody?.content ?? {};
        const mediaType = content["application/json"] ? "application/json" : content["multipart/form-data"] ? "multipart/form-data" : null;
        const responses: Record<string, Answer> = {};
        for (const [status, r] of Object.entries(op.responses as Record<string, any>)) {
          const res = this.deref(r);
          const headers = Object.fromEntries(Object.entries(res.headers ?? {}).map(([n, h]) => [n.toLowerCase(), this.deref(this.deref(h).schema ?? {})]));
          responses[status] = {
            content: Object.fromEntries(Object.entries(res.content ?? {}).map(([t, c]: [string, any]) => [t, c.schema])),
            headers,
          };
        }
        out.push({
          key: `${method.toUpperCase()} ${path}`,
          method: method.toUpperCase(),
          path,
          description: [op.summary, op.description].filter(Boolean).join("\n"),
          params,
          body: mediaType ? { required: !!op.requestBody.required, mediaType, schema: this.deref(content[mediaType].schema) } : null,
          responses,
          needsKey: (op.security ?? this.doc.security ?? []).length > 0,
        });
      }
    }
    return out;
  }

  /** The descriptions met on the way from `schema` to the field at `path` ("message.text", "contactIds[3]"). */
  descriptionsAlong(schema: Schema | undefined, path: string): string[] {
    const out: string[] = [];
    let s: Schema | undefined = schema && this.deref(schema);
    for (const seg of path.split(/\.|\[\d+\]/).filter(Boolean)) {
      if (!s) break;
      if (s.description) out.push(s.description);
      s =
        s.properties?.[seg] ??
        (s.items && /^\d+$/.test(seg) ? s.items : undefined) ??
        (typeof s.additionalProperties === "object" ? s.additionalProperties : s.items);
      s = s && this.deref(s);
    }
    if (s?.description) out.push(s.description);
    return out;
  }
}

// ---- schemas -> arbitraries ----------------------------------------------------------------

/** A value source that knows the app, for a field of this name and schema (null: none). */
export type Hint = (name: string, schema: Schema) => fc.Arbitrary<unknown> | null;

/** Characters a string may hold: mostly printable ASCII, some of the rest of Unicode, now and then a control character. */
const char = fc.oneof(
  { weight: 30, arbitrary: fc.string({ unit: "grapheme-ascii", minLength: 1, maxLength: 1 }) },
  { weight: 6, arbitrary: fc.string({ unit: "binary", minLength: 1, maxLength: 1 }) },
  { weight: 1, arbitrary: fc.constantFrom("\u0000", "\t", "\n", "\r", "\u001f", "\u007f", "\u0085", "\u2028", "\ufeff") },
);
/** Header values: what HTTP can carry (visible ASCII, space, tab, obs-text), no white space at either end (HTTP strips it). */
const headerChar = fc.oneof(
  { weight: 30, arbitrary: fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)) },
  { weight: 2, arbitrary: fc.constantFrom(" ", "\t") },
  { weight: 2, arbitrary: fc.integer({ min: 0x80, max: 0xff }).map((c) => String.fromCharCode(c)) },
);

const codePoints = (s: string) => [...s].length;

/** A length in [min, max]: mostly short, sometimes exactly a bound. */
function lengthIn(min: number, max: number): fc.Arbitrary<number> {
  return fc.oneof(
    { weight: 8, arbitrary: fc.integer({ min, max: Math.min(max, min + 24) }) },
    { weight: 1, arbitrary: fc.constant(min) },
    { weight: 1, arbitrary: fc.constant(max) },
  );
}

/** RFC 3339 date-times: mostly this century, sometimes any year 0001-9999, in the forms the format allows (offsets, lower case, a space, a leap second). */
const dateTime: fc.Arbitrary<string> = fc
  .tuple(
    fc.oneof(
      { weight: 4, arbitrary: fc.date({ min: new Date("2000-01-01T00:00:00Z"), max: new Date("2100-01-01T00:00:00Z"), noInvalidDate: true }) },
      { weight: 1, arbitrary: fc.date({ min: new Date("0001-01-01T00:00:00Z"), max: new Date("9999-12-31T23:59:59Z"), noInvalidDate: true }) },
    ),
    fc.oneof(
      { weight: 8, arbitrary: fc.constantFrom("iso", "offset", "seconds") },
      { weight: 2, arbitrary: fc.constantFrom("lower", "space") },
      { weight: 1, arbitrary: fc.constant("leap") },
    ),
    fc.integer({ min: -14, max: 14 }),
  )
  .map(([d, form, h]) => {
    const iso = d.toISOString();
    const off = `${h < 0 ? "-" : "+"}${String(Math.abs(h)).padStart(2, "0")}:${h % 2 ? "30" : "00"}`;
    if (form === "offset") return `${iso.slice(0, 19)}${off}`;
    if (form === "seconds") return `${iso.slice(0, 19)}Z`;
    if (form === "lower") return iso.toLowerCase();
    if (form === "space") return iso.replace("T", " ");
    if (form === "leap") return `${iso.slice(0, 11)}23:59:60Z`;
    return iso;
  });

/**
 * String arbitraries by what decides them (the keywords buildString reads), for every Generator of
 * the file: fast-check spent most of a conformance walk building `stringMatching`, `emailAddress` and
 * `webUrl` arbitraries (each builds its strings' bias tables), and an arbitrary is a pure
 * description, so one per kind draws exactly what a fresh one would.
 */
const STRINGS = new Map<string, fc.Arbitrary<string>>();

export class Generator {
  constructor(
    private readonly api: OpenApi,
    private readonly hint: Hint,
    /** Schema-drawn values to leave out for a field (ids of resources the walk made, say: "random" must stay random). */
    private readonly avoid: (name: string, value: unknown) => boolean = () => false,
    /** How often hinted values, examples and pure schema values are drawn, relative to each other. */
    private readonly weights = { hint: 3, example: 1, pure: 2 },
    /**
     * Placeholders a hint may give (an id filled in just before sending): their stand-in (a value of
     * the same shape) when `v` is one, else undefined. Values are checked with stand-ins in place.
     */
    private readonly standIn: (v: unknown) => unknown = () => undefined,
  ) {}

  private withStandIns(v: unknown): unknown {
    const s = this.standIn(v);
    if (s !== undefined) return s;
    if (Array.isArray(v)) return v.map((x) => this.withStandIns(x));
    if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, this.withStandIns(x)]));
    return v;
  }

  /** Values of `schema` for the field `name` (in a header when `header`). */
  of(schema: Schema, name = "", header = false): fc.Arbitrary<unknown> {
    const s = this.api.deref(schema);
    const parts: Array<fc.WeightedArbitrary<unknown>> = [{ weight: this.weights.pure, arbitrary: this.pure(s, name, header) }];
    const examples = [...(s.examples ?? []), ...(s.example !== undefined ? [s.example] : [])].filter((e) => this.api.isValid(s, e));
    if (examples.length) parts.push({ weight: this.weights.example, arbitrary: fc.constantFrom(...examples) });
    const hinted = name ? this.hint(name, s) : null;
    if (hinted) parts.push({ weight: this.weights.hint, arbitrary: hinted });
    return parts.length === 1 ? parts[0]!.arbitrary : fc.oneof(...parts);
  }

  /** Values drawn from the schema alone (checked against it with ajv). */
  pure(schema: Schema, name = "", header = false): fc.Arbitrary<unknown> {
    const s = this.api.deref(schema);
    return this.shape(s, name, header).filter((v) => this.api.isValid(s, this.withStandIns(v)) && !this.avoid(name, v));
  }

  private shape(s: Schema, name: string, header: boolean): fc.Arbitrary<unknown> {
    if (s.const !== undefined) return fc.constant(s.const);
    if (Array.isArray(s.enum)) return fc.constantFrom(...s.enum);
    const { anyOf, oneOf, allOf, if: cond, then, else: otherwise, not: _not, ...base } = s;
    if (allOf) return this.shape(allOf.map((x: Schema) => this.api.deref(x)).reduce(merge, base), name, header);
    const branches: Schema[] = anyOf ?? oneOf;
    if (branches) return fc.oneof(...branches.map((b) => this.shape(merge(base, this.api.deref(b)), name, header)));
    if (cond) return fc.oneof(this.shape(merge(merge(base, cond), then ?? {}), name, header), this.shape(merge(base, otherwise ?? {}), name, header));
    const types: string[] = Array.isArray(s.type) ? s.type : s.type ? [s.type] : s.properties ? ["object"] : ["string", "integer", "boolean", "null"];
    return fc.oneof(...types.map((t) => this.typed(t, s, name, header)));
  }

  private typed(type: string, s: Schema, name: string, header: boolean): fc.Arbitrary<unknown> {
    switch (type) {
      case "null":
        return fc.constant(null);
      case "boolean":
        return fc.boolean();
      case "integer":
      case "number":
        return this.numeric(type, s);
      case "string":
        return this.string(s, header);
      case "array":
        return this.array(s, name);
      default:
        return this.object(s);
    }
  }

  private numeric(type: string, s: Schema): fc.Arbitrary<number> {
    const min = s.minimum ?? (s.exclusiveMinimum !== undefined ? s.exclusiveMinimum + 1 : -1e6);
    const max = s.maximum ?? (s.exclusiveMaximum !== undefined ? s.exclusiveMaximum - 1 : 1e9);
    const small = fc.integer({ min: Math.max(min, -(2 ** 31)), max: Math.min(max, Math.max(min, -(2 ** 31)) + 1000, 2 ** 31 - 1) });
    const wide = fc.maxSafeInteger().filter((n) => n >= min && n <= max);
    const ints = fc.oneof({ weight: 6, arbitrary: small }, { weight: 1, arbitrary: fc.constantFrom(min, max) }, { weight: 1, arbitrary: wide });
    if (type === "integer") return ints;
    return fc.oneof(ints, fc.double({ min, max, noNaN: true, noDefaultInfinity: true }));
  }

  private string(s: Schema, header: boolean): fc.Arbitrary<string> {
    const key = JSON.stringify([header, s.minLength, s.maxLength, s.format, s.pattern]);
    let arb = STRINGS.get(key);
    if (!arb) STRINGS.set(key, (arb = this.buildString(s, header)));
    return arb;
  }

  private buildString(s: Schema, header: boolean): fc.Arbitrary<string> {
    const min = s.minLength ?? 0;
    const max = s.maxLength ?? Math.max(min, 64);
    const fits = (v: string) => codePoints(v) >= min && codePoints(v) <= max && (!header || v === v.trim());
    if (s.format === "date-time") return dateTime.filter(fits);
    if (s.format === "email") return fc.emailAddress().filter(fits);
    if (s.format === "uri") return fc.webUrl({ withQueryParameters: true }).filter(fits);
    if (s.format === "uuid") return fc.uuid().filter(fits);
    if (s.format === "binary") return fc.constant("");
    if (s.pattern) {
      const re = new RegExp(s.pattern);
      return fc.oneof({ weight: 4, arbitrary: fc.stringMatching(re) }, { weight: 1, arbitrary: fc.stringMatching(re, { size: "large" }) }).filter(fits);
    }
    return lengthIn(min, max)
      .chain((n) => fc.string({ unit: header ? headerChar : char, minLength: n, maxLength: n }))
      .filter(fits);
  }

  private array(s: Schema, name: string): fc.Arbitrary<unknown[]> {
    const items = this.api.deref(s.items ?? {});
    const min = s.minItems ?? 0;
    const max = s.maxItems ?? Math.max(min, 5);
    const item = this.of(items, singular(name));
    return lengthIn(min, max).chain((n) =>
      s.uniqueItems ? fc.uniqueArray(item, { minLength: n, maxLength: n, selector: (v) => JSON.stringify(v) }) : fc.array(item, { minLength: n, maxLength: n }),
    );
  }

  private object(s: Schema): fc.Arbitrary<Record<string, unknown>> {
    const props = (s.properties ?? {}) as Record<string, Schema>;
    const required: string[] = (s.required ?? []).filter((k: string) => k in props);
    const fields = Object.fromEntries(Object.entries(props).map(([k, p]) => [k, this.of(p, k)]));
    // Sometimes the smallest object the schema allows: only its required fields.
    const known = fc.oneof(
      { weight: 9, arbitrary: fc.record(fields, { requiredKeys: required }) },
      { weight: 1, arbitrary: fc.record(Object.fromEntries(required.map((k) => [k, fields[k]!]))) },
    );
    const extras: Array<fc.Arbitrary<Record<string, unknown>>> = [];
    if (s.additionalProperties && typeof s.additionalProperties === "object") {
      const keys = s.propertyNames?.pattern ? fc.stringMatching(new RegExp(s.propertyNames.pattern)) : fc.string({ minLength: 1, maxLength: 12 });
      extras.push(fc.dictionary(keys, this.of(s.additionalProperties), { maxKeys: Math.min(s.maxProperties ?? 4, 4) }));
    }
    for (const [pattern, p] of Object.entries((s.patternProperties ?? {}) as Record<string, Schema>)) {
      extras.push(fc.option(fc.tuple(fc.stringMatching(new RegExp(pattern)), this.of(p)), { nil: undefined }).map((kv) => (kv ? { [kv[0]]: kv[1] } : {})));
    }
    return fc.tuple(known, ...extras).map(([k, ...more]) => Object.assign({}, ...more, k));
  }
}

/** The field name an array's items stand for ("contactIds" -> "contactId"), for hints. */
export const singular = (name: string) => (name.endsWith("Ids") ? name.slice(0, -1) : name.endsWith("ids") ? "id" : name);

/** `b`'s keywords over `a`'s; properties merged, required united. */
function merge(a: Schema, b: Schema): Schema {
  const out: Schema = { ...a, ...b };
  if (a.properties || b.properties) out.properties = { ...a.properties, ...b.properties };
  if (a.required || b.required) out.required = [...new Set([...(a.required ?? []), ...(b.required ?? [])])];
  return out;
}
