/**
 * The inbox's rows and what they become on the wire: a conversation (with its reply window) and a
 * thread message (with a reply's tracked delivery status).
 */
import { statusByCode } from "../../lib/messaging/channels";
import type { ConversationOut, InboxChannel, ThreadMessageOut } from "./inbox.schemas";

/** WhatsApp's customer-service window: replies are possible this long after the last inbound message. */
export const SERVICE_WINDOW_MS = 24 * 3600_000;
/** The longest lastMessagePreview, in characters (code points). */
export const PREVIEW_LENGTH = 140;

export interface ConversationRow {
  id: string;
  company_id: string;
  channel: InboxChannel;
  sender_id: string;
  contact_number: string;
  status: "ACTIVE" | "ARCHIVED";
  unread_count: number;
  last_message_at: Date | string;
  last_message_preview: string | null;
  last_inbound_at: Date | string | null;
  created_at: Date | string;
}

export const CONVERSATION_COLUMNS = `c.id, c.company_id, c.channel, c.sender_id, c.contact_number, c.status, c.unread_count,
  c.last_message_at, c.last_message_preview, c.last_inbound_at, c.created_at`;

export interface MessageRow {
  id: string;
  conversation_id: string;
  direction: "INBOUND" | "OUTBOUND";
  message_id: string;
  message_type: string;
  text: string | null;
  media_key: string | null;
  created_at: Date | string;
  /** The tracked status of a reply (null: not heard of yet, or inbound). */
  status_code?: number | null;
}

const iso = (d: Date | string) => new Date(d).toISOString();

/** When WhatsApp's window closes (null on RCS, or before any inbound message). */
export function windowExpiresAt(row: Pick<ConversationRow, "channel" | "last_inbound_at">): Date | null {
  if (row.channel !== "WHATSAPP" || row.last_inbound_at === null) return null;
  return new Date(new Date(row.last_inbound_at).getTime() + SERVICE_WINDOW_MS);
}

/** Whether a reply may be sent now: RCS always; WhatsApp while the window is open. */
export function canReply(row: Pick<ConversationRow, "channel" | "last_inbound_at">, now = Date.now()): boolean {
  if (row.channel === "RCS") return true;
  const until = windowExpiresAt(row);
  return until !== null && now < until.getTime();
}

export function toConversationOut(row: ConversationRow, now = Date.now()): ConversationOut {
  const until = windowExpiresAt(row);
  return {
    chatId: row.id,
    channel: row.channel,
    contactNumber: row.contact_number,
    senderId: row.sender_id,
    status: row.status,
    lastMessageAt: iso(row.last_message_at),
    lastMessagePreview: row.last_message_preview,
    unreadCount: Number(row.unread_count),
    canReply: canReply(row, now),
    serviceWindowExpiresAt: until ? until.toISOString() : null,
    createdAt: iso(row.created_at),
  };
}

export function toThreadMessageOut(row: MessageRow): ThreadMessageOut {
  return {
    id: row.message_id,
    direction: row.direction,
    messageType: row.message_type,
    text: row.text,
    mediaKey: row.media_key,
    deliveryStatus: row.direction === "OUTBOUND" ? statusByCode(row.status_code == null ? 0 : Number(row.status_code)).name : null,
    createdAt: iso(row.created_at),
  };
}

/** The preview of a message's text (null without text). */
export const previewOf = (text: string | null | undefined): string | null => (text ? [...text].slice(0, PREVIEW_LENGTH).join("") : null);
