/** The shapes of `tracking.campaignStats` (tracking.stats.ts), whose filters `inbox.campaignResponded` takes too. */
import { CHANNELS, type Channel } from "../../lib/messaging/channels";
import { YEAR_PATTERN } from "../../lib/messaging/time";
import type { SchemaOf } from "../../lib/http/schema-type";
import { companyId } from "./tracking.schemas";

/**
 * `tracking.campaignStats` (and `inbox.campaignResponded`, the same filters): an account's campaign
 * messages, as GET /campaigns/stats filters them (campaigns validated the values and the range).
 */
export interface CampaignStatsIn {
  companyId: string;
  campaignId?: string;
  channel?: Channel;
  from?: string;
  to?: string;
}
export const campaignStatsIn = {
  $id: "TrackingCampaignStatsIn",
  type: "object",
  required: ["companyId"],
  additionalProperties: false,
  properties: {
    companyId,
    campaignId: { type: "string", minLength: 1, maxLength: 100 },
    channel: { type: "string", enum: [...CHANNELS] },
    from: { type: "string", format: "date-time", pattern: YEAR_PATTERN },
    to: { type: "string", format: "date-time", pattern: YEAR_PATTERN },
  },
} satisfies SchemaOf<CampaignStatsIn>;
/** One row per status code among the campaign messages: messages, reads, SMS parts and summed SMS prices. */
export interface CampaignStatsOut {
  rows: Array<{ code: number; messages: number; reads: number; parts: number; price: number }>;
}
