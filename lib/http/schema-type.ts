/**
 * The compiler's check that a schema of *.schemas.ts says what the TypeScript type it describes
 * says: `export const contactOut = { ... } satisfies SchemaOf<ContactOut>`. Types only: nothing of
 * this exists at run time, and a schema checked this way is the same object it was before.
 *
 * ajv's own `JSONSchemaType<T>` reads a value's nullability from `?`: it demands `nullable: true` of
 * every optional property and refuses it on a required `T | null` one. This API means the other
 * thing: an optional field may be absent but not null (unless its type says `| null`), and an answer
 * carries `null` where its type says so. SchemaOf reads nullability from `null` instead: a schema
 * says `nullable: true` (or lists `"null"` among its types) exactly when its value may be null.
 * The rest is JSONSchemaType's own checks: every property of the type has a schema, each of the
 * right JSON type; a `required` name is one the type does not mark optional; `enum`, `const` and
 * `default` values are of the type. An object of properties written in place (or declared
 * `satisfies PropertiesOf<T>`) may name no property the type lacks: spread from elsewhere, its extra
 * names go unseen, as TypeScript checks excess names of a fresh object only. And, unlike
 * JSONSchemaType (which lets any keyword through), a keyword not named below is an error: the ones
 * ajv validates with, and the annotations the API documents with (`description`, `examples` of the
 * type, `readOnly`, ..., `x-message` of lib/http/schema-messages.ts, `contentTypes` that only
 * lib/http/openapi.ts reads). Like JSONSchemaType, it does not ask that `required` list every name
 * the type does not mark optional (a default fills some in).
 */
import type { MESSAGE_KEYWORD } from "./schema-messages";

type NonNull<V> = Exclude<V, null | undefined>;

/** JSON's names of the types of V's values (null apart): TypeScript's number is JSON's integer or number. */
type TypeName<V> = V extends string
  ? "string"
  : V extends number
    ? "integer" | "number"
    : V extends boolean
      ? "boolean"
      : V extends readonly unknown[]
        ? "array"
        : V extends object
          ? "object"
          : never;
type AnyTypeName = "string" | "integer" | "number" | "boolean" | "array" | "object" | "null";
/** Whether V's values (null apart) are of more than one JSON type (integer and number are one). */
type ManyTypes<W> = true extends IsUnion<Kind<W>> ? true : false;
type Kind<V> = V extends string ? "string" : V extends number ? "number" : V extends boolean ? "boolean" : V extends readonly unknown[] ? "array" : "object";
type IsUnion<T, All = T> = T extends unknown ? ([All] extends [T] ? false : true) : never;

/** A documentation example: the value, or part of an object (a body's example leaves out what the path gives). */
type Example<V> = V extends readonly unknown[] ? V : V extends object ? Partial<V> : V;

/** What any schema may carry besides its type's keywords: annotations and the values it allows. */
type Common<V> = {
  $id?: string;
  $comment?: string;
  title?: string;
  description?: string;
  examples?: readonly Example<V>[];
  default?: V;
  enum?: readonly V[];
  const?: V;
  readOnly?: boolean;
  writeOnly?: boolean;
  deprecated?: boolean;
  allOf?: readonly Subschema<V>[];
  anyOf?: readonly Subschema<V>[];
  oneOf?: readonly Subschema<V>[];
  if?: Subschema<V>;
  then?: Subschema<V>;
  else?: Subschema<V>;
  /** What the value is not: any schema. */
  not?: Subschema<unknown>;
} & { [K in typeof MESSAGE_KEYWORD]?: string };

interface StringKeywords {
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  format?: string;
  contentMediaType?: string;
  contentEncoding?: string;
  /** A binary answer's media types, one per kind of file (lib/http/openapi.ts: OpenAPI only). */
  contentTypes?: readonly string[];
}
interface NumberKeywords {
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  multipleOf?: number;
}
interface ArrayKeywords {
  minItems?: number;
  maxItems?: number;
  uniqueItems?: boolean;
}
interface ObjectKeywords {
  minProperties?: number;
  maxProperties?: number;
  propertyNames?: { type?: "string" } & StringKeywords;
}

