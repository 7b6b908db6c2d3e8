/**
 * The OpenAPI 3.1 document, generated from the same declarations the gateway routes by and the
 * same JSON schemas ajv validates with: every exposed action, its required key operation, its
 * parameters, its answers, its errors and an example of each.
 */
import { STATUS_CODES } from "node:http";
import { KIND_NAMES } from "./upload";
import { API_PREFIX, type ApiActionSpec, type JsonSchema } from "./api";
import { ERROR_TYPES, type ErrorType } from "./errors";
import { problemTypeUri } from "./problem";
import { MESSAGE_KEYWORD } from "./schema-messages";

/**
 * The document's tags, in the order the reference shows them: one per group of operations a partner
 * looks for. An action names its tag with `apiAction({ tag })`; without one it takes its service's
 * name, which must then be in this list too (a unit test checks every action). A tag may have no
 * operation yet on a branch (the document still lists it, described).
 */
export const OPENAPI_TAGS = [
  {
    name: "keys",
    displayName: "API keys",
    description:
      "Create, find and delete the API keys of your account. A key carries operations (`SMS`, `CONTACTS`, ...) and can create keys only within its own.",
  },
  {
    name: "contacts",
    displayName: "Contacts",
    description: "Contacts (phone numbers in E.164, emails unique per account) and the custom fields they may carry.",
  },
  { name: "lists", displayName: "Contact lists", description: "Contact lists and their members: create, update, delete, add and remove contacts." },
  { name: "imports", displayName: "Contact imports", description: "Import contacts from CSV, XLSX or vCard files: upload answers 202 with an import to poll." },
  { name: "tracking", displayName: "Delivery status", description: "Poll the delivery status of the messages you sent, one at a time or up to 1000 at once." },
  { name: "history", displayName: "Message history", description: "Browse the messages you sent, newest first, with their status and text (cursor paging)." },
  {
    name: "webhooks",
    displayName: "Webhooks",
    description: [
      "The callback URL that receives `DELIVERY`, `READ` and `INBOUND` events, and the log of delivery attempts.",
      "",
      '**Signed webhooks (opt-in).** Without `signed`, callbacks carry no signature. Registered with `"signed": true`, every delivery carries the [Standard Webhooks](https://www.standardwebhooks.com/) headers `webhook-id` (the same on every attempt of one event: deduplicate on it), `webhook-timestamp` (Unix seconds of the attempt) and `webhook-signature` (`v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`; two, separated by a space, for 24 h after `POST /webhooks/delivery-status/secret` rotated the secret). The secret (`whsec_...`) is in the answer that made it, and never again. Verify on the raw body, with the `standardwebhooks` (or `svix`) library:',
      "",
      "```ts",
      'import { Webhook } from "standardwebhooks";',
      "",
      'const webhook = new Webhook(process.env.PGW_SIGNING_SECRET!); // "whsec_..."',
      "// Throws unless a signature matches and webhook-timestamp is within 5 minutes of now.",
      "const event = webhook.verify(rawBody, headers);",
      "```",
    ].join("\n"),
  },
  {
    name: "exports",
    displayName: "Exports",
    description: "Export contacts, delivery reports or message history to gzipped CSV files, downloaded through signed URLs.",
  },
  {
    name: "campaigns",
    displayName: "Campaigns",
    description: "Send a message to contact lists on SMS, RCS or WhatsApp: draft, preview, confirm, pause, resume, cancel, follow.",
  },
  {
    name: "inbox",
    displayName: "Inbox",
    description: "Conversations with the people who write to you on RCS and WhatsApp: read them, reply, archive, follow live events.",
  },
  { name: "media", displayName: "Media", description: "Images and videos uploaded once and named in campaign messages and inbox replies." },
  {
    name: "profiles",
    displayName: "Social profiles",
    description: "The social network accounts you connected, each with its access token (kept encrypted, never answered).",
  },
  { name: "meta", displayName: "About the API", description: "This document itself." },
] as const;

export type ApiTag = (typeof OPENAPI_TAGS)[number]["name"];

/** An exposed action's tag: its own, else its service's name (`contacts.create` -> `contacts`). */
export const tagOf = (action: { name: string; tag?: string }): string => action.tag ?? action.name.split(".")[0]!;

