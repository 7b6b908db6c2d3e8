/**
 * Builders with overrides (conventions: `contactIn({ email })` instead of shared fixtures): each
 * answers a valid body with fresh unique values, and whatever the test passes wins. Bodies of the
 * partner API (contacts, lists) and of the internal ingress (contract section 6: registrations,
 * receipts, reads, inbound messages).
 */
import { randomBytes } from "node:crypto";

let seq = 0;
/** A per-process start, so that two files (or two runs) seldom draw the same numbers. */
const base = randomBytes(3).readUIntBE(0, 3) % 10_000_000;
const next = () => ++seq;

export const uniqueId = (prefix = "id") => `${prefix}-${randomBytes(5).toString("hex")}`;

/** A fresh valid Portuguese mobile number in E.164. */
export const phone = () => `+35191${String((base + next() * 7919) % 10_000_000).padStart(7, "0")}`;

/** A fresh email address. */
export const email = (local = "c") => `${local}${next()}.${randomBytes(3).toString("hex")}@example.com`;

const now = () => new Date().toISOString();

// ---- partner API -------------------------------------------------------------------------

/** A `POST /contacts` body with a phone number of its own. */
export function contactIn<O extends Record<string, unknown>>(over: O = {} as O) {
  const n = next();
  return { firstName: "Ana", lastName: `Silva${n}`, phoneNumber: phone(), ...over };
}

/** A `POST /contacts/list` body with a name of its own. */
export function listIn<O extends Record<string, unknown>>(over: O = {} as O) {
  return { name: `List ${next()}`, ...over };
}

// ---- internal ingress (contract section 6) -------------------------------------------------

export type Channel = "SMS" | "RCS" | "WHATSAPP";

/** A registered message as the receipt builders need it. */
export interface Sent {
  companyId: string;
  customerMessageId: string;
  destination: string;
}

/** A `POST /internal/v1/messages` body: an SMS sent now to a fresh number. */
export function messageIn<O extends Record<string, unknown>>(companyId: string, over: O = {} as O) {
  return { companyId, channel: "SMS" as Channel, customerMessageId: uniqueId("m"), destination: phone(), sentAt: now(), ...over };
}

/** A `POST /internal/v1/receipts/sms` body for `m`: DELIVERED (3) now. */
export function smsReceiptIn<O extends Record<string, unknown>>(m: Sent, over: O = {} as O) {
  return { companyId: m.companyId, MESSAGE_ID: m.customerMessageId, DESTINATION: m.destination, DELIVERY_STATUS: 3, DELIVERY_DATE: now(), ...over };
}

/** A `POST /internal/v1/receipts/{rcs|whatsapp}` body for `m`: DELIVERED (3) now. */
export function receiptIn<O extends Record<string, unknown>>(m: Sent, over: O = {} as O) {
  return { companyId: m.companyId, messageId: m.customerMessageId, destination: m.destination, statusCode: 3, eventDate: now(), ...over };
}

/** A `POST /internal/v1/reads/{rcs|whatsapp}` body for `m`: read now. */
export function readIn<O extends Record<string, unknown>>(m: Sent, over: O = {} as O) {
  return { companyId: m.companyId, messageId: m.customerMessageId, destination: m.destination, eventDate: now(), ...over };
}

/** A `POST /internal/v1/inbound/{rcs|whatsapp}` body: a text from a fresh number, received now. */
export function inboundIn<O extends Record<string, unknown>>(companyId: string, over: O = {} as O) {
  return {
    companyId,
    messageId: uniqueId("in"),
    source: phone(),
    destination: "+351210000000",
    receivedDate: now(),
    messageType: "TEXT",
    text: "hi",
    ...over,
  };
}
