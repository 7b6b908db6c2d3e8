/**
 * The live view's actions (issue 18 item 5), spread into the inbox service as a mixin: the two
 * Server-Sent Events routes, which check the key's account (and the conversation) and say where the
 * stream starts, while the gateway holds the stream itself (gateway.live.ts); `inbox.eventsSince`,
 * which the gateway reads events with; and the background work: one `conversation.windowClosed` event
 * per closed WhatsApp window, the `message.status` events of replies from tracking's status feed
 * (inbox.feed.ts), and the retention of `inbox_events`.
 */
import type { Context, Service, ServiceSchema } from "moleculer";
import { apiAction, type AuthMeta } from "../../lib/http/api";
import type { Deps } from "../../lib/deps";
import { ApiError } from "../../lib/errors";
import { Loops } from "../../lib/jobs/jobs";
import { FeedLoop } from "../../lib/jobs/follow";
import { STATUS_FEED_WRITTEN } from "../tracking/tracking.contract";
import { FEED_BATCH, FEED_POLL_MS, followStatusFeed } from "./inbox.feed";
import { announceInboxEvents } from "./inbox.events";
import { accountHorizon, closeWindows, conversationExists, eventsSince, purgeEventFeed, purgeEvents } from "./inbox.live.queries";
import { ensureDays } from "../../lib/db/partitions";
import {
  accountEventsIn,
  conversationEventsIn,
  eventsSinceIn,
  eventStreamOut,
  LAST_EVENT_ID_PATTERN,
  type AccountEventsIn,
  type ConversationEventsIn,
  type EventsSinceIn,
  type EventsSinceOut,
  type EventStreamStart,
} from "./inbox.live.schemas";

/** How often an inbox node looks for closed windows, and how many it closes per transaction. */
const WINDOW_LOOP_MS = 30_000;
const WINDOW_BATCH = 500;
/** Retention runs: every 10 minutes, 5000 rows a statement, at most 20 statements a run. */
const PURGE_LOOP_MS = 600_000;

const LAST_EVENT_ID = new RegExp(LAST_EVENT_ID_PATTERN);

const resumeHeader = {
  "last-event-id": {
    description:
      "Resume after this event id (sent by EventSource clients when they reconnect): events written meanwhile come first. 1-15 digits (an id this API sent), else 400.",
    schema: { type: "string", pattern: LAST_EVENT_ID_PATTERN },
  },
};

interface LiveVars {
  liveLoops: Loops;
  statusFeed: FeedLoop;
  closeWindows(): Promise<number>;
  purgeEvents(): Promise<string[]>;
}
type LiveThis = Service & LiveVars;

