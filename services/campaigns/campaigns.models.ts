/** Campaign rows, their columns and the one mapper to the wire form. */
import type { Channel } from "../../lib/messaging/channels";
import { iso } from "../../lib/messaging/time";
import type { CampaignOut, CampaignStatus } from "./campaigns.schemas";

export interface CampaignRow {
  id: string;
  company_id: string;
  name: string;
  channel: Channel;
  status: CampaignStatus;
  contact_list_ids: Array<string | number>;
  text: string;
  media_ids: string[];
  scheduled_at: Date | string | null;
  send_rate_per_second: number | null;
  audience: number;
  sent: number;
  failed: number;
  skipped: number;
  pause_reason: string | null;
  created_at: Date | string;
  updated_at: Date | string;
  confirmed_at: Date | string | null;
  completed_at: Date | string | null;
}

export const CAMPAIGN_COLUMNS = `id, company_id, name, channel, status, contact_list_ids, text, media_ids, scheduled_at, send_rate_per_second,
  audience, sent, failed, skipped, pause_reason, created_at, updated_at, confirmed_at, completed_at`;

export function toCampaignOut(r: CampaignRow): CampaignOut {
  return {
    id: r.id,
    name: r.name,
    channel: r.channel,
    status: r.status,
    contactListIds: r.contact_list_ids.map(Number),
    message: { text: r.text, mediaIds: r.media_ids ?? [] },
    scheduledAt: iso(r.scheduled_at),
    sendRatePerSecond: r.send_rate_per_second === null ? null : Number(r.send_rate_per_second),
    progress: { audience: Number(r.audience), sent: Number(r.sent), failed: Number(r.failed), skipped: Number(r.skipped ?? 0) },
    pauseReason: r.pause_reason,
    createdAt: iso(r.created_at)!,
    updatedAt: iso(r.updated_at)!,
    confirmedAt: iso(r.confirmed_at),
    completedAt: iso(r.completed_at),
  };
}

/** A recipient as the sender claims it. */
export interface RecipientRow {
  contact_id: string;
  destination: string;
  vars: { firstName?: string | null; lastName?: string | null; customFields?: Record<string, unknown> };
  simulation: boolean;
  attempts: number;
}

/** The customerMessageId of a recipient's message: derived from campaign and contact, so a batch sent again after a crash is a repeat the ingress ignores. */
export const customerMessageIdOf = (campaignId: string, contactId: string) => `cmp-${campaignId}-${contactId}`;
