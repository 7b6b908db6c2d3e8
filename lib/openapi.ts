/**
 * The OpenAPI 3.1 document, generated from the same declarations the gateway routes by and the
 * same JSON schemas ajv validates with: every exposed action, its required key operation, its
 * parameters, its answers, its errors and an example of each.
 */
import { STATUS_CODES } from "node:http";
import { KIND_NAMES } from "./upload";
import { API_PREFIX, type ApiActionSpec, type JsonSchema } from "./api";
import { ERROR_TYPES } from "./errors";
import { problemTypeUri } from "./problem";

export interface ExposedAction extends ApiActionSpec {
  /** Full action name, e.g. `auth.create`. */
  name: string;
  rest: string;
  params?: JsonSchema;
}

export interface ParsedRest {
  method: string;
  /** Path in OpenAPI form: `/authentication/{id}`. */
  path: string;
  pathParams: string[];
}

/** "DELETE /authentication/:id" -> { method: "delete", path: "/authentication/{id}", pathParams: ["id"] } */
export function parseRest(rest: string): ParsedRest {
  const [method, raw] = rest.trim().split(/\s+/);
  const pathParams: string[] = [];
  const path = raw!.replace(/[:{]([A-Za-z0-9_]+)}?/g, (_, name: string) => {
    pathParams.push(name);
    return `{${name}}`;
  });
  return { method: method!.toLowerCase(), path, pathParams };
}

export const BODY_METHODS = new Set(["post", "put", "patch"]);

type Components = Record<string, JsonSchema>;

/** Converts one of our schemas to OpenAPI 3.1 (JSON Schema 2020-12): `$id`s become components. */
export function toOas(schema: unknown, components: Components): unknown {
  if (Array.isArray(schema)) return schema.map((s) => toOas(s, components));
  if (!schema || typeof schema !== "object") return schema;
  const src = schema as JsonSchema;
  const out: JsonSchema = {};
  for (const [k, v] of Object.entries(src)) {
    if (k === "$id" || k === "nullable") continue;
    if (k === "properties" || k === "patternProperties" || k === "$defs") {
      out[k] = Object.fromEntries(Object.entries(v as JsonSchema).map(([pk, pv]) => [pk, toOas(pv, components)]));
    } else if (typeof v === "object" && v !== null && !(k === "enum" || k === "examples" || k === "required" || k === "const" || k === "default")) {
      out[k] = toOas(v, components);
    } else out[k] = v;
  }
  if (src.nullable === true) {
    if (typeof out.type === "string") out.type = [out.type, "null"];
    else if (Array.isArray(out.type) && !out.type.includes("null")) out.type = [...out.type, "null"];
    if (Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...out.enum, null];
  }
  if (typeof src.$id === "string") {
    components[src.$id] ??= out;
    return { $ref: `#/components/schemas/${src.$id}` };
  }
  return out;
}

