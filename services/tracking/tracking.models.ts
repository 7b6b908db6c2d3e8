/**
 * The tracking service's rows (tables of the messages migrations) and their wire form: the columns
 * each read selects, and the mappers from a row to what the API answers or the fold works on.
 */
import { statusByCode, type Channel } from "../../lib/messaging/channels";
import { iso } from "../../lib/messaging/time";
import type { MessageState } from "./tracking.fold";
import type { HistoryItemOut, MessageStatusOut } from "./tracking.schemas";

export interface StatusRow {
  customer_message_id: string;
  channel: Channel;
  destination: string;
  sent_at: Date | null;
  status_code: number;
  delivery_date: Date | null;
  read_at: Date | null;
  simulation: boolean;
}

export interface HistoryRow extends StatusRow {
  id: string;
  text: string | null;
  campaign_id: string | null;
  total_parts: number;
  price: string | null;
  sent_key: string;
}

/** A message row as the ingestion reads it (locked) before folding receipts and reads into it. */
export interface MessageRow {
  id: string;
  company_id: string;
  channel: Channel;
  customer_message_id: string;
  destination: string;
  sent_at: Date | null;
  total_parts: number;
  simulation: boolean;
  status_code: number;
  delivery_date: Date | null;
  read_at: Date | null;
  price: string | null;
  part_codes: number[] | null;
  last_part_date: Date | null;
}

export const STATUS_COLUMNS = "customer_message_id, channel, destination, sent_at, status_code, delivery_date, read_at, simulation";

/** The columns of a MessageRow, on alias `m`. */
export const MESSAGE_COLUMNS = `m.id, m.company_id, m.channel, m.customer_message_id, m.destination, m.sent_at, m.total_parts, m.simulation,
              m.status_code, m.delivery_date, m.read_at, m.price, m.part_codes, m.last_part_date`;

export function toStatusOut(r: StatusRow): MessageStatusOut {
  const st = statusByCode(r.status_code);
  return {
    customerMessageId: r.customer_message_id,
    channel: r.channel,
    deliveryStatus: st.name,
    statusCode: st.code,
    description: st.description,
    destination: r.destination,
    sentAt: iso(r.sent_at),
    deliveryDate: iso(r.delivery_date),
    readAt: iso(r.read_at),
    simulation: r.simulation,
  };
}

/** What an id the account never sent answers: UNKNOWN, code 0. */
export function unknownStatus(customerMessageId: string, channel: Channel): MessageStatusOut {
  return {
    customerMessageId,
    channel,
    deliveryStatus: "UNKNOWN",
    statusCode: 0,
    description: "unknown",
    destination: null,
    sentAt: null,
    deliveryDate: null,
    readAt: null,
    simulation: false,
  };
}

export function toHistoryItem(r: HistoryRow): HistoryItemOut {
  return { ...toStatusOut(r), text: r.text, campaignId: r.campaign_id, totalParts: r.total_parts, price: r.price === null ? null : Number(r.price) };
}

/** A message row as the fold sees it (unchanged so far). */
export function stateOf(r: MessageRow): MessageState {
  return {
    id: r.id,
    companyId: r.company_id,
    channel: r.channel,
    customerMessageId: r.customer_message_id,
    destination: r.destination,
    sentAt: iso(r.sent_at),
    totalParts: r.total_parts,
    simulation: r.simulation,
    statusCode: r.status_code,
    deliveryDate: iso(r.delivery_date),
    readAt: iso(r.read_at),
    price: r.price === null ? null : Number(r.price),
    partCodes: r.part_codes,
    lastPartDate: iso(r.last_part_date),
    changed: false,
  };
}
