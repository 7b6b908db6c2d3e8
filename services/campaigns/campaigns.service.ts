/**
 * campaigns: bulk campaigns (spec parts 1, 3 and 4; contract section 4, Campaign): a DRAFT is
 * created, checked, previewed, confirmed (its audience snapshotted in one statement) and sent by
 * any campaigns node through the upstream adapter (lib/http/upstream.ts: the simulator service, or an
 * HTTP upstream), exactly once per contact even across crashes (campaigns.runner.ts). Statistics
 * come from the tracked statuses of the campaign's messages.
 */
import type { Context, Service, ServiceSchema } from "moleculer";
import { apiAction, type ApiServiceSettings, type AuthMeta } from "../../lib/http/api";
import type { Deps } from "../../lib/deps";
import { ApiError } from "../../lib/errors";
import { addNodeRegistry } from "../../lib/observability/http-metrics";
import { Loops } from "../../lib/jobs/jobs";
import { OPS_ROWS, type OpsTable } from "../../lib/observability/ops";
import { heavyGateOf, withHeavyRead } from "../../lib/db/heavy";
import { createUpstream, type OutboundMessage } from "../../lib/http/upstream";
import { checkHistoryRange } from "../tracking/tracking.contract";
import { campaignActions, CONFIRM_TIMEOUT_MS, type CampaignsThis } from "./campaigns.actions";
import { CampaignMetrics } from "./campaigns.metrics";
import { findCampaign, markMediaReleased, q, sendingProgress, unreleasedMedia } from "./campaigns.queries";
import { preview, stats } from "./campaigns.preview";
import { CAMPAIGN_DUE, CampaignRunner } from "./campaigns.runner";
import { campaignIdIn, previewOut, statsIn, statsOut, type PreviewOut, type StatsIn, type StatsOut } from "./campaigns.schemas";
import { callMedia } from "../media/media.contract";
import { callSimulator } from "../simulator/simulator.contract";
import { callTracking } from "../tracking/tracking.contract";
import { callContacts } from "../contacts/contacts.contract";

interface CampaignsVars extends CampaignsThis {
  runner: CampaignRunner;
  loops: Loops;
}
type This = Service<ApiServiceSettings> & CampaignsVars;
type Ctx<P> = Context<P, AuthMeta>;

/** Final campaigns whose media references are still to be dropped, per round. */
const RELEASE_BATCH = 100;
const RELEASE_EVERY_MS = 30_000;