/** A value that satisfies `schema`: its first example, else one built from its type and format. */
export function sampleOf(schema: unknown, components: Components = {}, depth = 0): unknown {
  if (!schema || typeof schema !== "object" || depth > 8) return null;
  const s = schema as JsonSchema;
  if (typeof s.$ref === "string") return sampleOf(components[s.$ref.split("/").pop()!], components, depth + 1);
  if (Array.isArray(s.examples) && s.examples.length) return s.examples[0];
  if ("const" in s) return s.const;
  if (Array.isArray(s.enum)) return s.enum.find((v) => v !== null) ?? null;
  if (Array.isArray(s.oneOf)) return sampleOf(s.oneOf[0], components, depth + 1);
  if (Array.isArray(s.anyOf)) return sampleOf(s.anyOf[0], components, depth + 1);
  const types = Array.isArray(s.type) ? (s.type as string[]) : [s.type as string];
  const type = types.find((t) => t !== "null") ?? types[0];
  switch (type) {
    case "object": {
      const props = (s.properties ?? {}) as Record<string, unknown>;
      return Object.fromEntries(Object.entries(props).map(([k, v]) => [k, sampleOf(v, components, depth + 1)]));
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

const PROBLEM_SCHEMA: JsonSchema = {
  type: "object",
  description: "RFC 9457 problem details. `requestId` equals the X-Request-Id header.",
  required: ["type", "title", "status", "detail", "requestId"],
  properties: {
    type: { type: "string", description: "URI reference naming the problem type", examples: [problemTypeUri("VALIDATION_ERROR")] },
    title: { type: "string", examples: [ERROR_TYPES.VALIDATION_ERROR.title] },
    status: { type: "integer", minimum: 400, maximum: 599, examples: [400] },
    detail: { type: "string", examples: ["The request has invalid or missing fields."] },
    requestId: { type: "string", examples: ["6f1c2a9e-2b1d-4a53-9d1f-2f8e4c7a9b10"] },
    errors: {
      type: "array",
      items: {
        type: "object",
        required: ["path", "message"],
        properties: { path: { type: "string", examples: ["operations[0]"] }, message: { type: "string", examples: ["must be one of SMS, RCS"] } },
      },
    },
  },
};

const COMMON_HEADERS = {
  "X-Request-Id": { $ref: "#/components/headers/X-Request-Id" },
};
const RATE_HEADERS = {
  "RateLimit-Limit": { $ref: "#/components/headers/RateLimit-Limit" },
  "RateLimit-Remaining": { $ref: "#/components/headers/RateLimit-Remaining" },
  "RateLimit-Reset": { $ref: "#/components/headers/RateLimit-Reset" },
};

function problemResponse(status: number, keyed: boolean) {
  const headers: Record<string, unknown> = { ...COMMON_HEADERS, ...(keyed ? RATE_HEADERS : {}) };
  if (status === 429) headers["Retry-After"] = { $ref: "#/components/headers/Retry-After" };
  return {
    description: STATUS_CODES[status] ?? "Error",
    headers,
    content: {
      "application/problem+json": {
        schema: { $ref: "#/components/schemas/Problem" },
        example: {
          type: status >= 500 ? "about:blank" : problemTypeUri(status === 400 ? "VALIDATION_ERROR" : status === 401 ? "UNAUTHORIZED" : "NOT_FOUND"),
          title: STATUS_CODES[status],
          status,
          detail: STATUS_CODES[status],
          requestId: "6f1c2a9e-2b1d-4a53-9d1f-2f8e4c7a9b10",
        },
      },
    },
  };
}

export interface OpenApiOptions {
  serverUrl?: string;
  version?: string;
}

/** Builds the whole document from the exposed actions (sorted, so the output is stable). */
export function buildOpenApi(actions: ExposedAction[], opts: OpenApiOptions = {}): Record<string, unknown> {
  const components: Components = { Problem: PROBLEM_SCHEMA };
  const paths: Record<string, Record<string, unknown>> = {};
  const tags = new Set<string>();
  const sorted = [...actions].sort((a, b) => a.rest.localeCompare(b.rest) || a.name.localeCompare(b.name));

  for (const action of sorted) {
    const { method, path, pathParams } = parseRest(action.rest);
    const keyed = action.operation != null;
    const tag = action.tag ?? action.name.split(".")[0]!;
    tags.add(tag);
    const params = action.params;
    const props = (params?.properties ?? {}) as Record<string, JsonSchema>;
    const required = new Set((params?.required ?? []) as string[]);
    const inBody = BODY_METHODS.has(method);

    const parameters: unknown[] = [{ $ref: "#/components/parameters/X-Request-Id" }];
    for (const name of pathParams) {
      parameters.push({ name, in: "path", required: true, schema: toOas(props[name] ?? { type: "string" }, components) });
    }
    if (!inBody) {
      for (const [name, prop] of Object.entries(props)) {
        if (pathParams.includes(name)) continue;
        const p: Record<string, unknown> = { name, in: "query", required: required.has(name), schema: toOas(prop, components) };
        if (typeof prop.description === "string") p.description = prop.description;
        if (prop.type === "array") Object.assign(p, { style: "form", explode: false });
        parameters.push(p);
      }
    }
    const idempotent = method === "post" && action.idempotent !== false;
    if (idempotent) parameters.push({ $ref: "#/components/parameters/Idempotency-Key" });
    for (const [name, description] of Object.entries(action.requestHeaders ?? {})) {
      const shown = name.toLowerCase().replace(/(^|-)([a-z])/g, (_, dash: string, c: string) => dash + c.toUpperCase());
      parameters.push({ name: shown, in: "header", required: false, description, schema: { type: "string" } });
    }

    const op: Record<string, unknown> = {
      operationId: action.name.replace(/\./g, "_"),
      tags: [tag],
      summary: action.summary ?? action.name,
      description:
        (action.description ? `${action.description}\n\n` : "") +
        (!keyed
          ? "Needs no API key."
          : action.operation === "CHANNEL"
            ? "Requires an API key with a channel operation (`SMS`, `RCS` or `WHATSAPP`): the one named by `channel`."
            : `Requires an API key with the \`${action.operation}\` operation.`),
      // Left out (and so caught by the tests) when an action forgets to declare it.
      "x-required-operation": action.operation,
      parameters,
      security: keyed ? [{ ApiKey: [] }] : [],
      responses: {} as Record<string, unknown>,
    };

    if (inBody && params && action.upload) {
      // Multipart: the file part, and the other params as text fields.
      const { field, maxBytes, accept, description, kindMaxBytes } = action.upload;
      const own = Object.entries(kindMaxBytes ?? {}).map(([k, n]) => `${KIND_NAMES[k as keyof typeof KIND_NAMES]} ${Math.round((n as number) / 1048576)} MiB`);
      const fields = Object.fromEntries(
        Object.entries(props)
          .filter(([k]) => k !== field && !pathParams.includes(k))
          .map(([k, v]) => [k, toOas(v, components)]),
      );
      op.requestBody = {
        required: true,
        content: {
          "multipart/form-data": {
            schema: {
              type: "object",
              required: [field, ...[...required].filter((r) => r !== field && !pathParams.includes(r))],
              properties: {
                [field]: {
                  type: "string",
                  format: "binary",
                  description: `${description ?? "The file"}: ${accept.map((k) => KIND_NAMES[k]).join(" or ")} (judged by content), at most ${own.length ? own.join(", ") : `${Math.round(maxBytes / 1048576)} MiB`}.`,
                },
                ...fields,
              },
            },
          },
        },
      };
    } else if (inBody && params) {
      let bodySchema: unknown;
      if (pathParams.some((p) => p in props)) {
        const rest: JsonSchema = { ...params, properties: Object.fromEntries(Object.entries(props).filter(([k]) => !pathParams.includes(k))) };
        rest.required = [...required].filter((r) => !pathParams.includes(r));
        rest.$id = `${String(params.$id ?? action.name)}Body`;
        bodySchema = toOas(rest, components);
      } else bodySchema = toOas(params, components);
      op.requestBody = {
        required: required.size > 0,
        content: { "application/json": { schema: bodySchema, example: sampleOf(bodySchema, components) } },
      };
    }

    const responses = op.responses as Record<string, unknown>;
    for (const [status, schema] of Object.entries(action.responses ?? { 200: null })) {
      const headers: Record<string, unknown> = { ...COMMON_HEADERS, ...(keyed ? RATE_HEADERS : {}) };
      if (schema == null) {
        responses[status] = { description: STATUS_CODES[Number(status)] ?? "Success", headers };
      } else {
        const s = toOas(schema, components) as JsonSchema;
        // A file (format binary) goes out as its own media type, or as one of several (`contentTypes`: an image or a video).
        const binary = schema.format === "binary";
        const type =
          (schema.contentType as string | undefined) ??
          (binary ? ((schema.contentMediaType as string | undefined) ?? "application/octet-stream") : "application/json");
        const types = (schema.contentTypes as string[] | undefined) ?? null;
        delete s.contentTypes;
        responses[status] = {
          description: STATUS_CODES[Number(status)] ?? "Success",
          headers,
          content: types
            ? Object.fromEntries(types.map((t) => [t, { schema: s, example: sampleOf(s, components) }]))
            : { [type]: { schema: s, example: sampleOf(s, components) } },
        };
      }
    }
    const errors = new Set<number>(action.errors ?? []);
    if (params) errors.add(400);
    if (keyed) [401, 429].forEach((s) => errors.add(s));
    if (inBody) [413, 415].forEach((s) => errors.add(s));
    if (idempotent) [409, 422].forEach((s) => errors.add(s));
    errors.add(500);
    for (const status of [...errors].sort()) responses[String(status)] = problemResponse(status, keyed);

    paths[path] ??= {};
    paths[path]![method] = op;
  }

  return {
    openapi: "3.1.0",
    info: {
      title: "Partner Messaging Platform API",
      version: opts.version ?? "1.0.0",
      description:
        "Track SMS, RCS and WhatsApp delivery, manage contacts and lists, run campaigns, browse and export history, answer the inbox, upload media, connect social profiles and manage API keys.\n\n" +
        "Every error is an RFC 9457 problem (`application/problem+json`) whose `requestId` equals the `X-Request-Id` header. " +
        "Creating POSTs accept `Idempotency-Key`. Rate limits are per key (token bucket) and announced in `RateLimit-*` headers.",
      contact: { name: "Partner support", url: "https://example.com/support" },
      license: { name: "Proprietary", identifier: "LicenseRef-Proprietary" },
    },
    servers: [{ url: `${(opts.serverUrl ?? "").replace(/\/$/, "")}${API_PREFIX}` }],
    security: [{ ApiKey: [] }],
    tags: [...tags].sort().map((name) => ({ name, description: `${name} operations` })),
    paths,
    components: {
      schemas: components,
      securitySchemes: { ApiKey: { type: "apiKey", in: "header", name: "X-API-Key", description: "An API key (`pgw_...`)." } },
      parameters: {
        "X-Request-Id": {
          name: "X-Request-Id",
          in: "header",
          required: false,
          description: "Your own request id (1-128 of `[A-Za-z0-9._:-]`); kept when well-formed, otherwise replaced. Echoed on every answer.",
          schema: { type: "string", pattern: "^[A-Za-z0-9._:-]{1,128}$", examples: ["order-4711"] },
        },
        "Idempotency-Key": {
          name: "Idempotency-Key",
          in: "header",
          required: false,
          description:
            "1-255 printable characters. A repeat with the same key from the same account within 24 h answers the first answer again without acting twice; the same key with another body is a 422; a repeat while the first is still running is a 409.",
          schema: { type: "string", minLength: 1, maxLength: 255, examples: ["a4d1c2e0-create-key"] },
        },
      },
      headers: {
        "X-Request-Id": { description: "The id of this request.", schema: { type: "string" } },
        "RateLimit-Limit": { description: "Requests the key may make in a burst.", schema: { type: "integer" } },
        "RateLimit-Remaining": { description: "Requests left in the current burst.", schema: { type: "integer" } },
        "RateLimit-Reset": { description: "Seconds until the burst is fully available again.", schema: { type: "integer" } },
        "Retry-After": { description: "Seconds to wait before retrying.", schema: { type: "integer" } },
      },
    },
  };
}