/**
 * An operation's `operationId`: its Moleculer action name with the dot as an underscore
 * (`contacts.createList` -> `contacts_createList`). Action names are unique in the cluster and do
 * not change when a path or a tag does, so neither do the ids clients are generated with.
 */
export const operationIdOf = (actionName: string): string => actionName.replace(/\./g, "_");

/** What each problem type means for the caller, beyond its title (a type missing here shows its title). */
export const PROBLEM_MEANINGS: Partial<Record<ErrorType, string>> = {
  BAD_REQUEST: "The request cannot be served as sent (a stray multipart field, a name given both in the query and the body, ...); `detail` says what.",
  VALIDATION_ERROR: "A parameter or body field breaks the operation's schema; `errors` lists each one by `path` with the rule it breaks.",
  MALFORMED_JSON: "The body is not valid JSON.",
  INVALID_HEADER: "A header such as `Idempotency-Key` or `Range` has a value outside its syntax.",
  UNAUTHORIZED: "The `X-API-Key` header is missing, unknown, malformed or deleted, or the key lacks the operation the endpoint requires.",
  KEY_SCOPE_EXCEEDED: "A key may create keys only with operations it holds itself.",
  DOWNLOAD_REFUSED: "The signed download URL has expired or its signature does not match: ask for the export again.",
  NOT_FOUND: "Nothing is there for your account (another account's ids are not found either).",
  ROUTE_NOT_FOUND: "No operation has this path.",
  KEY_NOT_FOUND: "No API key of your account has this id.",
  CONTACT_NOT_FOUND: "No contact of your account has this id.",
  CUSTOM_FIELD_NOT_FOUND: "No custom field of your account has this key.",
  LIST_NOT_FOUND: "No contact list of your account has this id, or the list is deleted.",
  ASSOCIATION_NOT_FOUND: "No list membership of your account has this id.",
  IMPORT_NOT_FOUND: "No import of your account has this id (finished imports are kept 30 days).",
  WEBHOOK_NOT_FOUND: "Your account has no webhook configured.",
  EXPORT_NOT_FOUND: "No export of your account has this id.",
  EXPORT_FILE_GONE: "The export's file is no longer kept; run the export again with `POST /exports/{exportId}`.",
  MEDIA_NOT_FOUND: "No media of your account has this id.",
  MEDIA_FILE_GONE: "The media's file cannot be found on the node that holds it.",
  PROFILE_NOT_FOUND: "No social profile of your account has this id.",
  CAMPAIGN_NOT_FOUND: "No campaign of your account has this id.",
  OPT_OUT_NOT_FOUND: "The number is not opted out of this channel in your account.",
  METHOD_NOT_ALLOWED: "The path exists but not with this method; the `Allow` header lists the ones it has.",
  UPLOAD_TOO_SLOW:
    "The upload sent too little for too long (less than 16 KiB in some 30 s, unless the operator set otherwise) and was ended: send the file at a steady pace.",
  IDEMPOTENCY_IN_PROGRESS: "A request with the same `Idempotency-Key` is still running: retry once it has answered.",
  CONTACT_EXISTS: "Another contact of your account has this phone number or email; `existingId` names it.",
  CUSTOM_FIELD_EXISTS: "Your account already declares a custom field with this key.",
  WEBHOOK_EXISTS: "Your account already has a webhook: change it with `PUT` instead.",
  WEBHOOK_NOT_SIGNED: "Your webhook does not sign its deliveries, so it has no secret to rotate: turn signing on with `PUT` and `signed: true`.",
  EXPORT_NOT_READY: "The export has not finished (or has failed): poll it until `COMPLETED`.",
  CONCURRENT_CHANGE: "Another request changed the same data meanwhile: read it again and retry.",
  KEY_LIMIT_REACHED: "Your account holds as many live keys as it may: delete one first.",
  MEDIA_IN_USE: "A campaign or reply that is not final refers to the media; `referencedBy` names them.",
  PROFILE_EXISTS: "Your account already has a profile with this network and `externalId`; `existingId` names it.",
  CAMPAIGN_STATE_CONFLICT: "The campaign's current status does not allow this change (a sent campaign cannot be edited, say).",
  RECIPIENT_OPTED_OUT:
    "The number opted out of this channel (it wrote STOP, its carrier reported it, or your account opted it out): nothing was sent. It can be messaged again once it opts in (START) or you remove the opt-out (`DELETE /contacts/opt-outs/{channel}/{phoneNumber}`).",
  PAYLOAD_TOO_LARGE: "The body or file is larger than the operation accepts (JSON 1 MiB; files per operation).",
  UNSUPPORTED_MEDIA_TYPE: "The `Content-Type`, or the file's kind judged by its content, is not one the operation takes.",
  RANGE_NOT_SATISFIABLE: "The `Range` starts past the end of the file; `Content-Range` gives its size.",
  IDEMPOTENCY_KEY_REUSED: "The `Idempotency-Key` was used within 24 h with another body: use a new key for a new request.",
  RATE_LIMITED: "The key (or your address) sent more than its rate: wait the `Retry-After` seconds.",
  UPLOAD_SHARE_EXCEEDED:
    "Your uploads in progress on this gateway (or imports waiting on this service) hold your account's share of its room: retry after `Retry-After` seconds, once some have ended.",
  INTERNAL_ERROR: "Something failed on our side; the `requestId` lets support find it. Its `type` is `about:blank`.",
  PROFILE_TOKEN_UNREADABLE: "A stored access token cannot be decrypted with the configured keys; set a new one with `PUT /social-profiles/{id}/token`.",
  UPSTREAM_ERROR: "The messaging network behind us refused or failed the request; retry later.",
  SERVICE_UNAVAILABLE: "A part of the service is starting or away; retry after a moment (`Retry-After` when given).",
};

