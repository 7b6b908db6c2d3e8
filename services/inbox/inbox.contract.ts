/**
 * What other services may import from inbox: `inbox.campaignResponded` (the campaign statistics'
 * `responded`, for campaigns' GET /campaigns/stats), so that "wrote back" is defined once, here, by
 * the owner of inbound messages; the body of `inbox.ingest` (the ingress and the simulator call it); and
 * the live view's event types, the broadcast that wakes the streams, and what the gateway reads
 * events with.
 *
 * `inbox_events` ids are the SSE event ids, counted per account (an account's stream never shows
 * another account's activity) and read `id > Last-Event-ID`, so a reader must never pass an id
 * whose transaction has not ended yet. Only inbox writes them (inbox.events.ts says how); the
 * `message.status` events of its replies it writes from tracking's status feed (inbox.feed.ts). It
 * publishes no SQL.
 */
import type { IngestIn, InboundMessageIn } from "./inbox.schemas";
import { callerOf, type Action } from "../../lib/bus/calls";
import type { CampaignStatsIn } from "../tracking/tracking.contract";
import type { IngestOut as InboxIngestOut } from "./inbox.schemas";

export type { IngestIn as InboxIngestIn, InboundMessageIn };

/**
 * The INBOUND webhook events of inbound messages, a read-only view over the inbox's feed
 * `inbound_event_feed` (migration 0031) that the notifier follows: rows are `WebhookEvent`
 * (notifier.contract.ts) with `tx` and `id`, written in the transaction that stores the messages.
 * Kept two days, and a day is dropped only once the notifier has read all of it.
 */
export const INBOUND_EVENTS_VIEW = "inbound_webhook_events";

/** How far the inbox has followed each feed (tracking's status feed): `feed`, `tx`, `id` (a read-only view, migration 0031). */
export const INBOX_FEED_POSITIONS_VIEW = "inbox_feed_positions";

/** What a live-view event tells. `data` is the message (contract "Conversation" messages) or the conversation. */
export type InboxEventType =
  "message.created" | "message.status" | "conversation.read" | "conversation.archived" | "conversation.unarchived" | "conversation.windowClosed";

export const INBOX_EVENT_TYPES: readonly InboxEventType[] = [
  "message.created",
  "message.status",
  "conversation.read",
  "conversation.archived",
  "conversation.unarchived",
  "conversation.windowClosed",
];

/** Where a stream starts: after `after` (its Last-Event-ID, or the newest event when it has none); `head` is the newest event id now. */
export interface EventStreamStart {
  $eventStream: { companyId: string; chatId: string | null; after: number; head: number };
}

/** What `inbox.eventsSince` takes (the gateway's read of events; the account is the call's meta.companyId). */
export interface EventsSinceIn {
  chatId?: string;
  after: number;
  limit?: number;
}
export interface LiveEvent {
  id: number;
  type: string;
  /** The event's data as one line of JSON text (with `chatId`), written to the stream as it is. */
  data: string;
  chatId: string;
}

/**
 * A page of an account's events after `after`, in id order. `next`: where the next read starts;
 * without `more` it is past every event of the account committed when the page was read (a stream
 * that wrote the page has seen the account up to there, whether or not the events were its chat's).
 */
export interface EventsSinceOut {
  events: LiveEvent[];
  next: number;
  more: boolean;
}

/** The broadcast that wakes the streams of these accounts after `inbox_events` rows were committed. */
export const INBOX_EVENTS_WRITTEN = "inbox.eventsWritten";
export interface InboxEventsWritten {
  companyIds: string[];
}

/** What other services call of inbox (lib/bus/calls.ts). */
export interface InboxActions {
  "inbox.ingest": Action<IngestIn, InboxIngestOut>;
  "inbox.eventsSince": Action<EventsSinceIn, EventsSinceOut>;
  "inbox.campaignResponded": Action<CampaignStatsIn, { responded: number }>;
}
export const callInbox = callerOf<InboxActions>();
