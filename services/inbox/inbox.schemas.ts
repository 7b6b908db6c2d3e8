/**
 * The inbox on the wire (contract section 4 "Conversation"): conversations, their messages, replies,
 * and `inbox.ingest`, the internal action through which inbound messages arrive (from tracking's
 * ingress and from the simulator's end users).
 */
import { STATUS_NAMES, type DeliveryStatusName } from "../../lib/messaging/channels";
import { pageSchema, pagingProperties, type Page, type PageIn } from "../../lib/http/paging";
import type { SchemaOf } from "../../lib/http/schema-type";
import { UUID_PATTERN } from "../../lib/http/validator";
import { MESSAGE_KEYWORD } from "../../lib/http/schema-messages";

export const INBOX_CHANNELS = ["RCS", "WHATSAPP"] as const;
export type InboxChannel = (typeof INBOX_CHANNELS)[number];

/** The longest reply text per channel, in characters (code points), as campaigns count them. */
export const MAX_REPLY_TEXT: Record<InboxChannel, number> = { RCS: 3072, WHATSAPP: 4096 };
/** An inbound or reply batch given to `inbox.ingest` holds at most this many messages (one transaction). */
export const MAX_INGEST_MESSAGES = 1000;

const E164 = "^\\+[1-9][0-9]{6,14}$";
const dateTime = { type: "string", format: "date-time" } satisfies SchemaOf<string>;
const chatId = {
  type: "string",
  pattern: UUID_PATTERN,
  description: "The conversation's id.",
  examples: ["0b8f7c1e-2d3a-4b5c-9d6e-7f8a9b0c1d2e"],
} satisfies SchemaOf<string>;
const channel = { type: "string", enum: [...INBOX_CHANNELS] } satisfies SchemaOf<InboxChannel>;

export interface ConversationOut {
  chatId: string;
  channel: InboxChannel;
  contactNumber: string;
  senderId: string;
  status: "ACTIVE" | "ARCHIVED";
  lastMessageAt: string;
  lastMessagePreview: string | null;
  unreadCount: number;
  canReply: boolean;
  serviceWindowExpiresAt: string | null;
  createdAt: string;
}

export const conversationOut = {
  $id: "Conversation",
  type: "object",
  additionalProperties: false,
  required: [
    "chatId",
    "channel",
    "contactNumber",
    "senderId",
    "status",
    "lastMessageAt",
    "lastMessagePreview",
    "unreadCount",
    "canReply",
    "serviceWindowExpiresAt",
    "createdAt",
  ],
  properties: {
    chatId,
    channel,
    contactNumber: { type: "string", description: "The end user's number (E.164).", examples: ["+351912345678"] },
    senderId: { type: "string", description: "Our sender: the WhatsApp number, or the RCS agent id.", examples: ["+351210000000"] },
    status: { type: "string", enum: ["ACTIVE", "ARCHIVED"] },
    lastMessageAt: dateTime,
    lastMessagePreview: {
      type: ["string", "null"],
      description: "The start of the latest message's text (140 characters); `[<messageType>]` for media without text.",
    },
    unreadCount: { type: "integer", minimum: 0, description: "Inbound messages after the last one marked read." },
    canReply: { type: "boolean", description: "RCS: always. WhatsApp: while the 24-hour service window is open." },
    serviceWindowExpiresAt: {
      type: ["string", "null"],
      format: "date-time",
      description: "WhatsApp: 24 hours after the last inbound message (null before any); RCS: null (no window).",
    },
    createdAt: dateTime,
  },
} satisfies SchemaOf<ConversationOut>;

export interface ThreadMessageOut {
  id: string;
  direction: "INBOUND" | "OUTBOUND";
  messageType: string;
  text: string | null;
  mediaKey: string | null;
  deliveryStatus: DeliveryStatusName | null;
  createdAt: string;
}

export const threadMessageOut = {
  $id: "ConversationMessage",
  type: "object",
  additionalProperties: false,
  required: ["id", "direction", "messageType", "text", "mediaKey", "deliveryStatus", "createdAt"],
  properties: {
    id: {
      type: "string",
      description: "INBOUND: the upstream's messageId. OUTBOUND (a reply): its customerMessageId, as `GET /messages/status` and the history know it.",
    },
    direction: { type: "string", enum: ["INBOUND", "OUTBOUND"] },
    messageType: { type: "string", examples: ["TEXT", "MEDIA"] },
    text: { type: ["string", "null"] },
    mediaKey: { type: ["string", "null"] },
    deliveryStatus: {
      type: ["string", "null"],
      enum: [...STATUS_NAMES, null],
      description: "OUTBOUND: the reply's current delivery status (UNKNOWN while in flight). INBOUND: null.",
    },
    createdAt: { ...dateTime, description: "INBOUND: when it was received; OUTBOUND: when the reply was accepted." },
  },
} satisfies SchemaOf<ThreadMessageOut>;

export const conversationPage = pageSchema("ConversationPage", conversationOut) satisfies SchemaOf<Page<ConversationOut>>;
export const threadPage = pageSchema("ConversationMessagePage", threadMessageOut) satisfies SchemaOf<Page<ThreadMessageOut>>;

