/** Webhook registration on the wire (spec parts 2 and 4, contract section 4 "Webhook"). */
import { pageSchema } from "../../lib/paging";
import { MAX_CALLBACK_URL } from "./notifier.url";
import { MESSAGE_KEYWORD } from "../../lib/schema-messages";

/**
 * What the service's URL check (notifier.url.ts) demands of the text, as a schema `pattern`: https
 * (any case), a host or a bracketed IPv6 literal without credentials, port 443 or 8443 if any, no
 * fragment, no white space. The host's resolution is checked by the service alone.
 */
export const CALLBACK_URL_PATTERN = "^[Hh][Tt][Tt][Pp][Ss]://(\\[[0-9A-Fa-f:.]+\\]|[^\\s/?#@:\\[\\]\\\\]+)(:(443|8443))?([/?][^\\s#]*)?$";

export interface WebhookIn {
  callbackUrl: string;
}

export const webhookIn = {
  $id: "WebhookIn",
  type: "object",
  additionalProperties: false,
  required: ["callbackUrl"],
  properties: {
    callbackUrl: {
      type: "string",
      minLength: 1,
      maxLength: MAX_CALLBACK_URL,
      pattern: CALLBACK_URL_PATTERN,
      [MESSAGE_KEYWORD]: "must be an absolute URL: https, port 443 or 8443, no credentials, no fragment",
      description:
        "An absolute URL: https, port 443 or 8443, no credentials, no fragment (the pattern says so); and the host must resolve, only to publicly reachable addresses (checked when it is set: a 400 otherwise).",
      examples: ["https://hooks.example.com/pgw/delivery"],
    },
  },
};

export interface WebhookOut {
  companyId: string;
  callbackUrl: string;
  createdAt: string;
  updatedAt: string;
}

export const webhookOut = {
  $id: "Webhook",
  type: "object",
  additionalProperties: false,
  required: ["companyId", "callbackUrl", "createdAt", "updatedAt"],
  properties: {
    companyId: { type: "string", examples: ["acme"] },
    callbackUrl: { type: "string", examples: ["https://hooks.example.com/pgw/delivery"] },
    createdAt: { type: "string", format: "date-time" },
    updatedAt: { type: "string", format: "date-time" },
  },
};

/** Query of GET /webhooks/delivery-status/attempts. */
export interface AttemptsIn {
  page: number;
  limit: number;
  messageId?: string;
  outcome?: "DELIVERED" | "RETRYING" | "FAILED" | "EXPIRED";
}

export const OUTCOMES = ["DELIVERED", "RETRYING", "FAILED", "EXPIRED"] as const;

export const attemptsIn = {
  $id: "WebhookAttemptsIn",
  type: "object",
  additionalProperties: false,
  properties: {
    page: { type: "integer", minimum: 0, maximum: 1_000_000_000, default: 0, description: "0-based page index." },
    limit: { type: "integer", minimum: 1, maximum: 1000, default: 10, description: "Page size, at most 1000." },
    messageId: { type: "string", minLength: 1, maxLength: 200, description: "Only the attempts of this message's events." },
    outcome: { type: "string", enum: [...OUTCOMES], description: "Only attempts with this outcome." },
  },
};

export interface AttemptOut {
  eventType: "DELIVERY" | "READ" | "INBOUND";
  channel: "SMS" | "RCS" | "WHATSAPP";
  messageId: string;
  numPart: number | null;
  attempt: number;
  attemptedAt: string;
  httpStatus: number | null;
  durationMs: number | null;
  error: string | null;
  nextAttemptAt: string | null;
  outcome: (typeof OUTCOMES)[number];
}

export const attemptOut = {
  $id: "WebhookAttempt",
  type: "object",
  additionalProperties: false,
  required: ["eventType", "channel", "messageId", "numPart", "attempt", "attemptedAt", "httpStatus", "durationMs", "error", "nextAttemptAt", "outcome"],
  properties: {
    eventType: { type: "string", enum: ["DELIVERY", "READ", "INBOUND"] },
    channel: { type: "string", enum: ["SMS", "RCS", "WHATSAPP"] },
    messageId: { type: "string", description: "The event's messageId (customerMessageId; the inbound message's id for INBOUND)." },
    numPart: { type: ["integer", "null"], description: "SMS DELIVERY events: the part." },
    attempt: { type: "integer", minimum: 1, maximum: 5, description: "1 for the first attempt, at most 5." },
    attemptedAt: { type: "string", format: "date-time" },
    httpStatus: { type: ["integer", "null"], description: "The status your endpoint answered; null when it gave none (refused, timed out, closed)." },
    durationMs: { type: ["integer", "null"], description: "Time from the attempt's start to its end; null when no request was made." },
    error: { type: ["string", "null"], description: "Why the attempt failed, in words; null on success.", examples: ["no answer within 5 s"] },
    nextAttemptAt: { type: ["string", "null"], format: "date-time", description: "When the event is tried again (RETRYING only)." },
    outcome: {
      type: "string",
      enum: [...OUTCOMES],
      description:
        "DELIVERED: a 2xx answer. RETRYING: failed, tried again at nextAttemptAt. FAILED: the 5th attempt failed; not sent again. EXPIRED: not retried because the message was sent over 10 days ago.",
    },
  },
};

export const attemptPage = pageSchema("WebhookAttemptPage", attemptOut);

/** notifier.housekeep (the REPL) takes no parameters (others are ignored, as before it had a schema). */
export const housekeepIn = { $id: "NotifierHousekeepIn", type: "object", properties: {} };
