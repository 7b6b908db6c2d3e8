/**
 * Wire error -> RFC 9457 problem body. The one place that decides what a client sees of an error:
 * documented types keep their detail, everything else is reduced to its HTTP status, and a 5xx says
 * only "Internal Server Error" (the stack goes to the log, never to the client).
 */
import { STATUS_CODES } from "node:http";
import { MAX_FIELD_ERRORS } from "./validator";
import { ERROR_TYPES, isDatabaseUnavailable, UNAVAILABLE_RETRY_AFTER_S, type ErrorType, type FieldError } from "../errors";

export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  requestId: string;
  errors?: FieldError[];
  [extension: string]: unknown;
}

/** The `type` URI of a catalogue entry: a stable anchor in the API documentation. */
export const problemTypeUri = (type: ErrorType) => `/docs#problem-${type.toLowerCase().replace(/_/g, "-")}`;

interface WireError {
  code?: unknown;
  status?: unknown;
  statusCode?: unknown;
  type?: unknown;
  message?: unknown;
  data?: unknown;
}

/** body-parser and raw-body errors carry a string `type` of their own. */
const BODY_ERRORS: Record<string, ErrorType> = {
  "entity.parse.failed": "MALFORMED_JSON",
  "entity.too.large": "PAYLOAD_TOO_LARGE",
  "encoding.unsupported": "UNSUPPORTED_MEDIA_TYPE",
  "charset.unsupported": "UNSUPPORTED_MEDIA_TYPE",
  "request.aborted": "BAD_REQUEST",
  "request.size.invalid": "BAD_REQUEST",
  "stream.encoding.set": "INTERNAL_ERROR",
};

/**
 * Moleculer's errors of a call that could not reach a live node, and ours: no node runs the service
 * (not found, not available, stopping), the node went away under the call (rejected, no responders
 * on the bus), it did not answer in time, the local transporter is disconnected (BAD_GATEWAY), or
 * the transit queue is full. A service that is down, never a bug and never "gone": 503.
 */
const UNREACHABLE = new Set([
  "SERVICE_NOT_FOUND",
  "SERVICE_NOT_AVAILABLE",
  "REQUEST_TIMEOUT",
  "REQUEST_REJECTED",
  "BAD_GATEWAY",
  "QUEUE_FULL",
  "NO_RESPONDERS",
  "TRANSPORTER_DISCONNECTED",
]);

export { MAX_FIELD_ERRORS };

/** The field errors of an error's data, and how many more it counted without naming them. */
function fieldErrors(data: unknown): { errors: FieldError[]; notShown: number } | undefined {
  const list = Array.isArray(data) ? data : Array.isArray((data as { errors?: unknown })?.errors) ? (data as { errors: unknown[] }).errors : null;
  if (!list) return undefined;
  const out: FieldError[] = [];
  let notShown = 0;
  for (const item of list) {
    if (item && typeof item === "object") {
      const e = item as { path?: unknown; field?: unknown; message?: unknown; errorsNotShown?: unknown };
      // lib/http/validator.ts closes a capped list with one entry that only counts the rest.
      if (typeof e.errorsNotShown === "number" && e.errorsNotShown > 0) notShown += e.errorsNotShown;
      else out.push({ path: String(e.path ?? e.field ?? ""), message: String(e.message ?? "is invalid") });
    }
  }
  return out.length ? { errors: out, notShown } : undefined;
}

/** Builds the problem body (and status) for any error thrown anywhere on the way of a request. */
export function toProblem(err: unknown, requestId: string): Problem {
  const e = (err ?? {}) as WireError;
  const rawType = typeof e.type === "string" ? e.type : "";
  let type: ErrorType | null = null;
  let status = 500;

  if (rawType in BODY_ERRORS) {
    type = BODY_ERRORS[rawType]!;
    status = ERROR_TYPES[type].status;
  } else if (rawType === "VALIDATION_ERROR") {
    // Moleculer's ValidationError is 422; the contract says 400.
    type = "VALIDATION_ERROR";
    status = 400;
  } else if (rawType in ERROR_TYPES) {
    type = rawType as ErrorType;
    status = ERROR_TYPES[type].status;
  } else if (isDatabaseUnavailable(err)) {
    // The database is down or the link to it cut (thrown here, or by a service on this node).
    type = "SERVICE_UNAVAILABLE";
    status = 503;
  } else {
    const code = Number(e.code ?? e.status ?? e.statusCode);
    if (Number.isInteger(code) && code >= 400 && code <= 599) status = code;
    // Moleculer's own transport errors, and moleculer-web's 503 for a route whose service has no live node.
    if (UNREACHABLE.has(rawType) || status === 503) {
      type = "SERVICE_UNAVAILABLE";
      status = 503;
    } else if (status === 404) type = "NOT_FOUND";
    else if (status === 429) type = "RATE_LIMITED";
    else if (status === 413) type = "PAYLOAD_TOO_LARGE";
    else if (status === 415) type = "UNSUPPORTED_MEDIA_TYPE";
  }

  if (status >= 500 && type !== "UPSTREAM_ERROR" && type !== "SERVICE_UNAVAILABLE") {
    return { type: "about:blank", title: "Internal Server Error", status: 500, detail: "Internal Server Error", requestId };
  }
  if (!type) {
    const title = STATUS_CODES[status] ?? "Error";
    return { type: "about:blank", title, status, detail: title, requestId };
  }

  const problem: Problem = {
    type: problemTypeUri(type),
    title: ERROR_TYPES[type].title,
    status,
    detail: rawType in ERROR_TYPES || rawType === "VALIDATION_ERROR" ? String(e.message ?? ERROR_TYPES[type].title) : defaultDetail(type),
    requestId,
  };
  if (rawType === "VALIDATION_ERROR" && problem.detail === "Parameters validation error!") {
    problem.detail = "The request has invalid or missing fields.";
  }
  // Only our own documented errors pass on their data (field errors, `existingId` on a 409, ...);
  // Moleculer's transport errors carry internal action and node names there.
  const ours = rawType in ERROR_TYPES || rawType === "VALIDATION_ERROR";
  const found = ours ? fieldErrors(e.data) : undefined;
  if (found) {
    // A body with thousands of bad items: name the first ones, count the rest (the answer stays small).
    const { errors, notShown } = found;
    problem.errors = errors.length > MAX_FIELD_ERRORS ? errors.slice(0, MAX_FIELD_ERRORS) : errors;
    const more = notShown + Math.max(0, errors.length - MAX_FIELD_ERRORS);
    if (more > 0) problem.errorsNotShown = more;
  }
  if (ours && e.data && typeof e.data === "object" && !Array.isArray(e.data)) {
    for (const [k, v] of Object.entries(e.data as Record<string, unknown>)) {
      if (k !== "errors" && !(k in problem)) problem[k] = v;
    }
  }
  // A 503 always says when to come back (the gateway sends it as Retry-After).
  if (type === "SERVICE_UNAVAILABLE" && typeof problem.retryAfter !== "number") problem.retryAfter = UNAVAILABLE_RETRY_AFTER_S;
  return problem;
}

function defaultDetail(type: ErrorType): string {
  switch (type) {
    case "MALFORMED_JSON":
      return "The request body is not valid JSON.";
    case "PAYLOAD_TOO_LARGE":
      return "The request body is too large.";
    case "UNSUPPORTED_MEDIA_TYPE":
      return "The request body's content type or charset is not supported.";
    case "SERVICE_UNAVAILABLE":
      return "The service that answers this request is not available right now; try again shortly.";
    default:
      return ERROR_TYPES[type].title;
  }
}
