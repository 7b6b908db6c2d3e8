/**
 * The status model, pure (unit-tested): receipts and reads are folded into a message's state in
 * arrival order, and every change the spec says produces an event yields that event, exactly once.
 * The payloads of the webhook events (spec part 6) are built here too. Nothing here touches the
 * database: tracking.writes.ts reads the rows, folds, and writes the result.
 */
import { DELIVERED, inFlightCode, statusByCode, type Channel } from "../../lib/messaging/channels";
import type { ChannelSupport } from "./tracking.contract";
import { withoutEmpty, type WebhookEvent } from "../notifier/notifier.contract";
import type { InboundIn, RegistrationIn } from "./tracking.schemas";

export type { WebhookEvent };
export { withoutEmpty };

export interface ReceiptItem {
  kind: "receipt";
  channel: Channel;
  companyId: string;
  messageId: string;
  destination: string;
  code: number;
  /** ISO 8601, UTC. */
  date: string;
  price?: number;
  /** The carrier's part count, when it said (SMS); RCS and WhatsApp: 1. */
  totalParts: number | null;
  numPart: number;
}

export interface ReadItem {
  kind: "read";
  channel: Channel;
  companyId: string;
  messageId: string;
  destination: string;
  date: string;
}

export type IngestItem = { kind: "message"; message: RegistrationIn } | ReceiptItem | ReadItem;

/** An inbound message, validated by the ingress and stored in tracking's inbound feed, which the inbox follows (migration 0032). */
export interface InboundItem {
  kind: "inbound";
  channel: "RCS" | "WHATSAPP";
  inbound: InboundIn;
}

/** What one ingress request writes, all or none: message items, or inbound messages. */
export type WriteItem = IngestItem | InboundItem;

/** A message row as the fold sees it (tracking.models.ts reads it from a row). */
export interface MessageState {
  id: string | null;
  companyId: string;
  channel: Channel;
  customerMessageId: string;
  destination: string;
  sentAt: string | null;
  totalParts: number;
  simulation: boolean;
  statusCode: number;
  deliveryDate: string | null;
  readAt: string | null;
  price: number | null;
  partCodes: Array<number | null> | null;
  lastPartDate: string | null;
  changed: boolean;
}

const isFinal = (code: number) => statusByCode(code).final;

/** The state of a message first heard of through a receipt or read (its registration still to come). */
export function placeholder(item: ReceiptItem | ReadItem): MessageState {
  return {
    id: null,
    companyId: item.companyId,
    channel: item.channel,
    customerMessageId: item.messageId,
    destination: item.destination,
    sentAt: null,
    totalParts: item.kind === "receipt" ? (item.totalParts ?? 1) : 1,
    simulation: false,
    statusCode: inFlightCode(item.channel),
    deliveryDate: null,
    readAt: null,
    price: null,
    partCodes: null,
    lastPartDate: null,
    changed: true,
  };
}

const addPrice = (a: number | null, b: number | undefined) => (b === undefined ? a : Math.round(((a ?? 0) + b) * 1e6) / 1e6);
const later = (a: string | null, b: string) => (a === null || Date.parse(b) > Date.parse(a) ? b : a);

/**
 * Folds one receipt or read into a message's state (mutating it) and returns the event it produces,
 * or null: a repeat, a receipt for a message already final, or a simulated message.
 */
export function fold(s: MessageState, item: ReceiptItem | ReadItem): WebhookEvent | null {
  if (item.kind === "read") {
    if (s.readAt !== null) return null;
    s.readAt = item.date;
    s.changed = true;
    return s.simulation
      ? null
      : event(s, "READ", null, { eventType: "READ", channel: s.channel, messageId: s.customerMessageId, destination: item.destination, eventDate: item.date });
  }
  if (isFinal(s.statusCode)) return null; // final codes never change; a repeat makes no second event
  let numPart: number | null = null;
  if (s.channel === "SMS") {
    // The carrier's part count is the authority until the first part is recorded: the registration
    // may have left it out or got it wrong.
    if (item.totalParts !== null && item.totalParts !== s.totalParts && s.partCodes === null) s.totalParts = item.totalParts;
    if (s.totalParts > 1) {
      if (item.numPart > s.totalParts) return null;
      const codes = s.partCodes ?? (s.partCodes = Array.from({ length: s.totalParts }, () => null));
      if (codes[item.numPart - 1] != null) return null; // this part was already reported
      codes[item.numPart - 1] = item.code;
      s.lastPartDate = later(s.lastPartDate, item.date);
      s.price = addPrice(s.price, item.price);
      numPart = item.numPart;
      if (codes.every((c) => c != null)) {
        // Final once every part has a receipt: DELIVERED if all were, else the lowest-numbered failure.
        s.statusCode = codes.find((c) => c !== DELIVERED) ?? DELIVERED;
        s.deliveryDate = s.lastPartDate;
      }
    } else {
      s.statusCode = item.code;
      s.deliveryDate = item.date;
      s.price = addPrice(s.price, item.price);
      numPart = 1;
    }
  } else {
    s.statusCode = item.code;
    s.deliveryDate = item.date;
  }
  s.changed = true;
  if (s.simulation) return null;
  return event(s, "DELIVERY", numPart, deliveryPayload(item, s.totalParts, numPart));
}

/** The DELIVERY event of spec part 6 for a receipt: SMS adds its price and `numPart` of `totalParts`. */
export function deliveryPayload(r: ReceiptItem, totalParts: number, numPart: number | null): Record<string, unknown> {
  const st = statusByCode(r.code);
  return withoutEmpty({
    eventType: "DELIVERY",
    channel: r.channel,
    messageId: r.messageId,
    destination: r.destination,
    statusCode: st.code,
    description: st.description,
    eventDate: r.date,
    ...(r.channel === "SMS" ? { price: r.price, totalParts, numPart } : {}),
  });
}

function event(s: MessageState, type: WebhookEvent["event_type"], numPart: number | null, payload: Record<string, unknown>): WebhookEvent {
  return {
    company_id: s.companyId,
    channel: s.channel,
    event_type: type,
    message_id: s.customerMessageId,
    num_part: numPart,
    payload: withoutEmpty(payload),
    message_sent_at: s.sentAt,
  };
}

/**
 * What a receipt says about a number's reachability on RCS or WhatsApp: DELIVERED gains the
 * channel, DISABLED (10) and UNSUPPORTED (11) lose it; anything else (and SMS) says nothing.
 */
export function channelSupportOf(r: ReceiptItem): ChannelSupport | null {
  if (r.channel === "SMS" || ![DELIVERED, 10, 11].includes(r.code)) return null;
  return { companyId: r.companyId, channel: r.channel, destination: r.destination, supported: r.code === DELIVERED };
}
