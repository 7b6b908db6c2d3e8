/**
 * Tracking on the wire: what upstreams post to the internal ingress (contract section 6) and what
 * partners read back (message status, contract section 4; message history).
 */
import { CHANNELS, finalCodesOf, STATUS_NAMES, type Channel, type DeliveryStatusName } from "../../lib/messaging/channels";
import { YEAR_PATTERN } from "../../lib/messaging/time";
import type { PropertiesOf, SchemaOf } from "../../lib/http/schema-type";

/** An array posted to the ingress holds at most this many objects (one transaction). */
export const MAX_INGEST_ITEMS = 1000;
/** The bulk status form answers at most this many ids. */
export const MAX_STATUS_IDS = 1000;

const E164 = "^\\+[1-9][0-9]{6,14}$";
export const companyId = { type: "string", minLength: 1, maxLength: 100, pattern: "^[^\\u0000-\\u001f]+$" } satisfies SchemaOf<string>;
const messageId = { type: "string", minLength: 1, maxLength: 200, pattern: "^[^\\u0000-\\u001f]+$" } satisfies SchemaOf<string>;
const phone = { type: "string", pattern: E164, description: "E.164", examples: ["+351912345678"] } satisfies SchemaOf<string>;
const dateTime = { type: "string", format: "date-time", maxLength: 40 } satisfies SchemaOf<string>;
const parts = { type: "integer", minimum: 1, maximum: 255 } satisfies SchemaOf<number>;

// ---------------------------------------------------------------------------------------------
// The internal ingress (upstreams)
// ---------------------------------------------------------------------------------------------

export interface RegistrationIn {
  companyId: string;
  channel: Channel;
  customerMessageId: string;
  destination: string;
  sentAt?: string;
  totalParts?: number;
  text?: string;
  campaignId?: string;
  simulation?: boolean;
}

export const registrationIn = {
  $id: "IngestRegistration",
  type: "object",
  additionalProperties: false,
  required: ["companyId", "channel", "customerMessageId", "destination"],
  properties: {
    companyId,
    channel: { type: "string", enum: [...CHANNELS] },
    customerMessageId: messageId,
    destination: phone,
    sentAt: dateTime,
    totalParts: parts,
    text: { type: "string", maxLength: 10000 },
    campaignId: { type: "string", minLength: 1, maxLength: 100 },
    simulation: { type: "boolean" },
  },
} satisfies SchemaOf<RegistrationIn>;

export interface SmsReceiptIn {
  companyId: string;
  MESSAGE_ID: string;
  DESTINATION: string;
  DELIVERY_STATUS: number;
  DELIVERY_DATE: string;
  PRICE?: number;
  TOTAL_PARTS?: number;
  NUM_PART?: number;
}

export const smsReceiptIn = {
  $id: "IngestSmsReceipt",
  type: "object",
  additionalProperties: false,
  required: ["companyId", "MESSAGE_ID", "DESTINATION", "DELIVERY_STATUS", "DELIVERY_DATE"],
  properties: {
    companyId,
    MESSAGE_ID: messageId,
    DESTINATION: phone,
    DELIVERY_STATUS: { type: "integer", enum: finalCodesOf("SMS") },
    DELIVERY_DATE: dateTime,
    PRICE: { type: "number", minimum: 0, maximum: 1e6 },
    TOTAL_PARTS: parts,
    NUM_PART: parts,
  },
} satisfies SchemaOf<SmsReceiptIn>;

export interface ChannelReceiptIn {
  companyId: string;
  messageId: string;
  destination: string;
  statusCode: number;
  eventDate: string;
}

const channelReceiptIn = (channel: "RCS" | "WHATSAPP") =>
  ({
    $id: `Ingest${channel === "RCS" ? "Rcs" : "Whatsapp"}Receipt`,
    type: "object",
    additionalProperties: false,
    required: ["companyId", "messageId", "destination", "statusCode", "eventDate"],
    properties: { companyId, messageId, destination: phone, statusCode: { type: "integer", enum: finalCodesOf(channel) }, eventDate: dateTime },
  }) satisfies SchemaOf<ChannelReceiptIn>;
export const rcsReceiptIn = channelReceiptIn("RCS");
export const whatsappReceiptIn = channelReceiptIn("WHATSAPP");

export interface ReadIn {
  companyId: string;
  messageId: string;
  destination: string;
  eventDate: string;
}

export const readIn = {
  $id: "IngestRead",
  type: "object",
  additionalProperties: false,
  required: ["companyId", "messageId", "destination", "eventDate"],
  properties: { companyId, messageId, destination: phone, eventDate: dateTime },
} satisfies SchemaOf<ReadIn>;

export interface InboundIn {
  companyId: string;
  messageId: string;
  source: string;
  destination: string;
  receivedDate: string;
  messageType: string;
  text?: string;
  mediaKey?: string;
}

