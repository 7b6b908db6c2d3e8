/**
 * The OpenAPI 3.1 document, generated from the same declarations the gateway routes by and the
 * same JSON schemas ajv validates with: every exposed action, its required key operation, its
 * parameters, its answers, its errors and an example of each.
 */
import { STATUS_CODES } from "node:http";
import { KIND_NAMES } from "./upload";
import { API_PREFIX, type ApiActionSpec, type JsonSchema } from "./api";
import { ERROR_TYPES, type ErrorType } from "../errors";
import { problemTypeUri } from "./problem";
import { MESSAGE_KEYWORD } from "./schema-messages";

export { OPENAPI_TAGS, PROBLEM_MEANINGS, REQUEST_RULES, operationIdOf, problemTypesMarkdown, tagOf, type ApiTag } from "./openapi-text";
import { OPENAPI_TAGS, REQUEST_RULES, operationIdOf, problemTypesMarkdown, tagOf } from "./openapi-text";
import { sampleOf } from "./openapi-sample";
export { sampleOf };

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
    if (k === "$id" || k === "nullable" || k === MESSAGE_KEYWORD) continue;
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

/** A problem body as the gateway answers it for `status`: the first type of lib/errors.ts with that status. */
export function problemExample(status: number): Record<string, unknown> {
  const requestId = "6f1c2a9e-2b1d-4a53-9d1f-2f8e4c7a9b10";
  const preferred: Partial<Record<number, ErrorType>> = { 400: "VALIDATION_ERROR", 404: "NOT_FOUND" };
  const type = preferred[status] ?? (Object.keys(ERROR_TYPES) as ErrorType[]).find((t) => ERROR_TYPES[t].status === status);
  if (status === 500 || !type) {
    const title = STATUS_CODES[status] ?? "Error";
    return { type: "about:blank", title, status, detail: title, requestId };
  }
  const example: Record<string, unknown> = {
    type: problemTypeUri(type),
    title: ERROR_TYPES[type].title,
    status,
    detail: type === "VALIDATION_ERROR" ? "The request has invalid or missing fields." : ERROR_TYPES[type].title,
    requestId,
  };
  if (type === "VALIDATION_ERROR") example.errors = [{ path: "name", message: "must NOT have fewer than 1 characters" }];
  return example;
}

function problemResponse(status: number, keyed: boolean) {
  const headers: Record<string, unknown> = { ...COMMON_HEADERS, ...(keyed ? RATE_HEADERS : {}) };
  if (status === 429 || status === 503) headers["Retry-After"] = { $ref: "#/components/headers/Retry-After" };
  return {
    description: STATUS_CODES[status] ?? "Error",
    headers,
    content: {
      "application/problem+json": {
        schema: { $ref: "#/components/schemas/Problem" },
        example: problemExample(status),
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
  const problemResponses: Record<string, unknown> = {};
  const sorted = [...actions].sort((a, b) => a.rest.localeCompare(b.rest) || a.name.localeCompare(b.name));

  for (const action of sorted) {
    const { method, path, pathParams } = parseRest(action.rest);
    const keyed = action.operation != null;
    const tag = tagOf(action);
    tags.add(tag);
    const params = action.params;
    const props = (params?.properties ?? {}) as Record<string, JsonSchema>;
    const required = new Set((params?.required ?? []) as string[]);
    const inBody = BODY_METHODS.has(method) || action.jsonBody === true;

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
    for (const [name, header] of Object.entries(action.requestHeaders ?? {})) {
      const shown = name.toLowerCase().replace(/(^|-)([a-z])/g, (_, dash: string, c: string) => dash + c.toUpperCase());
      const { description, schema } = typeof header === "string" ? { description: header, schema: { type: "string" } } : header;
      parameters.push({ name: shown, in: "header", required: false, description, schema: toOas(schema, components) });
    }

    const op: Record<string, unknown> = {
      operationId: operationIdOf(action.name),
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
        // A body an empty object would not satisfy (a required field, or one of several) is itself required.
        required: required.size > 0 || Array.isArray(params.anyOf) || Array.isArray(params.oneOf),
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
    // An upload that trickles is ended (UPLOAD_MIN_BYTES per UPLOAD_MIN_WINDOW_MS).
    if (inBody && action.upload) errors.add(408);
    if (idempotent) [409, 422].forEach((s) => errors.add(s));
    // Any operation may meet an outage (no live node serves it, NATS or the database away): a 503
    // with Retry-After, answered at once (docs/operating.md "Outages").
    [500, 503].forEach((s) => errors.add(s));
    // A request line and headers over 256 KiB (a query of many long ids, say) are refused before routing.
    errors.add(431);
    // Shared answers under components.responses (one per status, with or without the rate-limit
    // headers), so that the document and the client generated from it say each problem once.
    for (const status of [...errors].sort()) {
      const name = `${keyed ? "" : "Public"}Problem${status}`;
      problemResponses[name] ??= problemResponse(status, keyed);
      responses[String(status)] = { $ref: `#/components/responses/${name}` };
    }

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
        "Creating POSTs accept `Idempotency-Key`. Rate limits are per key (token bucket) and announced in `RateLimit-*` headers.\n\n" +
        "Authenticate with your key in the `X-API-Key` header (the first key of an account comes from the operator's `npm run admin -- keys:create`). " +
        "Each operation's `operationId` is its service action's name with `_` for the dot (`contacts_createList`): stable, so clients generated from this document keep their method names.\n\n" +
        REQUEST_RULES +
        problemTypesMarkdown(),
      contact: { name: "Partner support", url: "https://example.com/support" },
      license: { name: "Proprietary", identifier: "LicenseRef-Proprietary" },
    },
    servers: [{ url: `${(opts.serverUrl ?? "").replace(/\/$/, "")}${API_PREFIX}` }],
    security: [{ ApiKey: [] }],
    // The fixed list, in its order; a tag outside it (a unit test forbids that) is still listed, last.
    tags: [
      ...OPENAPI_TAGS.map(({ name, displayName, description }) => ({ name, description, "x-displayName": displayName })),
      ...[...tags]
        .filter((t) => !OPENAPI_TAGS.some((k) => k.name === t))
        .sort()
        .map((name) => ({ name, description: `${name} operations` })),
    ],
    paths,
    components: {
      schemas: components,
      responses: Object.fromEntries(Object.entries(problemResponses).sort(([a], [b]) => a.localeCompare(b))),
      securitySchemes: { ApiKey: { type: "apiKey", in: "header", name: "X-API-Key", description: "An API key (`pgw_...`)." } },
      parameters: {
        "X-Request-Id": {
          name: "X-Request-Id",
          in: "header",
          required: false,
          // No example value: the reference's Test Request would send it with every request.
          description:
            "Your own request id (1-128 of `[A-Za-z0-9._:-]`, e.g. `order-4711`); kept when well-formed, otherwise replaced. Echoed on every answer.",
          schema: { type: "string", pattern: "^[A-Za-z0-9._:-]{1,128}$" },
        },
        // No example value either: one fixed key sent by every Test Request would replay (or refuse, 422) its first answer.
        "Idempotency-Key": {
          name: "Idempotency-Key",
          in: "header",
          required: false,
          description:
            "1-255 printable ASCII characters, space to `~` (a UUID made for the request, say); anything else is a 400. A repeat with the same key from the same account within 24 h answers the first answer again without acting twice; the same key with another body is a 422; a repeat while the first is still running is a 409.",
          schema: { type: "string", minLength: 1, maxLength: 255, pattern: "^[\\x20-\\x7E]{1,255}$" },
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
