/**
 * tracking: messages and their delivery statuses (spec parts 2, 3 and 6; contract sections 4 and 6).
 * Upstreams report registrations, receipts, reads and inbound messages on the internal ingress
 * (tracking.ingress.ts; inbound messages are validated there and stored in tracking's inbound feed,
 * which the inbox follows and stores them from: tracking calls nothing of the inbox's; opt-out reports
 * go to `contacts.applyOptOuts`); partners poll statuses and page through their message history through the
 * gateway. Every event a status change produces is written to its webhook-event feed in the same
 * transaction (the notifier follows it).
 * Messages live in daily partitions made ahead hourly; retention (MESSAGE_RETENTION_DAYS) drops whole days.
 */
import type { Context, Service, ServiceSchema } from "moleculer";
import { apiAction, type ApiServiceSettings, type AuthMeta } from "../../lib/http/api";
import { CHANNELS, type Channel } from "../../lib/messaging/channels";
import type { Deps } from "../../lib/deps";
import { ApiError, badRequest } from "../../lib/errors";
import { heavyGateOf, withHeavyRead } from "../../lib/db/heavy";
import { Loops } from "../../lib/jobs/jobs";
import { FEED_POSITIONS_VIEW, OUTBOX_WRITTEN } from "../notifier/notifier.contract";
import { dayReadBy } from "../../lib/db/feeds";
import { IngressMixin, parseIngest, type OptOutItem } from "./tracking.ingress";
import type { OptOutChange } from "../contacts/contacts.contract";
import type { InboundItem, WriteItem } from "./tracking.fold";
import { GroupCommitter } from "../../lib/db/group-commit";
import { writeWithRetry } from "./tracking.committer";
import { checkHistoryRange, INBOUND_FEED_VIEW, INBOUND_FEED_WRITTEN, MESSAGE_EVENTS_VIEW, STATUS_FEED_VIEW, STATUS_FEED_WRITTEN } from "./tracking.contract";
import { INBOX_FEED_POSITIONS_VIEW } from "../inbox/inbox.contract";
import { CONTACTS_FEED_POSITIONS_VIEW } from "../contacts/contacts.contract";
import { purgeBefore } from "./tracking.days";
import { campaignStats } from "./tracking.stats";
import { campaignStatsIn, type CampaignStatsIn, type CampaignStatsOut } from "./tracking.stats.schemas";
import { dropDaysBefore, ensureDays } from "../../lib/db/partitions";
import { historyPage, statusesOf } from "./tracking.queries";
import { exportStatementIn, messageExportSelect, type ExportStatementIn } from "./tracking.export";
import {
  historyIn,
  historyOut,
  ingestIn,
  MAX_STATUS_IDS,
  messageStatusesOut,
  messageStatusOut,
  purgeIn,
  statusCodesIn,
  statusesIn,
  statusIn,
  type HistoryIn,
  type HistoryOut,
  type IngestIn,
  type IngestOut,
  type MessageStatusOut,
  type PurgeIn,
  type StatusCodesIn,
  type StatusCodesOut,
  type StatusesIn,
  type StatusIn,
} from "./tracking.schemas";
import type { IngestMetrics } from "./tracking.metrics";
import { applyKeywords, callContacts } from "../contacts/contacts.contract";

interface TrackingVars {
  committer: GroupCommitter<WriteItem[]>;
  ingestMetrics: IngestMetrics;
  ingestBody(path: string, body: unknown): Promise<IngestOut>;
  loops: Loops;
  purgeOld(): Promise<void>;
  ensureDays(): Promise<void>;
}
type TrackingThis = Service<ApiServiceSettings> & TrackingVars;

const PURGE_BATCH = 5000;
/** Moleculer's errors for a service no node serves, or that did not answer. */
const UNREACHABLE = new Set(["ServiceNotFoundError", "ServiceNotAvailableError", "RequestTimeoutError", "RequestRejectedError"]);
const PURGE_EVERY_MS = 3600_000;
/** `messages`' daily partitions exist from yesterday to this many days ahead (made at start, then hourly). */
const PARTITION_DAYS_AHEAD = 7;
/** The status feed's days are kept this long (its followers read it within seconds; a day's margin for one that was down). */
const FEED_KEEP_DAYS = 2;