export interface ListConversationsIn extends PageIn<"lastMessageAt"> {
  status?: "ACTIVE" | "ARCHIVED" | "ALL";
  channel?: InboxChannel;
  search?: string;
}

export const listConversationsIn = {
  $id: "ListConversationsIn",
  type: "object",
  additionalProperties: false,
  properties: {
    ...pagingProperties(["lastMessageAt"], "lastMessageAt", "desc"),
    status: { type: "string", enum: ["ACTIVE", "ARCHIVED", "ALL"], default: "ACTIVE", description: "ACTIVE (default), ARCHIVED or ALL." },
    channel,
    search: { type: "string", minLength: 1, maxLength: 32, pattern: "^\\+?[0-9]+$", description: "Digits of the end user's number (a part is enough)." },
  },
} satisfies SchemaOf<ListConversationsIn>;

export interface ChatIdIn {
  chatId: string;
}
export const chatIdIn = {
  $id: "ChatIdIn",
  type: "object",
  additionalProperties: false,
  required: ["chatId"],
  properties: { chatId },
} satisfies SchemaOf<ChatIdIn>;

export interface ThreadIn extends PageIn<"createdAt"> {
  chatId: string;
}
export const threadIn = {
  $id: "ConversationThreadIn",
  type: "object",
  additionalProperties: false,
  required: ["chatId"],
  properties: { chatId, ...pagingProperties(["createdAt"], "createdAt", "asc") },
} satisfies SchemaOf<ThreadIn>;

export interface ReadIn {
  chatId: string;
  upToMessageId: string;
}
export const readIn = {
  $id: "ConversationReadIn",
  type: "object",
  additionalProperties: false,
  required: ["chatId", "upToMessageId"],
  properties: {
    chatId,
    upToMessageId: {
      type: "string",
      minLength: 1,
      maxLength: 200,
      description: "The id of a message of the conversation: it and every inbound message before it are read.",
    },
  },
} satisfies SchemaOf<ReadIn>;

export interface ReplyIn {
  chatId: string;
  text?: string;
  mediaId?: string;
}
export const replyIn = {
  $id: "ConversationReplyIn",
  type: "object",
  additionalProperties: false,
  required: ["chatId"],
  examples: [{ text: "Thanks for writing! Your order ships tomorrow." }],
  properties: {
    chatId,
    text: {
      type: "string",
      minLength: 1,
      maxLength: Math.max(...Object.values(MAX_REPLY_TEXT)) * 2,
      description: `Exactly one of text and mediaId. At most ${MAX_REPLY_TEXT.RCS} characters on RCS, ${MAX_REPLY_TEXT.WHATSAPP} on WhatsApp.`,
    },
    mediaId: {
      type: "string",
      pattern: UUID_PATTERN,
      description: "Exactly one of text and mediaId: a media of the account (`POST /media`).",
      examples: ["5f0c6a1e-3b7d-4c2a-9e51-8d4f2b6a7c10"],
    },
  },
  // Exactly one of them: the document says it as the service checks it.
  oneOf: [{ required: ["text"] }, { required: ["mediaId"] }],
  [MESSAGE_KEYWORD]: "give exactly one of text and mediaId",
} satisfies SchemaOf<ReplyIn>;

/** One inbound message as the internal ingress takes it (contract section 6). */
export interface InboundMessageIn {
  companyId: string;
  messageId: string;
  source: string;
  destination: string;
  receivedDate: string;
  messageType: string;
  text?: string;
  mediaKey?: string;
}

export interface IngestIn {
  channel: InboxChannel;
  items: InboundMessageIn[];
}

/** `inbox.ingest`: one channel's inbound messages, validated as the ingress validates them. */
export const ingestIn = {
  $id: "InboxIngestIn",
  type: "object",
  additionalProperties: false,
  required: ["channel", "items"],
  properties: {
    channel,
    items: {
      type: "array",
      minItems: 1,
      maxItems: MAX_INGEST_MESSAGES,
      items: {
        type: "object",
        additionalProperties: false,
        required: ["companyId", "messageId", "source", "destination", "receivedDate", "messageType"],
        properties: {
          companyId: { type: "string", minLength: 1, maxLength: 100, pattern: "^[^\\u0000-\\u001f]+$" },
          messageId: { type: "string", minLength: 1, maxLength: 200, pattern: "^[^\\u0000-\\u001f]+$" },
          source: { type: "string", pattern: E164 },
          destination: { type: "string", minLength: 1, maxLength: 200 },
          receivedDate: { type: "string", format: "date-time", maxLength: 40 },
          messageType: { type: "string", pattern: "^[A-Z][A-Z_]{0,31}$" },
          text: { type: "string", maxLength: 10000 },
          mediaKey: { type: "string", minLength: 1, maxLength: 500 },
        },
      },
    },
  },
} satisfies SchemaOf<IngestIn>;

export interface IngestOut {
  /** Messages stored now (a repeated messageId is not counted again). */
  created: number;
}
