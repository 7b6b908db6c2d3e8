/** Webhook registration on the wire (spec parts 2 and 4, contract section 4 "Webhook"). */
import { pageSchema, type Page } from "../../lib/http/paging";
import type { SchemaOf } from "../../lib/http/schema-type";
import { MAX_CALLBACK_URL } from "./notifier.url";
import { MESSAGE_KEYWORD } from "../../lib/http/schema-messages";

/**
 * What the service's URL check (notifier.url.ts) demands of the text, as a schema `pattern`: https
 * (any case), a host or a bracketed IPv6 literal without credentials, port 443 or 8443 if any, no
 * fragment, no white space. The host's resolution is checked by the service alone.
 */
const H = "[0-9A-Fa-f]{1,4}";
const V4 = "((25[0-5]|(2[0-4]|1?[0-9])?[0-9])\\.){3}(25[0-5]|(2[0-4]|1?[0-9])?[0-9])";
/** An IPv6 address as RFC 4291 writes it (with :: and a trailing IPv4 form), nothing else in the brackets. */
const IPV6 = [
  `(${H}:){7}${H}`,
  `(${H}:){1,7}:`,
  `(${H}:){1,6}:${H}`,
  `(${H}:){1,5}(:${H}){1,2}`,
  `(${H}:){1,4}(:${H}){1,3}`,
  `(${H}:){1,3}(:${H}){1,4}`,
  `(${H}:){1,2}(:${H}){1,5}`,
  `${H}:(:${H}){1,6}`,
  `:((:${H}){1,7}|:)`,
  `::([Ff]{4}(:0{1,4})?:)?${V4}`,
  `(${H}:){1,4}:${V4}`,
].join("|");
/** A host name: none of the code points the URL standard forbids in a host (controls, space, #%/:<>?@[\\]^|). */
const HOST = "[^\\s\\u0000-\\u001f\\u007f/?#@:<>^|%\\[\\]\\\\]+";
export const CALLBACK_URL_PATTERN = `^[Hh][Tt][Tt][Pp][Ss]://(\\[(${IPV6})\\]|${HOST})(:(443|8443))?([/?][^\\s#]*)?$`;

export interface WebhookIn {
  callbackUrl: string;
  signed?: boolean;
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
    signed: {
      type: "boolean",
      default: false,
      description:
        "Sign deliveries (Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature`). When the webhook becomes signed, the answer carries `signingSecret`, shown only then. On `PUT`, `true` keeps the secret of a webhook already signed, and `false` (also when omitted: PUT replaces the webhook) stops signing and discards its secrets.",
    },
  },
} satisfies SchemaOf<WebhookIn>;

export interface WebhookOut {
  companyId: string;
  callbackUrl: string;
  signed: boolean;
  signingSecret?: string;
  createdAt: string;
  updatedAt: string;
}

/** `whsec_` and 32 bytes in standard base64. */
export const SIGNING_SECRET_PATTERN = "^whsec_[A-Za-z0-9+/]{43}=$";

export const webhookOut = {
  $id: "Webhook",
  type: "object",
  additionalProperties: false,
  required: ["companyId", "callbackUrl", "signed", "createdAt", "updatedAt"],
  properties: {
    companyId: { type: "string", examples: ["acme"] },
    callbackUrl: { type: "string", examples: ["https://hooks.example.com/pgw/delivery"] },
    signed: { type: "boolean", description: "Whether deliveries carry Standard Webhooks signatures." },
    signingSecret: {
      type: "string",
      pattern: SIGNING_SECRET_PATTERN,
      description:
        "The signing secret, `whsec_` and 32 random bytes in base64: only in the answer that made it (a signed registration, a PUT that turned signing on, a rotation), never again. Verify deliveries with it, e.g. `new Webhook(secret).verify(body, headers)` of the `standardwebhooks` library.",
      examples: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw7j0hXQ4tuvE="],
    },
    createdAt: { type: "string", format: "date-time" },
    updatedAt: { type: "string", format: "date-time" },
  },
} satisfies SchemaOf<WebhookOut>;

/** POST /webhooks/delivery-status/secret takes no parameters. */
export type RotateSecretIn = Record<string, never>;
export const rotateSecretIn = {
  $id: "WebhookSecretRotateIn",
  type: "object",
  additionalProperties: false,
  properties: {},
} satisfies SchemaOf<RotateSecretIn>;

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
} satisfies SchemaOf<AttemptsIn>;

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
} satisfies SchemaOf<AttemptOut>;

export const attemptPage = pageSchema("WebhookAttemptPage", attemptOut) satisfies SchemaOf<Page<AttemptOut>>;

/** notifier.housekeep (the REPL) takes no parameters (others are ignored, as before it had a schema). */
export type HousekeepIn = Record<string, unknown>;
export const housekeepIn = { $id: "NotifierHousekeepIn", type: "object", properties: {} } satisfies SchemaOf<HousekeepIn>;