export function createTrackingService(deps: Deps): ServiceSchema<ApiServiceSettings, Record<string, never>, TrackingVars> {
  const { config, db } = deps;
  const sequelize = db.sequelize;
  // History reads: this node's heavy-read slots, shared with every service of the process.
  const gate = heavyGateOf(db, config);
  const keyChannels = (meta: AuthMeta): Channel[] => CHANNELS.filter((c) => meta.operations.includes(c));

  return {
    name: "tracking",
    mixins: [IngressMixin(deps)],
    settings: { rest: "/" },

    actions: {
      /** Ingress for the REPL and other nodes: `{ path: "receipts/sms", body }`, as the HTTP ingress takes it; resolves once committed. */
      ingest: {
        visibility: "public",
        params: ingestIn,
        handler(this: TrackingThis, ctx: Context<IngestIn>): Promise<IngestOut> {
          return this.ingestBody(ctx.params.path, ctx.params.body);
        },
      },

      /** The status codes of messages another service sent for an account (inbox replies): what GET /messages/status would answer. */
      statusCodes: {
        visibility: "public",
        params: statusCodesIn,
        async handler(ctx: Context<StatusCodesIn>): Promise<StatusCodesOut> {
          const found = await statusesOf(sequelize, ctx.params.companyId, ctx.params.channel, ctx.params.ids);
          return { codes: found.map((s) => s.statusCode) };
        },
      },

      /** The SELECT of an account's message export (history or delivery reports) with the history filters: the exports service runs it inside a COPY. */
      exportStatement: {
        visibility: "public",
        params: exportStatementIn,
        handler(ctx: Context<ExportStatementIn>): { sql: string } {
          return { sql: messageExportSelect(ctx.params.type, ctx.params.companyId, ctx.params.filters) };
        },
      },

      /** The statistics of an account's campaign messages (GET /campaigns/stats): a heavy read, under this node's slots for the account. */
      campaignStats: {
        visibility: "public",
        params: campaignStatsIn,
        handler(ctx: Context<CampaignStatsIn>): Promise<CampaignStatsOut> {
          return withHeavyRead(sequelize, gate, ctx, (exec) => campaignStats(exec, ctx.params), ctx.params.companyId);
        },
      },

      /** The delivery status of one message. */
      status: apiAction({
        rest: "GET /messages/status/:customerMessageId",
        operation: "CHANNEL",
        summary: "Delivery status of one message",
        description: "An id this account never sent (on this channel) answers `UNKNOWN`, code 0. In flight: `ACCEPTED` on SMS, `UNKNOWN` on RCS and WhatsApp.",
        tag: "tracking",
        params: statusIn,
        responses: { 200: messageStatusOut },
        errors: [400],
        async handler(ctx: Context<StatusIn, AuthMeta>): Promise<MessageStatusOut> {
          const [status] = await statusesOf(sequelize, ctx.meta.companyId, ctx.params.channel, [ctx.params.customerMessageId]);
          return status!;
        },
      }),

      /** The delivery statuses of up to 1000 messages of one channel, in the order asked. */
      statuses: apiAction({
        rest: "GET /messages/status",
        operation: "CHANNEL",
        summary: "Delivery statuses of up to 1000 messages",
        description: `\`ids\`: comma-separated customer message ids of one channel, at most ${MAX_STATUS_IDS}. The answer has one entry per id as given, in order (a repeated id is answered again); ids never sent answer \`UNKNOWN\`, code 0.`,
        tag: "tracking",
        params: statusesIn,
        responses: { 200: messageStatusesOut },
        errors: [400],
        async handler(ctx: Context<StatusesIn, AuthMeta>): Promise<{ data: MessageStatusOut[] }> {
          const ids = ctx.params.ids.split(",").map((s) => s.trim());
          if (ids.length > MAX_STATUS_IDS)
            throw badRequest(`At most ${MAX_STATUS_IDS} ids per call; this one has ${ids.length}.`, [
              { path: "ids", message: `must name at most ${MAX_STATUS_IDS} ids` },
            ]);
          const bad = ids.findIndex((id) => id.length === 0 || id.length > 200);
          if (bad >= 0) throw badRequest("Every id must be 1-200 characters.", [{ path: `ids[${bad}]`, message: "must be 1-200 characters" }]);
          return { data: await statusesOf(sequelize, ctx.meta.companyId, ctx.params.channel, ids) };
        },
      }),

      /** The account's sent messages, newest first, on the key's channels. */
      history: apiAction({
        rest: "GET /messages/history",
        operation: "CHANNEL",
        summary: "Message history",
        description:
          "Sent messages with their status, text and campaign, newest first (by `sentAt`), in pages linked by `nextCursor`. Only the key's channels are listed; a `channel` filter outside them is a 401. A heavy read: an account runs at most HEAVY_OPS_PER_ACCOUNT of them at once per node, the rest wait briefly in the account's own queue, then 429 with Retry-After.",
        tag: "history",
        params: historyIn,
        responses: { 200: historyOut },
        errors: [400, 429],
        async handler(ctx: Context<HistoryIn, AuthMeta>): Promise<HistoryOut> {
          checkHistoryRange(ctx.params);
          // A heavy read: the account's share of this node's slots (lib/db/heavy.ts), under the class's statement limit.
          return withHeavyRead(sequelize, gate, ctx, (exec) =>
            historyPage(exec, ctx.meta.companyId, keyChannels(ctx.meta), ctx.params, { prepared: !gate.limits.oneSession }),
          );
        },
      }),

      /** Retention: removes the days of messages older than MESSAGE_RETENTION_DAYS (or `olderThanDays`): their keys in bounded batches, then each day's partition. */
      purge: {
        visibility: "public",
        params: purgeIn,
        async handler(ctx: Context<PurgeIn>) {
          const days = ctx.params.olderThanDays ?? config.messageRetentionDays;
          return purgeBefore(sequelize, new Date(Date.now() - days * 86400_000), ctx.params.batchSize ?? PURGE_BATCH);
        },
      },
    },

    methods: {
      /** Validates a posted body (object or array) for one ingress path and resolves once it is committed. */
      async ingestBody(this: TrackingThis, path: string, body: unknown): Promise<IngestOut> {
        const parsed = parseIngest(path, body);
        if (path === "opt-outs") {
          const reports = (parsed as OptOutItem[]).map((i): OptOutChange => ({ ...i.report, source: "UPSTREAM" }));
          await callContacts(this.broker, "contacts.applyOptOuts", { items: reports }).catch((err: unknown) => {
            // No contacts node (yet, or any more), or none answered: the upstream tries again later.
            if (UNREACHABLE.has((err as { name?: string })?.name ?? ""))
              throw new ApiError("SERVICE_UNAVAILABLE", "Opt-outs cannot be stored right now (no contacts node answers); try again.", { retryAfter: 5 });
            throw err;
          });
          this.ingestMetrics.stored(path, reports.length);
          return { accepted: reports.length };
        }
        // Message items, or inbound messages (stored in the inbound feed the inbox follows; their
        // opt-out keywords recorded at contacts first: 503 and nothing stored when it cannot be reached).
        const items = parsed as WriteItem[];
        if (path.startsWith("inbound/")) {
          const inbound = items as InboundItem[];
          await applyKeywords(
            this.broker,
            inbound[0]!.channel,
            inbound.map((i) => i.inbound),
          );
        }
        await this.committer.submit(items);
        this.ingestMetrics.stored(path, items.length);
        return { accepted: items.length };
      },

      /** The days of `messages` (and of `inbox_events`, which its ingest writes) from yesterday to a week ahead (idempotent, any node may run it). */
      async ensureDays(this: TrackingThis) {
        const made = await ensureDays(sequelize, "messages", PARTITION_DAYS_AHEAD);
        const feed = await ensureDays(sequelize, "message_status_feed", PARTITION_DAYS_AHEAD);
        const events = await ensureDays(sequelize, "message_event_feed", PARTITION_DAYS_AHEAD);
        const inbound = await ensureDays(sequelize, "inbound_message_feed", PARTITION_DAYS_AHEAD);
        if (made + feed + events + inbound > 0) this.logger.info({ made, feed, events, inbound }, "partitions made");
      },

      /** One retention run (its failure is logged by the loop that runs it). */
      async purgeOld(this: TrackingThis) {
        const out = await this.actions.purge({});
        if (out.messages > 0 || out.days.length > 0) this.logger.info(out, "old messages removed");
        // The status feed's days once both followers, the inbox and contacts, have read them whole (either down keeps them).
        const feed = await dropDaysBefore(
          sequelize,
          "message_status_feed",
          new Date(Date.now() - FEED_KEEP_DAYS * 86400_000),
          async (day) =>
            (await dayReadBy(sequelize, day, INBOX_FEED_POSITIONS_VIEW, STATUS_FEED_VIEW)) &&
            (await dayReadBy(sequelize, day, CONTACTS_FEED_POSITIONS_VIEW, STATUS_FEED_VIEW)),
        );
        if (feed.length > 0) this.logger.info({ days: feed }, "old status feed days dropped");
        // The webhook events' days once the notifier has read them whole (a notifier down keeps them).
        const events = await dropDaysBefore(sequelize, "message_event_feed", new Date(Date.now() - FEED_KEEP_DAYS * 86400_000), (day) =>
          dayReadBy(sequelize, day, FEED_POSITIONS_VIEW, MESSAGE_EVENTS_VIEW),
        );
        if (events.length > 0) this.logger.info({ days: events }, "old webhook event feed days dropped");
        // The inbound feed's days once the inbox has read them whole.
        const inbound = await dropDaysBefore(sequelize, "inbound_message_feed", new Date(Date.now() - FEED_KEEP_DAYS * 86400_000), (day) =>
          dayReadBy(sequelize, day, INBOX_FEED_POSITIONS_VIEW, INBOUND_FEED_VIEW),
        );
        if (inbound.length > 0) this.logger.info({ days: inbound }, "old inbound feed days dropped");
      },
    },

    created(this: TrackingThis) {
      // Each request's items are one submission (atomic); a group writes their concatenation.
      this.committer = new GroupCommitter<WriteItem[]>(
        async (submissions) => {
          const items = submissions.length === 1 ? submissions[0]! : submissions.flat();
          const started = process.hrtime.bigint();
          const effects = await writeWithRetry(sequelize, items);
          this.ingestMetrics.transaction(items.length, Number(process.hrtime.bigint() - started) / 1e9);
          if (effects.events > 0) {
            // Wakes the notifiers for the events just committed (rows: a lost broadcast only waits for their poll).
            Promise.resolve(this.broker.broadcast(OUTBOX_WRITTEN)).catch((err: unknown) => this.logger.warn({ err }, "could not wake the notifiers"));
          }
          if (effects.inbound > 0) {
            // Wakes the inbox, which follows the inbound feed (a lost broadcast only waits for its poll).
            Promise.resolve(this.broker.broadcast(INBOUND_FEED_WRITTEN)).catch((err: unknown) => this.logger.warn({ err }, "could not wake the inbox"));
          }
          if (effects.statusChanges > 0) {
            // Wakes the status feed's followers (the inbox, contacts): the rows are there, a lost broadcast only waits for their poll.
            Promise.resolve(this.broker.broadcast(STATUS_FEED_WRITTEN)).catch((err: unknown) =>
              this.logger.warn({ err }, "could not wake the status feed's followers"),
            );
          }
          return submissions.map(() => undefined);
        },
        { items: (s) => s.length, maxItems: 2000 },
      );
    },

    async started(this: TrackingThis) {
      // The days ahead before the first write (a week was made before, so a lock that times out only waits for the hourly run).
      await this.ensureDays().catch((err: unknown) => this.logger.warn({ err }, "could not make the days of messages now; tried again hourly"));
      this.loops = new Loops(this.logger);
      this.loops.every(PURGE_EVERY_MS, "message partitions", () => this.ensureDays(), { firstAfterMs: PURGE_EVERY_MS });
      // Retention first a minute after start, then hourly; each run deletes keys in short batches of its own, then drops whole days.
      this.loops.every(PURGE_EVERY_MS, "message retention", () => this.purgeOld(), { firstAfterMs: 60_000 });
    },

    stopped(this: TrackingThis) {
      this.loops?.stop();
    },
  };
}