/**
 * What the gateway checks of every request besides its operation's schemas (each a 400 problem):
 * said once, here, since no one schema can say it.
 */
export const REQUEST_RULES = [
  "## What every request is checked for",
  "",
  "Besides what each operation's schemas say (patterns, formats, `anyOf`/`oneOf`, ranges and lengths are all checked as written), every request is refused with a 400 problem when:",
  "",
  "- a query parameter is not one the operation declares, including one with an empty name (`?=x`), or the operation declares none;",
  "- a name is given in more than one place (the query, the body, the path), or a secret field (`writeOnly`, an access token) is sent in the query string;",
  "- the JSON body is not an object, is nested more than 32 levels deep, or any text or field name in the request holds NUL or an unpaired UTF-16 surrogate;",
  "- `from` or `to` (history, statistics, exports) lies outside 1970-9999, or `from` is not before `to` (equal is refused).",
  "",
  "A request line and headers over 256 KiB are a 431 problem (send bulk ids in a JSON body where the operation takes one; its X-Request-Id is always a fresh one, since the request's own headers are not read); a JSON body over 1 MiB is a 413.",
  "",
  "",
].join("\n");

/** The document's "Problem types" section: every type of lib/errors.ts with its status and meaning. */
export function problemTypesMarkdown(): string {
  const rows = (Object.entries(ERROR_TYPES) as Array<[ErrorType, { status: number; title: string }]>).map(([type, { status, title }]) => {
    const meaning = PROBLEM_MEANINGS[type];
    return `| \`${problemTypeUri(type).replace(/^\/docs#/, "")}\` | ${status} | **${title}**${meaning ? `. ${meaning.replace(/\|/g, "\\|")}` : ""} |`;
  });
  return [
    "## Problem types",
    "",
    "Every error is an RFC 9457 problem (`application/problem+json`): `type`, `title`, `status`, `detail` (what happened this time), `requestId` (equal to the `X-Request-Id` header: quote it to support) and, for validation errors, `errors: [{ path, message }]`. " +
      "`type` is `/docs#` followed by one of the names below (`/docs#problem-key-scope-exceeded`), or `about:blank` for a 500. Match on `type`, never on `title` or `detail`.",
    "",
    "| type | status | meaning |",
    "|---|---|---|",
    ...rows,
  ].join("\n");
}

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
    // with Retry-After, answered at once (README "Outages").
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
