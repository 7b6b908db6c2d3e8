/**
 * The error catalogue. Services throw these classes; they cross nodes as plain objects with
 * `code` (an HTTP status) and `type` (SCREAMING_SNAKE), so the gateway maps by those, never by class.
 */
import { Errors } from "moleculer";

/** Every type a client may see, with its HTTP status and a short title for the problem body. */
export const ERROR_TYPES = {
  BAD_REQUEST: { status: 400, title: "Bad Request" },
  VALIDATION_ERROR: { status: 400, title: "Validation failed" },
  MALFORMED_JSON: { status: 400, title: "Malformed JSON body" },
  INVALID_HEADER: { status: 400, title: "Invalid header value" },
  UNAUTHORIZED: { status: 401, title: "Unauthorized" },
  KEY_SCOPE_EXCEEDED: { status: 403, title: "Requested operations exceed the calling key" },
  DOWNLOAD_REFUSED: { status: 403, title: "The download URL is expired or not valid" },
  NOT_FOUND: { status: 404, title: "Not Found" },
  ROUTE_NOT_FOUND: { status: 404, title: "Not Found" },
  KEY_NOT_FOUND: { status: 404, title: "API key not found" },
  CONTACT_NOT_FOUND: { status: 404, title: "Contact not found" },
  CUSTOM_FIELD_NOT_FOUND: { status: 404, title: "Custom field not found" },
  LIST_NOT_FOUND: { status: 404, title: "Contact list not found" },
  ASSOCIATION_NOT_FOUND: { status: 404, title: "Association not found" },
  IMPORT_NOT_FOUND: { status: 404, title: "Contact import not found" },
  WEBHOOK_NOT_FOUND: { status: 404, title: "No webhook is configured" },
  EXPORT_NOT_FOUND: { status: 404, title: "Export not found" },
  EXPORT_FILE_GONE: { status: 404, title: "The export file is no longer available" },
  MEDIA_NOT_FOUND: { status: 404, title: "Media not found" },
  MEDIA_FILE_GONE: { status: 404, title: "The media file is not reachable" },
  PROFILE_NOT_FOUND: { status: 404, title: "Social profile not found" },
  CAMPAIGN_NOT_FOUND: { status: 404, title: "Campaign not found" },
  CONVERSATION_NOT_FOUND: { status: 404, title: "Conversation not found" },
  OPT_OUT_NOT_FOUND: { status: 404, title: "Opt-out not found" },
  METHOD_NOT_ALLOWED: { status: 405, title: "Method Not Allowed" },
  UPLOAD_TOO_SLOW: { status: 408, title: "The upload sent too little for too long" },
  IDEMPOTENCY_IN_PROGRESS: { status: 409, title: "A request with this Idempotency-Key is still running" },
  CONTACT_EXISTS: { status: 409, title: "A contact with this phone number or email exists" },
  CUSTOM_FIELD_EXISTS: { status: 409, title: "A custom field with this key exists" },
  WEBHOOK_EXISTS: { status: 409, title: "A webhook is already configured" },
  WEBHOOK_NOT_SIGNED: { status: 409, title: "The webhook does not sign its deliveries" },
  EXPORT_NOT_READY: { status: 409, title: "The export is not available for download" },
  CONCURRENT_CHANGE: { status: 409, title: "The data changed while the request ran" },
  KEY_LIMIT_REACHED: { status: 409, title: "The account holds as many API keys as it may" },
  MEDIA_IN_USE: { status: 409, title: "The media is in use" },
  PROFILE_EXISTS: { status: 409, title: "A social profile with this network and externalId exists" },
  CAMPAIGN_STATE_CONFLICT: { status: 409, title: "The campaign's status does not allow this" },
  RECIPIENT_OPTED_OUT: { status: 409, title: "The recipient opted out of this channel" },
  PAYLOAD_TOO_LARGE: { status: 413, title: "Payload Too Large" },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, title: "Unsupported Media Type" },
  RANGE_NOT_SATISFIABLE: { status: 416, title: "Range Not Satisfiable" },
  IDEMPOTENCY_KEY_REUSED: { status: 422, title: "Idempotency-Key reused with a different request" },
  RATE_LIMITED: { status: 429, title: "Too Many Requests" },
  STREAM_LIMIT_REACHED: { status: 429, title: "The account holds as many open event streams as it may" },
  UPLOAD_SHARE_EXCEEDED: { status: 429, title: "The account's uploads in progress hold as much room as they may" },
  INTERNAL_ERROR: { status: 500, title: "Internal Server Error" },
  PROFILE_TOKEN_UNREADABLE: { status: 500, title: "A social profile's access token cannot be read" },
  UPSTREAM_ERROR: { status: 502, title: "Bad Gateway" },
  SERVICE_UNAVAILABLE: { status: 503, title: "Service Unavailable" },
} as const;