export function createCampaignsService(deps: Deps): ServiceSchema<ApiServiceSettings, Record<string, never>, CampaignsVars> {
  const { config, db } = deps;
  const sequelize = db.sequelize;
  // Previews and statistics: this node's heavy-read slots, shared with every service of the process.
  const gate = heavyGateOf(db, config);

  return {
    name: "campaigns",
    settings: { rest: "/" },

    actions: {
      /** Delivery statistics of the account's campaign messages (by status, reads, in flight, parts, price). */
      stats: apiAction({
        rest: "GET /campaigns/stats",
        operation: "CAMPAIGNS",
        summary: "Campaign statistics",
        description:
          "From the tracked statuses of campaign messages (optionally one campaign, one channel, a period of sentAt): `total`, `byStatus`, `read`, `pending` (in flight), `parts` (SMS parts), `price` (sum of SMS receipt prices), `responded` (distinct recipients who wrote back within 24 h). Simulated messages (test lists) are not counted. A heavy read: an account runs at most HEAVY_OPS_PER_ACCOUNT of them at once per node, the rest wait briefly in the account's own queue, then 429 with Retry-After.",
        params: statsIn,
        responses: { 200: statsOut },
        errors: [400, 404, 429],
        async handler(ctx: Ctx<StatsIn>): Promise<StatsOut> {
          checkHistoryRange(ctx.params);
          if (ctx.params.campaignId && !(await findCampaign(q(sequelize), ctx.meta.companyId, ctx.params.campaignId)))
            throw new ApiError("CAMPAIGN_NOT_FOUND", `No campaign ${ctx.params.campaignId} in this account.`);
          return stats(ctx, ctx.meta.companyId, ctx.params);
        },
      }),

      ...campaignActions,

      /** The REPL's `campaigns`: the campaigns sending now (at most 50, oldest confirmed first), with their progress. */
      opsSending: {
        visibility: "public",
        async handler(): Promise<OpsTable> {
          const rows = await sendingProgress(sequelize, OPS_ROWS);
          const total = rows[0]?.total ?? 0;
          return {
            columns: ["campaignId", "account", "channel", "audience", "sent", "failed", "done"],
            rows: rows.map((r) => [
              r.id,
              r.company_id,
              r.channel,
              r.audience,
              r.sent,
              r.failed,
              // Skipped recipients (opted out, deleted) are done too.
              r.audience > 0 ? `${Math.floor((100 * (r.sent + r.failed + r.skipped)) / r.audience)} %` : "-",
            ]),
            note: total > rows.length ? `and ${total - rows.length} more` : undefined,
          };
        },
      },

      /** The dry run: audience, messages, SMS parts and encodings, a few rendered texts; nothing sent or stored. */
      preview: apiAction({
        rest: "GET /campaigns/:id/preview",
        operation: "CAMPAIGNS",
        summary: "Preview a campaign (dry run)",
        description:
          "The audience size now (the snapshot once confirmed), one message per recipient, on SMS the parts and encodings of every recipient's rendered text (GSM-7: 160 characters or 153 per part, extension characters counting two; UCS-2: 70 or 67), and the texts of the first few recipients (only for a key that also has CONTACTS: they show contacts' numbers and names; otherwise `samples` is empty). Nothing is sent or stored. A heavy read: an account runs at most HEAVY_OPS_PER_ACCOUNT of them at once per node, the rest wait briefly in the account's own queue, then 429 with Retry-After.",
        params: campaignIdIn,
        responses: { 200: previewOut },
        errors: [400, 404, 429],
        timeout: CONFIRM_TIMEOUT_MS,
        async handler(ctx: Ctx<{ id: string }>): Promise<PreviewOut> {
          const c = await findCampaign(q(sequelize), ctx.meta.companyId, ctx.params.id);
          if (!c) throw new ApiError("CAMPAIGN_NOT_FOUND", `No campaign ${ctx.params.id} in this account.`);
          const samples = ctx.meta.operations.includes("CONTACTS");
          return withHeavyRead(sequelize, gate, ctx, (exec) => preview(exec, c, { samples }));
        },
      }),
    },

    methods: {
      /** A campaign became due (confirmed, resumed): this node looks at once, every other campaigns node on the broadcast. */
      kick(this: This) {
        this.runner.kick();
        Promise.resolve(this.broker.broadcast(CAMPAIGN_DUE)).catch((err: unknown) => this.logger.warn({ err }, "could not wake the campaigns nodes"));
      },

      /** Drops the media references of campaigns that became final (retried every RELEASE_EVERY_MS while media is away). */
      async releaseMedia(this: This) {
        const due = await unreleasedMedia(q(sequelize), RELEASE_BATCH);
        for (const c of due) {
          await callMedia(this.broker, "media.release", { owner: `campaign:${c.id}` }, { meta: { companyId: c.company_id } });
          await markMediaReleased(q(sequelize), c.id);
        }
      },
    },

    events: {
      /** A campaign was confirmed or resumed (on any node): look for campaigns to send now. */
      [CAMPAIGN_DUE](this: This) {
        this.runner.kick();
      },
    },

    created(this: This) {
      this.sequelize = sequelize;
      const metrics = new CampaignMetrics(sequelize);
      addNodeRegistry(this.broker, metrics.registry);
      const upstream = createUpstream(
        config,
        (messages: OutboundMessage[]) => callSimulator(this.broker, "simulator.send", { messages }),
        (registrations) => callTracking(this.broker, "tracking.ingest", { path: "messages", body: registrations }),
      );
      this.runner = new CampaignRunner(config, sequelize, this.broker.nodeID, upstream, this.logger, metrics, {
        markContacted: (companyId, contactIds, channel) =>
          callContacts(this.broker, "contacts.markContacted", { contactIds, channel, campaign: true }, { meta: { companyId } }),
        ended: () => void this.releaseMedia().catch((err) => this.logger.warn({ err }, "could not release campaign media")),
      });
    },

    started(this: This) {
      this.runner.start();
      this.loops = new Loops(this.logger);
      this.loops.every(RELEASE_EVERY_MS, "campaign media release", () => this.releaseMedia());
    },

    async stopped(this: This) {
      this.loops?.stop();
      await this.runner.stop();
    },
  };
}