/** Where the stream starts: after the Last-Event-ID (header, else query), or after the newest event now. */
async function streamStart(deps: Deps, ctx: Context<{ lastEventId?: string }, AuthMeta>, chatId: string | null): Promise<EventStreamStart> {
  const { sequelize } = deps.db;
  const companyId = ctx.meta.companyId;
  // Ids are compared as text by the gateway's streams, which see events' lower-case ids.
  if (chatId !== null) chatId = chatId.toLowerCase();
  if (chatId !== null && !(await conversationExists(sequelize, companyId, chatId))) {
    throw new ApiError("CONVERSATION_NOT_FOUND", `No conversation ${chatId} in this account.`);
  }
  const header = ctx.meta.$requestHeaders?.["last-event-id"]?.trim();
  if (header !== undefined && header !== "" && !LAST_EVENT_ID.test(header)) {
    throw new ApiError("INVALID_HEADER", "Last-Event-ID must be an event id this API sent (digits).", {
      errors: [{ path: "Last-Event-ID", message: "must be 1-15 digits" }],
    });
  }
  const resume = header ? header : ctx.params.lastEventId;
  const head = await accountHorizon(sequelize, companyId);
  // An id past the newest (from another installation, say) starts now; one older than retention reads from the oldest kept.
  const after = resume === undefined ? head : Math.min(Number(resume), head);
  return { $eventStream: { companyId, chatId, after, head } };
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function InboxLiveMixin(deps: Deps): Partial<ServiceSchema<any, any, LiveVars>> {
  const { config, db } = deps;
  const { sequelize } = db;
  return {
    events: {
      /** Tracking committed status changes: follow them now (any node may; one at a time). */
      [STATUS_FEED_WRITTEN](this: LiveThis) {
        this.statusFeed?.wake();
      },
    },
    actions: {
      /** Opens the account's live inbox: every conversation's events, as Server-Sent Events (the gateway holds the stream). */
      accountEvents: apiAction({
        rest: "GET /inbox/events",
        operation: "INBOX",
        eventStream: true,
        tag: "inbox",
        summary: "Live inbox of the account (Server-Sent Events)",
        description:
          "A `text/event-stream` of every change in the account's inbox: new messages, reply status changes, reads, archive and unarchive, closed WhatsApp windows. Without `Last-Event-ID` it starts now; with it, events written since that id come first (kept for `INBOX_EVENT_RETENTION_HOURS`). Past the open streams an account or a gateway may hold: 429 or 503.",
        params: accountEventsIn,
        requestHeaders: resumeHeader,
        responses: { 200: eventStreamOut },
        errors: [503],
        handler(ctx: Context<AccountEventsIn, AuthMeta>): Promise<EventStreamStart> {
          return streamStart(deps, ctx, null);
        },
      }),

      /** Opens one conversation's live view, as Server-Sent Events (the gateway holds the stream). */
      conversationEvents: apiAction({
        rest: "GET /inbox/conversations/:chatId/events",
        operation: "INBOX",
        eventStream: true,
        tag: "inbox",
        summary: "Live view of one conversation (Server-Sent Events)",
        description:
          "A `text/event-stream` of the conversation's changes (see `GET /inbox/events`). A conversation missing or of another account is a 404 before the stream starts.",
        params: conversationEventsIn,
        requestHeaders: resumeHeader,
        responses: { 200: eventStreamOut },
        errors: [404, 503],
        handler(ctx: Context<ConversationEventsIn, AuthMeta>): Promise<EventStreamStart> {
          return streamStart(deps, ctx, ctx.params.chatId);
        },
      }),

      /** The caller's events after `after` (one conversation's with `chatId`), a bounded page in id order: what the gateway streams. */
      eventsSince: {
        visibility: "public",
        params: eventsSinceIn,
        handler(ctx: Context<EventsSinceIn, AuthMeta>): Promise<EventsSinceOut> {
          return eventsSince(sequelize, ctx.meta.companyId, {
            chatId: ctx.params.chatId,
            after: ctx.params.after,
            limit: ctx.params.limit ?? 200,
            keptHours: config.inboxEventRetentionHours,
          });
        },
      },
    },

    methods: {
      /** One round of window closing: batches until none is due; the streams of those accounts are woken. */
      async closeWindows(this: LiveThis): Promise<number> {
        let n = 0;
        for (let round = 0; round < 20; round++) {
          const events = await closeWindows(sequelize, WINDOW_BATCH);
          announceInboxEvents(this.broker, events);
          n += events.length;
          if (events.length < WINDOW_BATCH) break;
        }
        return n;
      },
      /** The days of events made a week ahead, and those wholly past INBOX_EVENT_RETENTION_HOURS dropped (migration 0025). */
      async purgeEvents(this: LiveThis): Promise<string[]> {
        await ensureDays(sequelize, "inbox_events");
        await ensureDays(sequelize, "inbound_event_feed");
        const days = await purgeEvents(sequelize, config.inboxEventRetentionHours);
        if (days.length > 0) this.logger.info({ days }, "old inbox events removed");
        const feed = await purgeEventFeed(sequelize);
        if (feed.length > 0) this.logger.info({ days: feed }, "old webhook event feed days dropped");
        return days;
      },
    },

    async started(this: LiveThis) {
      // Today's partition of the events before the first write (the days ahead, then from the retention loop).
      await Promise.all([ensureDays(sequelize, "inbox_events"), ensureDays(sequelize, "inbound_event_feed")]).catch((err: unknown) =>
        this.logger.warn({ err }, "could not make the days of the live-view events now; tried again by the retention loop"),
      );
      this.liveLoops = new Loops(this.logger);
      // The followers' loop (lib/jobs/follow.ts): wakes, the poll, again at once after a full batch.
      this.statusFeed = new FeedLoop("tracking's status feed", this.logger, async () => {
        const round = await followStatusFeed(sequelize);
        announceInboxEvents(
          this.broker,
          round.companies.map((companyId) => ({ companyId })),
        );
        // A peer's round, or rows held back by a transaction still running: look again soon (lib/jobs/follow.ts).
        return { waiting: round.busy || round.held, more: round.read === FEED_BATCH, progress: round.read > 0 };
      });
      this.statusFeed.start(FEED_POLL_MS);
      this.liveLoops.every(WINDOW_LOOP_MS, "inbox window closing", () => this.closeWindows(), { firstAfterMs: 1000 });
      this.liveLoops.every(PURGE_LOOP_MS, "inbox event retention", () => this.purgeEvents(), { firstAfterMs: 60_000 });
    },

    async stopped(this: LiveThis) {
      this.liveLoops?.stop();
      await this.statusFeed?.close();
    },
  };
}