/** The empty object type, `{}`. */
type Empty = Record<never, unknown>;
/** Literal names (`id`), as opposed to index signatures (`[key: string]`, `` [k: `customFields.${string}`] ``). */
type LiteralKey<K extends PropertyKey> = Empty extends Record<K, unknown> ? never : K;
type LiteralKeys<T> = keyof { [K in keyof T as LiteralKey<K>]: 0 };
/** The value of T's index signatures (never without one). */
type IndexValue<T> = T[Exclude<keyof T, LiteralKeys<T>>];
/** The names T does not mark optional (`?`): the only ones `required` may list. */
type RequiredKeys<T> = { [K in LiteralKeys<T>]-?: Empty extends Pick<T, K> ? never : K }[LiteralKeys<T>];

/** `properties` of an object of type T: a schema for each of its names, no other name. */
export type PropertiesOf<T> = { [K in keyof T as LiteralKey<K>]-?: SchemaOf<T[K]> } & {
  [K in keyof T as Exclude<K, LiteralKey<K>>]?: SchemaOf<T[K]>;
};

type ObjectSchema<T, Part extends boolean> = ObjectKeywords & {
  additionalProperties?: boolean | SchemaOf<IndexValue<T>>;
  patternProperties?: Record<string, SchemaOf<IndexValue<T>>>;
} & (Part extends true
    ? { type?: "object"; properties?: { [K in keyof T]?: Subschema<T[K]> }; required?: readonly (keyof T)[] }
    : { type: "object"; required?: readonly RequiredKeys<T>[] } & ([LiteralKeys<T>] extends [never]
        ? { properties?: PropertiesOf<T> }
        : { properties: PropertiesOf<T> }));

/** The keywords of a value whose JSON type is one (W is V without null). */
type OneType<Part extends boolean, Type> = Part extends true ? { type?: Type } : { type: Type };
type OfItsType<W, Part extends boolean> = [W] extends [string]
  ? OneType<Part, "string"> & StringKeywords
  : [W] extends [number]
    ? OneType<Part, "integer" | "number"> & NumberKeywords
    : [W] extends [boolean]
      ? OneType<Part, "boolean">
      : [W] extends [readonly (infer I)[]]
        ? OneType<Part, "array"> & ArrayKeywords & (Part extends true ? { items?: Subschema<I> } : { items: SchemaOf<I> })
        : ObjectSchema<W, Part>;

/** `nullable: true` exactly when the value may be null (a part of a schema need not repeat it). */
type Nullable<V, Part extends boolean> = null extends V ? (Part extends true ? { nullable?: boolean } : { nullable: true }) : { nullable?: false };

/** Scalars of several JSON types, or nullable ones, may list their types (with `"null"` last when null is a value). */
type TypeList<V, W = NonNull<V>> = {
  type: null extends V ? readonly [...TypeName<W>[], "null"] : readonly TypeName<W>[];
} & ([Extract<W, string>] extends [never] ? unknown : StringKeywords) &
  ([Extract<W, number>] extends [never] ? unknown : NumberKeywords);

type Forms<V, Part extends boolean, W = NonNull<V>> = [W] extends [never]
  ? never
  : (true extends ManyTypes<W> ? never : OfItsType<W, Part> & Nullable<V, Part>) | ([W] extends [string | number | boolean] ? TypeList<V> : never);

/** Any value: a schema of any type, as `not` takes (`{ not: { type: "null" } }`). */
type AnySchema = { type?: AnyTypeName | readonly AnyTypeName[]; nullable?: boolean } & Common<unknown>;

/** The schema of a value of type V (`undefined` is absence: `required` says whether it is allowed). */
export type SchemaOf<V> = unknown extends V ? AnySchema : Forms<Exclude<V, undefined>, false> & Common<Exclude<V, undefined>>;

/** A part of a schema about the same value (`allOf`, `anyOf`, `oneOf`, `if`, `then`, `else`): any of its keywords, none required. */
export type Subschema<V> = unknown extends V ? AnySchema : Forms<Exclude<V, undefined>, true> & Common<Exclude<V, undefined>>;
