/**
 * inbox: two-way conversations on RCS and WhatsApp (contract section 4 "Conversation"): inbound
 * messages from end users (inbox.ingest.ts: the only writer of inbound messages, reached through
 * tracking's internal ingress and the simulator; concurrent calls share transactions), conversations, threads, read marks, archive and
 * unarchive (inbox.conversations.ts), replies through the upstream adapter (inbox.replies.ts), and
 * the live view (Server-Sent Events fed from `inbox_events`, inbox.events.ts and inbox.live.ts).
 */
import type { Context, Service, ServiceSchema } from "moleculer";
import { heavyGateOf, withHeavyRead, type HeavyGate } from "../../lib/db/heavy";
import type { Sequelize } from "sequelize";
import type { ApiServiceSettings } from "../../lib/http/api";
import type { Deps } from "../../lib/deps";
import type { GroupCommitter } from "../../lib/db/group-commit";
import { addNodeRegistry } from "../../lib/observability/http-metrics";
import { trackFeedLag } from "../../lib/observability/feed-metrics";
import { createUpstream, type OutboundMessage, type Upstream } from "../../lib/http/upstream";
import { conversationActions } from "./inbox.conversations";
import { createIngestCommitter, ingestActions } from "./inbox.ingest";
import { InboxLiveMixin } from "./inbox.live";
import { InboxMetrics } from "./inbox.metrics";
import { replyActions, replyMethods } from "./inbox.replies";
import { Loops } from "../../lib/jobs/jobs";
import type { IngestIn, IngestOut } from "./inbox.schemas";
import { callSimulator } from "../simulator/simulator.contract";
import { callTracking, campaignStatsIn, type CampaignStatsIn } from "../tracking/tracking.contract";
import { campaignResponded } from "./inbox.stats";
import { INBOUND_POLL_MS, inboundFollower } from "./inbox.inbound";
import type { FeedLoop } from "../../lib/jobs/follow";
import { INBOUND_FEED_VIEW, INBOUND_FEED_WRITTEN, STATUS_FEED_VIEW } from "../tracking/tracking.contract";
import { INBOX_FEED_POSITIONS_VIEW } from "./inbox.contract";

/** How often an inbox node releases the media of replies that became final. */
const REPLY_MEDIA_LOOP_MS = 30_000;

interface InboxVars {
  loops: Loops;
  releaseReplyMedia(): Promise<number>;
  sequelize: Sequelize;
  heavyGate: HeavyGate;
  ingestCommitter: GroupCommitter<IngestIn, IngestOut>;
  upstream: Upstream;
  metrics: InboxMetrics;
  inbound: FeedLoop;
}
type InboxThis = Service<ApiServiceSettings> & InboxVars;

export function createInboxService(deps: Deps): ServiceSchema<ApiServiceSettings, Record<string, never>, InboxVars> {
  const { config, db } = deps;
  return {
    name: "inbox",
    mixins: [InboxLiveMixin(deps) as ServiceSchema],
    settings: { rest: "/" },
    actions: {
      ...ingestActions,
      ...conversationActions,
      ...replyActions,

      /** The campaign statistics' `responded` (GET /campaigns/stats): a heavy read, under this node's slots for the account. */
      campaignResponded: {
        visibility: "public",
        params: campaignStatsIn,
        async handler(this: InboxThis, ctx: Context<CampaignStatsIn>): Promise<{ responded: number }> {
          const responded = await withHeavyRead(this.sequelize, this.heavyGate, ctx, (exec) => campaignResponded(exec, ctx.params), ctx.params.companyId);
          return { responded };
        },
      },
    },
    methods: { ...replyMethods },
    events: {
      /** Tracking committed inbound messages to its inbound feed: follow it now. */
      [INBOUND_FEED_WRITTEN](this: InboxThis) {
        this.inbound.wake();
      },
    },
    created(this: InboxThis) {
      this.sequelize = db.sequelize;
      this.heavyGate = heavyGateOf(db, config);
      this.metrics = new InboxMetrics();
      this.ingestCommitter = createIngestCommitter(this);
      addNodeRegistry(this.broker, this.metrics.registry);
      trackFeedLag(this.broker, this.sequelize, "inbox", [
        { feed: STATUS_FEED_VIEW, positions: INBOX_FEED_POSITIONS_VIEW },
        { feed: INBOUND_FEED_VIEW, positions: INBOX_FEED_POSITIONS_VIEW },
      ]);
      this.inbound = inboundFollower({ sequelize: this.sequelize, broker: this.broker, metrics: this.metrics, logger: this.logger });
      this.upstream = createUpstream(
        config,
        (messages: OutboundMessage[]) => callSimulator(this.broker, "simulator.send", { messages }),
        (registrations) => callTracking(this.broker, "tracking.ingest", { path: "messages", body: registrations }),
      );
    },
    started(this: InboxThis) {
      this.loops = new Loops(this.logger);
      this.loops.every(REPLY_MEDIA_LOOP_MS, "reply media release", () => this.releaseReplyMedia(), { firstAfterMs: 5000 });
      this.inbound.start(INBOUND_POLL_MS);
    },
    async stopped(this: InboxThis) {
      this.loops?.stop();
      await this.inbound?.close();
      await this.upstream?.close();
    },
  };
}
