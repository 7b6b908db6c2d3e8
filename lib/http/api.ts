/**
 * What every exposed action declares besides its handler: where it lives in the REST API, which key
 * operation it requires, its documented answers. The gateway, the OpenAPI document and the tests
 * all read these same declarations.
 */
import type { ApiTag } from "./openapi";
import type { UploadRef } from "./remote-file";
import type { UploadSpec } from "./upload";

export const OPERATIONS = [
  "SMS",
  "RCS",
  "WHATSAPP",
  "AUTHENTICATION",
  "CONTACTS",
  "CAMPAIGNS",
  "EXPORTS",
  "INBOX",
  "MEDIA",
  "SOCIAL_PROFILES",
  "WEBHOOKS",
] as const;
export type Operation = (typeof OPERATIONS)[number];

export const TRAFFIC_TYPES = ["TRANSACTIONAL", "MARKETING"] as const;
export type TrafficType = (typeof TRAFFIC_TYPES)[number];

export const API_PREFIX = "/api/partner-gateway/v1";

/** A JSON schema as written in *.schemas.ts (ajv draft-07 with `nullable`). */
export type JsonSchema = Record<string, unknown>;

export interface ApiActionSpec {
  /** "METHOD /path/{with}/:params" relative to the API prefix. */
  rest?: string;
  /**
   * The key operation required; `null` means no key is needed (public). `"CHANNEL"`: one of the
   * key's channel operations (SMS, RCS, WHATSAPP), and the one named by the `channel` query
   * parameter when it names one.
   */
  operation?: Operation | null | "CHANNEL";
  /** One line for the OpenAPI operation summary. */
  summary?: string;
  description?: string;
  /** OpenAPI tag, one of OPENAPI_TAGS (lib/http/openapi.ts); defaults to the service name. */
  tag?: ApiTag;
  /** Success responses by status; `null` means no body. */
  responses?: Record<number, JsonSchema | null>;
  /** Documented error statuses besides the ones every keyed operation has (401, 429, 500). */
  errors?: number[];
  /** Milliseconds the gateway waits for this action (Moleculer's own action `timeout`); default REQUEST_TIMEOUT_MS. */
  timeout?: number;
  /**
   * The params are documented as a JSON body although the method is DELETE: a bulk body (thousands
   * of ids) too large for a URL. The gateway reads a JSON body on any method but GET and HEAD; query
   * parameters stay accepted, undocumented, for callers that sent them before.
   */
  jsonBody?: boolean;
  /** POST that creates something: honours Idempotency-Key (default: true for POST). */
  idempotent?: boolean;
  /**
   * The action takes a multipart/form-data upload: the gateway receives the file (limits, kind by
   * content), passes the other fields as params, the file's description as `params[field]` and keeps
   * its bytes for the call, which reads them with `uploadedBytes(ctx)` (lib/http/remote-file.ts).
   */
  upload?: UploadSpec;
  /**
   * Request headers the action reads, by lower-case name with a line for the OpenAPI document (and
   * the schema of the values the action accepts, where it checks them): the gateway hands them over in `ctx.meta.$requestHeaders` (a conditional or partial GET, say).
   */
  requestHeaders?: Record<string, string | { description: string; schema: JsonSchema }>;
  /**
   * The action opens a Server-Sent Events stream: it checks the request and answers where the
   * stream starts (`{ $eventStream }`); the gateway then holds the stream (gateway.live.ts).
   */
  eventStream?: boolean;
}

/** The caller, as the gateway established it from the key; every service reads the account here. */
export interface AuthMeta {
  companyId: string;
  userId: string | null;
  username: string | null;
  keyId: string;
  keyCreatedAt: string;
  /** The key that created the calling key; set by the gateway (absent on a call made by hand, from the REPL say). */
  keyCreatedByKeyId?: string | null;
  operations: Operation[];
  trafficType: TrafficType;
  $statusCode?: number;
  $responseHeaders?: Record<string, string>;
  /** The request headers an action declares in `requestHeaders` (lower-case names, each at most 1024 characters). */
  $requestHeaders?: Record<string, string>;
  /** An upload's bytes, held by the gateway that received them: read them with uploadedBytes(ctx) of lib/http/remote-file.ts. */
  $upload?: UploadRef;
}

/**
 * An exposed action: Moleculer's ActionSchema plus the REST declarations above. (moleculer's
 * package `exports` hide src/service.d.ts, so ActionSchema cannot be augmented in place; this
 * helper types the same thing.)
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type ApiAction = import("moleculer").ActionSchema<any> & ApiActionSpec;
export const apiAction = (action: ApiAction): ApiAction => ({
  ...action,
  // Each action gets its own copy of its schemas, with no object shared between two places:
  // Moleculer's INFO packet drops any object it meets a second time (its circular-reference guard
  // treats repeats as cycles), so a shared sub-schema would reach other nodes missing.
  ...(action.params ? { params: JSON.parse(JSON.stringify(action.params)) } : {}),
  ...(action.responses ? { responses: JSON.parse(JSON.stringify(action.responses)) } : {}),
});

/** A service's settings: `rest: "/"` makes its action paths absolute under the API prefix. */
export interface ApiServiceSettings {
  rest?: string | string[];
  [key: string]: unknown;
}
