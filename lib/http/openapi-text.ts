/**
 * The OpenAPI document's words: its tags in the reference's order, what each problem type means,
 * the rules every request is checked for, and the "Problem types" section (lib/http/openapi.ts
 * builds the document around them).
 */
import { ERROR_TYPES, type ErrorType } from "../errors";
import { problemTypeUri } from "./problem";
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