export const inboundIn = {
  $id: "IngestInbound",
  type: "object",
  additionalProperties: false,
  required: ["companyId", "messageId", "source", "destination", "receivedDate", "messageType"],
  properties: {
    companyId,
    messageId,
    source: phone,
    destination: { type: "string", minLength: 1, maxLength: 200, description: "The sender's WhatsApp number, or the RCS agent id." },
    receivedDate: dateTime,
    messageType: { type: "string", pattern: "^[A-Z][A-Z_]{0,31}$", examples: ["TEXT"] },
    text: { type: "string", maxLength: 10000 },
    mediaKey: { type: "string", minLength: 1, maxLength: 500 },
  },
} satisfies SchemaOf<InboundIn>;

/** An upstream's report of a number's consent (contract section 7: a carrier-level STOP, say). */
export interface OptOutReportIn {
  companyId: string;
  channel: Channel;
  phoneNumber: string;
  action: "OPT_OUT" | "OPT_IN";
  at: string;
}

export const optOutReportIn = {
  $id: "IngestOptOut",
  type: "object",
  additionalProperties: false,
  required: ["companyId", "channel", "phoneNumber", "action", "at"],
  properties: {
    companyId,
    channel: { type: "string", enum: [...CHANNELS] },
    phoneNumber: phone,
    action: { type: "string", enum: ["OPT_OUT", "OPT_IN"] },
    at: { ...dateTime, description: "When the end user said it; a report older than the number's last change is ignored." },
  },
} satisfies SchemaOf<OptOutReportIn>;

/** The ingress answer: how many objects were stored (new or repeated). */
export interface IngestOut {
  accepted: number;
}

// ---------------------------------------------------------------------------------------------
// Internal actions (the REPL, other nodes): they take other properties too and ignore them, and a
// parameter that must be given may not be null.
// ---------------------------------------------------------------------------------------------

/** tracking.ingest: what the HTTP ingress takes, by path (`receipts/sms`); parseIngest checks the body. */
export interface IngestIn {
  path: string;
  body: unknown;
}

export const ingestIn = {
  $id: "TrackingIngestIn",
  type: "object",
  required: ["path", "body"],
  properties: { path: { type: "string" }, body: { not: { type: "null" }, description: "Any value but null." } },
} satisfies SchemaOf<IngestIn>;

/** tracking.statusCodes: the status codes of one account's messages on one channel (another service's own sends, such as inbox replies). */
export interface StatusCodesIn {
  companyId: string;
  channel: "SMS" | "RCS" | "WHATSAPP";
  ids: string[];
}
export interface StatusCodesOut {
  /** One per id, in order: the polled status code (0 for a message tracking has not heard of). */
  codes: number[];
}

export const statusCodesIn = {
  $id: "TrackingStatusCodesIn",
  type: "object",
  required: ["companyId", "channel", "ids"],
  additionalProperties: false,
  properties: {
    companyId,
    channel: { type: "string", enum: ["SMS", "RCS", "WHATSAPP"] },
    ids: { type: "array", maxItems: 1000, items: { type: "string", minLength: 1, maxLength: 100 } },
  },
} satisfies SchemaOf<StatusCodesIn>;

/** tracking.purge: retention now, optionally of a shorter age or in other batch sizes (null: the default). */
export interface PurgeIn {
  olderThanDays?: number | null;
  batchSize?: number | null;
}

export const purgeIn = {
  $id: "TrackingPurgeIn",
  type: "object",
  properties: {
    olderThanDays: { type: "integer", exclusiveMinimum: 0, nullable: true },
    batchSize: { type: "integer", exclusiveMinimum: 0, maximum: 100000, nullable: true },
  },
} satisfies SchemaOf<PurgeIn>;

// ---------------------------------------------------------------------------------------------
// Partners: polling and history
// ---------------------------------------------------------------------------------------------

export interface MessageStatusOut {
  customerMessageId: string;
  channel: Channel;
  deliveryStatus: DeliveryStatusName;
  statusCode: number;
  description: string;
  destination: string | null;
  sentAt: string | null;
  deliveryDate: string | null;
  readAt: string | null;
  simulation: boolean;
}

const nullableDate = { type: "string", format: "date-time", nullable: true } satisfies SchemaOf<string | null>;
const channelParam = {
  type: "string",
  enum: [...CHANNELS],
  description: "The channel the message was sent on; the key needs this operation.",
} satisfies SchemaOf<Channel>;

const statusProperties = {
  customerMessageId: { type: "string", examples: ["order-1234-sms"] },
  channel: { type: "string", enum: [...CHANNELS] },
  deliveryStatus: { type: "string", enum: [...STATUS_NAMES] },
  statusCode: { type: "integer", examples: [3] },
  description: { type: "string", examples: ["delivered"] },
  destination: { type: "string", nullable: true, examples: ["+351912345678"] },
  sentAt: nullableDate,
  deliveryDate: { ...nullableDate, description: "Set once the receipt arrived (for a multi-part SMS: once every part has, the latest part's date)." },
  readAt: { ...nullableDate, description: "When the recipient read it (RCS, WhatsApp); the status stays DELIVERED." },
  simulation: { type: "boolean", description: "Registered with simulation: true (validated, never sent, no callback)." },
} satisfies PropertiesOf<MessageStatusOut>;
// Every name of MessageStatusOut: statusProperties has a schema for each, and no other name.
const statusRequired = Object.keys(statusProperties) as (keyof MessageStatusOut)[];