export type ErrorType = keyof typeof ERROR_TYPES;

export interface FieldError {
  path: string;
  message: string;
}

/** Extra members a problem body may carry besides the standard ones. */
export interface ProblemData {
  errors?: FieldError[];
  [extension: string]: unknown;
}

/** A client mistake or a documented failure: its message becomes the problem `detail`. */
export class ApiError extends Errors.MoleculerClientError {
  constructor(type: ErrorType, detail: string, data?: ProblemData) {
    super(detail, ERROR_TYPES[type].status, type, data);
    this.name = "ApiError";
  }
}

/** Seconds a 503 tells its client to wait (Retry-After) when a dependency is down: a few reconnect attempts. */
export const UNAVAILABLE_RETRY_AFTER_S = 5;

/** Sequelize's errors for a connection that could not be made or was lost. */
const DB_CONNECTION_ERRORS = new Set([
  "SequelizeConnectionError",
  "SequelizeConnectionRefusedError",
  "SequelizeConnectionTimedOutError",
  "SequelizeConnectionAcquireTimeoutError",
  "SequelizeHostNotFoundError",
  "SequelizeHostNotReachableError",
]);
/** Socket errors of a database connection (pg passes them on as they are). */
const SOCKET_CODES = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "ENOTFOUND", "EHOSTUNREACH", "ENETUNREACH", "EAI_AGAIN"]);
/**
 * SQLSTATEs of a server that is going away or not taking sessions: class 08 (connection exception),
 * 57P01-57P03 (admin or crash shutdown, starting up), 53300 (too many connections).
 */
const UNAVAILABLE_SQLSTATE = /^(08...|57P0[123]|53300)$/;
/** What pg says of a connection that ended under a query (it has no code). */
const LOST_CONNECTION = /Connection terminated|not queryable|Connection ended|timeout exceeded when trying to connect|Connection timed out/i;

/**
 * The database did not answer because it cannot be reached (stopped, restarting, the link cut), as
 * opposed to refusing a statement: Sequelize's connection errors, pg's socket errors and lost
 * connections, PostgreSQL's shutdown codes. Looks through `original`/`parent`/`cause`, and reads
 * a remote error's plain `name` too.
 */
export function isDatabaseUnavailable(err: unknown, depth = 0): boolean {
  if (!err || typeof err !== "object" || depth > 3) return false;
  const e = err as { name?: unknown; code?: unknown; message?: unknown; original?: unknown; parent?: unknown; cause?: unknown };
  if (typeof e.name === "string" && DB_CONNECTION_ERRORS.has(e.name)) return true;
  if (typeof e.code === "string" && (SOCKET_CODES.has(e.code) || UNAVAILABLE_SQLSTATE.test(e.code))) return true;
  if (typeof e.message === "string" && LOST_CONNECTION.test(e.message) && (depth > 0 || String(e.name).startsWith("Sequelize") || e.name === "Error"))
    return true;
  return [e.original, e.parent, e.cause].some((inner) => inner !== err && isDatabaseUnavailable(inner, depth + 1));
}

/** The 503 a service answers while its database cannot be reached (crosses nodes as code and type). */
export function databaseUnavailable(): ApiError {
  return new ApiError("SERVICE_UNAVAILABLE", "The database is not reachable right now; try again shortly.", { retryAfter: UNAVAILABLE_RETRY_AFTER_S });
}

/**
 * A statement stopped by its time limit (SQLSTATE 57014, query_canceled: `statement_timeout`, a
 * heavy read's class limit or the call's time left): the server's limit, not the client's mistake.
 * Looks through `original`/`parent` as isDatabaseUnavailable does.
 */
export function isStatementTimedOut(err: unknown): boolean {
  const e = err as { code?: unknown; original?: { code?: unknown }; parent?: { code?: unknown } } | null | undefined;
  return [e?.code, e?.original?.code, e?.parent?.code].includes("57014");
}

/** The 503 of a statement its time limit stopped (crosses nodes as code and type). */
export function statementTimedOut(): ApiError {
  return new ApiError("SERVICE_UNAVAILABLE", "The request took longer than its time limit on the database and was stopped; try again shortly.", {
    retryAfter: UNAVAILABLE_RETRY_AFTER_S,
  });
}

export const badRequest = (detail: string, errors?: FieldError[]) => new ApiError("VALIDATION_ERROR", detail, errors ? { errors } : undefined);
export const unauthorized = (detail: string) => new ApiError("UNAUTHORIZED", detail);
export const notFound = (type: ErrorType, detail: string) => new ApiError(type, detail);
