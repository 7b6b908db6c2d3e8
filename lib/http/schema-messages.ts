/**
 * Rules the schemas state (so that ajv enforces them and openapi.json documents them) in words a
 * partner can act on. A schema may carry `x-message` beside a `pattern`, a `format`, a `maxLength`, a
 * `maxItems`, an `anyOf` or a
 * `oneOf`: when that keyword fails, its error says the message instead of ajv's ("must match
 * pattern ...", "must match a schema in anyOf"). An `anyOf`/`oneOf` whose branches each require a
 * field (`{ required: ["text"] }`) is reported once, at that field (for a `oneOf` that more than one
 * branch matched, at the second field given), instead of once per branch. The document leaves
 * `x-message` out (lib/http/openapi.ts); ajv knows it as an annotation (lib/http/validator.ts).
 */
import type { ErrorObject } from "ajv";

export const MESSAGE_KEYWORD = "x-message";

/** Keywords whose failure an `x-message` beside them rewords. */
const REWORDED = new Set(["pattern", "format", "anyOf", "oneOf", "maxItems", "maxLength"]);

/** The value at an ajv schemaPath (`#/properties/text/pattern`) of `root`. */
function at(root: unknown, schemaPath: string): unknown {
  let node = root;
  for (const raw of schemaPath.replace(/^#\/?/, "").split("/")) {
    if (raw === "") continue;
    if (!node || typeof node !== "object") return undefined;
    node = (node as Record<string, unknown>)[raw.replace(/~1/g, "/").replace(/~0/g, "~")];
  }
  return node;
}

const pointer = (name: string) => `/${name.replace(/~/g, "~0").replace(/\//g, "~1")}`;

/** The field a combinator's branch requires first, if it requires one. */
function requiredOf(branch: unknown): string | undefined {
  const required = (branch as { required?: unknown } | undefined)?.required;
  return Array.isArray(required) && typeof required[0] === "string" ? required[0] : undefined;
}

/**
 * ajv's errors with every `x-message` of `schema` applied (see above); other errors unchanged.
 * Linear: each distinct schema path is looked up once (10,000 bad items of one array share one).
 */
export function explainErrors(schema: unknown, errors: ErrorObject[] | null | undefined): ErrorObject[] {
  if (!errors?.length) return errors ?? [];
  const messages = new Map<string, string | undefined>();
  const messageOf = (e: ErrorObject): string | undefined => {
    if (messages.has(e.schemaPath)) return messages.get(e.schemaPath);
    const parentPath = e.schemaPath.slice(0, e.schemaPath.lastIndexOf("/"));
    const found = (at(schema, parentPath) as Record<string, unknown> | undefined)?.[MESSAGE_KEYWORD];
    const message = typeof found === "string" ? found : undefined;
    messages.set(e.schemaPath, message);
    return message;
  };
  const out: ErrorObject[] = [];
  const dropped: string[] = [];
  for (const e of errors) {
    if ((e.keyword === "anyOf" || e.keyword === "oneOf") && messageOf(e) !== undefined) dropped.push(`${e.schemaPath}/`); // reported once: the branches' own errors go
  }
  for (const e of errors) {
    if (dropped.length && dropped.some((d) => e.schemaPath.startsWith(d))) continue;
    if (!REWORDED.has(e.keyword)) {
      out.push(e);
      continue;
    }
    const message = messageOf(e);
    if (message === undefined) {
      out.push(e);
      continue;
    }
    let instancePath = e.instancePath;
    if (e.keyword === "anyOf" || e.keyword === "oneOf") {
      const branches = at(schema, e.schemaPath);
      const names = Array.isArray(branches) ? branches.map(requiredOf) : [];
      const passing = (e.params as { passingSchemas?: number[] | null }).passingSchemas;
      const name = Array.isArray(passing) && passing.length > 1 ? names[passing[1]!] : names[0];
      if (name) instancePath += pointer(name);
    }
    out.push({ ...e, instancePath, message });
  }
  return out;
}