export const messageStatusOut = {
  $id: "MessageStatus",
  type: "object",
  additionalProperties: false,
  required: statusRequired,
  properties: statusProperties,
} satisfies SchemaOf<MessageStatusOut>;

export type MessageStatusesOut = { data: MessageStatusOut[] };

export const messageStatusesOut = {
  $id: "MessageStatuses",
  type: "object",
  additionalProperties: false,
  required: ["data"],
  properties: { data: { type: "array", items: messageStatusOut } },
} satisfies SchemaOf<MessageStatusesOut>;

export interface StatusIn {
  customerMessageId: string;
  channel: Channel;
}

export const statusIn = {
  $id: "MessageStatusIn",
  type: "object",
  additionalProperties: false,
  required: ["customerMessageId", "channel"],
  properties: { customerMessageId: messageId, channel: channelParam },
} satisfies SchemaOf<StatusIn>;

export interface StatusesIn {
  channel: Channel;
  ids: string;
}

export const statusesIn = {
  $id: "MessageStatusesIn",
  type: "object",
  additionalProperties: false,
  required: ["channel", "ids"],
  properties: {
    channel: channelParam,
    ids: {
      type: "string",
      minLength: 1,
      maxLength: 1000 * 201,
      description: `Comma-separated customer message ids, at most ${MAX_STATUS_IDS}, each 1-200 characters once trimmed (more ids, an empty one or a longer one is a 400); answered one entry per id, in order.`,
      examples: ["order-1,order-2"],
    },
  },
} satisfies SchemaOf<StatusesIn>;

export interface HistoryIn {
  channel?: Channel;
  status?: DeliveryStatusName;
  destination?: string;
  campaignId?: string;
  from?: string;
  to?: string;
  cursor?: string;
  limit: number;
}

/** What the service checks of `from` and `to` that a schema cannot say (tracking.contract.ts checkHistoryRange). */
export const RANGE_RULE =
  "A year from 1970 to 9999, as written, and no leap second (the pattern); when both are given, `from` must be before `to` (equal is refused: the range [from, to) would be empty), else 400.";

export const historyFilterProperties = {
  channel: { type: "string", enum: [...CHANNELS], description: "Only this channel (the key must have it); default: every channel of the key." },
  status: { type: "string", enum: [...STATUS_NAMES], description: "Only messages whose deliveryStatus is this." },
  destination: { ...phone, description: "Only messages to this number (E.164)." },
  campaignId: { type: "string", minLength: 1, maxLength: 100 },
  from: { ...dateTime, pattern: YEAR_PATTERN, description: `Sent at or after this instant. ${RANGE_RULE}` },
  to: { ...dateTime, pattern: YEAR_PATTERN, description: `Sent before this instant. ${RANGE_RULE}` },
} satisfies PropertiesOf<Omit<HistoryIn, "cursor" | "limit">>;

export const historyIn = {
  $id: "MessageHistoryIn",
  type: "object",
  additionalProperties: false,
  properties: {
    ...historyFilterProperties,
    cursor: { type: "string", minLength: 1, maxLength: 200, description: "nextCursor of the previous page, as given (any other text is a 400)." },
    limit: { type: "integer", minimum: 1, maximum: 1000, default: 10, description: "Page size, at most 1000." },
  },
} satisfies SchemaOf<HistoryIn>;

export interface HistoryItemOut extends MessageStatusOut {
  text: string | null;
  campaignId: string | null;
  totalParts: number;
  price: number | null;
}

export const historyItemOut = {
  $id: "MessageHistoryItem",
  type: "object",
  additionalProperties: false,
  required: [...statusRequired, "text", "campaignId", "totalParts", "price"],
  properties: {
    ...statusProperties,
    text: { type: "string", nullable: true },
    campaignId: { type: "string", nullable: true },
    totalParts: { type: "integer", minimum: 1 },
    price: { type: "number", nullable: true, description: "SMS: the sum of the parts' prices reported so far." },
  },
} satisfies SchemaOf<HistoryItemOut>;

export interface HistoryOut {
  data: HistoryItemOut[];
  limit: number;
  nextCursor: string | null;
}

export const historyOut = {
  $id: "MessageHistory",
  type: "object",
  additionalProperties: false,
  required: ["data", "limit", "nextCursor"],
  properties: {
    data: { type: "array", items: historyItemOut },
    limit: { type: "integer" },
    nextCursor: { type: "string", nullable: true, description: "Pass as `cursor` for the next (older) page; null on the last page." },
  },
} satisfies SchemaOf<HistoryOut>;
