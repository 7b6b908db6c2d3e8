/** ajv schemas of the live view (Server-Sent Events): opening a stream and the gateway's reads of events. */
import type { JSONSchemaType } from "ajv";
import type { SchemaOf } from "../../lib/http/schema-type";
import type { EventsSinceIn } from "./inbox.contract";

export type { EventsSinceIn, EventsSinceOut, EventStreamStart, LiveEvent } from "./inbox.contract";

/** Largest id a stream may resume from (ids are bigserial; JavaScript numbers are exact below 2^53). */
export const LAST_EVENT_ID_PATTERN = "^[0-9]{1,15}$";

export interface AccountEventsIn {
  lastEventId?: string;
}
/** Where a stream resumes, from the query (clients that cannot set headers): absent or a string, never null (SchemaOf, unlike JSONSchemaType). */
const lastEventId = {
  type: "string",
  pattern: LAST_EVENT_ID_PATTERN,
  description:
    "Resume after this event id (1-15 digits, else 400), as the `Last-Event-ID` header does (for clients that cannot set headers). The header wins when both are given.",
} satisfies SchemaOf<string>;

export const accountEventsIn = {
  $id: "AccountEventsIn",
  type: "object",
  additionalProperties: false,
  properties: { lastEventId },
} satisfies SchemaOf<AccountEventsIn>;

export interface ConversationEventsIn {
  chatId: string;
  lastEventId?: string;
}
export const conversationEventsIn = {
  $id: "ConversationEventsIn",
  type: "object",
  additionalProperties: false,
  required: ["chatId"],
  properties: {
    chatId: { type: "string", minLength: 1, maxLength: 100 },
    lastEventId,
  },
} satisfies SchemaOf<ConversationEventsIn>;

/** What an event stream answers: `text/event-stream`, documented for OpenAPI. */
export const eventStreamOut = {
  type: "string",
  format: "binary",
  contentMediaType: "text/event-stream",
  description:
    "Server-Sent Events, one per change: `id` (resume with `Last-Event-ID`), `event` (message.created, message.status, conversation.read, conversation.archived, conversation.unarchived, conversation.windowClosed) and `data` (one line of JSON with `chatId`). A comment line (`: heartbeat`) comes every `SSE_HEARTBEAT_MS`, so proxies keep the stream open.",
  examples: [
    'id: 42\nevent: message.created\ndata: {"chatId": "6f1c0e6a-5d0b-4d1e-9a43-2b4c4f0e9d11", "id": "1c0e6a5d-0b4d-4e9a-832b-4c4f0e9d116f", "direction": "INBOUND"}\n\n',
  ],
} satisfies SchemaOf<string>;

/**
 * ajv's JSONSchemaType, not SchemaOf: this schema lets `chatId` and `limit` be null (JSONSchemaType
 * demands `nullable: true` of an optional field), which EventsSinceIn (inbox.contract.ts) does not
 * say; the handler reads null as absent (`chatId` by its truth, `limit ?? 200`).
 */
export const eventsSinceIn: JSONSchemaType<EventsSinceIn> = {
  $id: "EventsSinceIn",
  type: "object",
  additionalProperties: false,
  required: ["after"],
  properties: {
    chatId: { type: "string", format: "uuid", nullable: true },
    after: { type: "integer", minimum: 0 },
    limit: { type: "integer", minimum: 1, maximum: 500, nullable: true },
  },
};
