/** Examples for the OpenAPI document: a value that satisfies a schema, built from its examples, type and format. */
import type { JsonSchema } from "./api";

type Components = Record<string, JsonSchema>;

/** A value that satisfies `schema`: its first example, else one built from its type and format. */
export function sampleOf(schema: unknown, components: Components = {}, depth = 0): unknown {
  if (!schema || typeof schema !== "object" || depth > 8) return null;
  const s = schema as JsonSchema;
  if (typeof s.$ref === "string") return sampleOf(components[s.$ref.split("/").pop()!], components, depth + 1);
  if (Array.isArray(s.examples) && s.examples.length) return s.examples[0];
  if ("const" in s) return s.const;
  if (Array.isArray(s.enum)) return s.enum.find((v) => v !== null) ?? null;
  // Alternatives on their own; beside a type (an object with `oneOf` required fields, say) they only constrain it.
  if (s.type === undefined && Array.isArray(s.oneOf)) return sampleOf(s.oneOf[0], components, depth + 1);
  if (s.type === undefined && Array.isArray(s.anyOf)) return sampleOf(s.anyOf[0], components, depth + 1);
  const types = Array.isArray(s.type) ? (s.type as string[]) : [s.type as string];
  const type = types.find((t) => t !== "null") ?? types[0];
  switch (type) {
    case "object": {
      const props = (s.properties ?? {}) as Record<string, unknown>;
      // Exactly one of several fields (`oneOf` of `required`): the first alternative's, not the others'.
      const others = Array.isArray(s.oneOf)
        ? (s.oneOf as JsonSchema[]).slice(1).flatMap((b) => (Array.isArray(b.required) ? (b.required as string[]) : []))
        : [];
      return Object.fromEntries(
        Object.entries(props)
          .filter(([k]) => !others.includes(k))
          .map(([k, v]) => [k, sampleOf(v, components, depth + 1)]),
      );
    }
    case "array": {
      const n = typeof s.minItems === "number" && s.minItems > 1 ? s.minItems : 1;
      return Array.from({ length: n }, () => sampleOf(s.items, components, depth + 1));
    }
    case "integer":
      return typeof s.minimum === "number" ? s.minimum : 1;
    case "number":
      return typeof s.minimum === "number" ? s.minimum : 1.5;
    case "boolean":
      return true;
    case "null":
      return null;
    case "string":
      switch (s.format) {
        case "date-time":
          return "2026-11-22T10:00:00Z";
        case "date":
          return "2026-11-22";
        case "uuid":
          return "0b6e4c1e-8a8c-4f5e-9a0e-3d2f1c4b5a69";
        case "email":
          return "ana@example.com";
        case "uri":
          return "https://example.com/path";
        default:
          return "string".padEnd(typeof s.minLength === "number" ? s.minLength : 0, "x");
      }
    default:
      return null;
  }
}
