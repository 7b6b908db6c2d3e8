/**
 * What other services may import from tracking: the payload of the events it emits and the history
 * filters (schema, range check) that the exports of messages take too, the status feed and the
 * actions others call (the message exports' statements: `tracking.exportStatement`). The SQL it
 * still publishes (the outbox insert) is written in tracking.contract.queries.ts and re-exported
 * here; "a campaign's messages" is the view `campaign_messages` (migration 0028), its statistics the
 * action `tracking.campaignStats`.
 */
import { instantOf } from "../../lib/messaging/time";
import type { Channel } from "../../lib/messaging/channels";
import { badRequest, type FieldError } from "../../lib/errors";
import type { HistoryIn, InboundIn } from "./tracking.schemas";
import { callerOf, type Action } from "../../lib/bus/calls";
import type { CampaignStatsIn, CampaignStatsOut } from "./tracking.stats.schemas";
import type { ExportStatementIn } from "./tracking.export";
import type { IngestIn as TrackingIngestIn, IngestOut as TrackingIngestOut, StatusCodesIn, StatusCodesOut } from "./tracking.schemas";

export { historyFilterProperties, RANGE_RULE } from "./tracking.schemas";
export { campaignStatsIn } from "./tracking.stats.schemas";
export type { InboundIn };
export { appendOutboxEvents, OUTBOX_INSERT } from "./tracking.contract.queries";

/**
 * A row of `outbox_events`, the hand-over to the notifier: tracking writes DELIVERY and READ rows
 * with each status change, inbox writes INBOUND rows with each inbound message (same transaction).
 */
export interface OutboxEvent {
  company_id: string;
  channel: Channel;
  event_type: "DELIVERY" | "READ" | "INBOUND";
  message_id: string;
  num_part: number | null;
  payload: Record<string, unknown>;
  message_sent_at: string | null;
}

/** Fields without a value are omitted (spec part 6). */
export function withoutEmpty(payload: Record<string, unknown>): Record<string, unknown> {
  for (const k of Object.keys(payload)) if (payload[k] === undefined || payload[k] === null) delete payload[k];
  return payload;
}

/** The INBOUND event of spec part 6 for the first arrival of an inbound message. */
export function inboundEvent(channel: "RCS" | "WHATSAPP", v: InboundIn): OutboxEvent {
  const payload: Record<string, unknown> = {
    eventType: "INBOUND",
    channel,
    messageId: v.messageId,
    source: v.source,
    destination: v.destination,
    receivedDate: new Date(v.receivedDate).toISOString(),
    messageType: v.messageType,
    text: v.text,
    mediaKey: v.mediaKey,
  };
  return {
    company_id: v.companyId,
    channel,
    event_type: "INBOUND",
    message_id: v.messageId,
    num_part: null,
    payload: withoutEmpty(payload),
    message_sent_at: null,
  };
}

/**
 * The status feed tracking publishes (migration 0027): the read-only view `message_status_changes`
 * holds one row per RCS or WhatsApp message whose status or read a tracking write changed, with the
 * status that write left, written in that write's transaction. Its columns are
 * {@link StatusFeedRow}. A follower reads past its own cursor, in `(tx, id)` order, only the rows
 * whose `tx` is below `pg_snapshot_xmin(pg_current_snapshot())`. Those transactions have ended, so
 * nothing can commit behind the cursor. Rows are kept two days, dropped by day.
 * `STATUS_FEED_WRITTEN` is broadcast after a commit that appended rows.
 */
export const STATUS_FEED_VIEW = "message_status_changes";
export const STATUS_FEED_WRITTEN = "tracking.statusFeedWritten";
export interface StatusFeedRow {
  company_id: string;
  id: string;
  tx: string;
  channel: "RCS" | "WHATSAPP";
  customer_message_id: string;
  status_code: number;
  delivery_date: Date | null;
  read_at: Date | null;
  created_at: Date;
}

/** RCS/WhatsApp reachability learnt from a receipt, for the contacts' communicationSupported. */
export interface ChannelSupport {
  companyId: string;
  channel: "RCS" | "WHATSAPP";
  destination: string;
  supported: boolean;
}

/** `tracking.channelSupportChanged`: emitted after a commit when receipts showed numbers reachable (or not) on RCS or WhatsApp. */
export interface ChannelSupportEvent {
  changes: ChannelSupport[];
}

/** The history filters (GET /messages/history, its export and delivery reports). */
export type HistoryFilters = Pick<HistoryIn, "channel" | "status" | "destination" | "campaignId" | "from" | "to">;

/** A date-time that matched the format but is no real instant (or one PostgreSQL cannot store). */
export function dateError(value: string | undefined, path: string): FieldError | null {
  if (value === undefined) return null;
  if (Number.isNaN(instantOf(value))) return { path, message: "must be a date-time of a year from 1970 to 9999" };
  return null;
}

/** `from` and `to` must be dates PostgreSQL can store, `from` before `to` (400 otherwise). */
export function checkHistoryRange(q: HistoryFilters): void {
  for (const field of ["from", "to"] as const) {
    const bad = dateError(q[field], field);
    if (bad) throw badRequest(`\`${field}\` is not a date PostgreSQL can store.`, [bad]);
  }
  if (q.from && q.to && instantOf(q.from) >= instantOf(q.to)) throw badRequest("`from` must be before `to`.", [{ path: "from", message: "must be before to" }]);
}

/** Filters of the campaign statistics. */
export type CampaignStatsFilters = Omit<CampaignStatsIn, "companyId">;

/**
 * What other services call of tracking (lib/bus/calls.ts): `tracking.ingest`, an upstream report as
 * the internal ingress takes it; `tracking.statusCodes`, the status codes of messages another service
 * sent (inbox replies), as GET /messages/status answers them; `tracking.campaignStats`, the statistics
 * of an account's campaign messages (GET /campaigns/stats; a heavy read under tracking's slots);
 * `tracking.exportStatement`, the SELECT of an account's message export (history or delivery
 * reports) with the history filters, which the exports service runs inside a COPY.
 */
export interface TrackingActions {
  "tracking.ingest": Action<TrackingIngestIn, TrackingIngestOut>;
  "tracking.statusCodes": Action<StatusCodesIn, StatusCodesOut>;
  "tracking.campaignStats": Action<CampaignStatsIn, CampaignStatsOut>;
  "tracking.exportStatement": Action<ExportStatementIn, { sql: string }>;
}
export const callTracking = callerOf<TrackingActions>();
export type { TrackingIngestIn, TrackingIngestOut, StatusCodesIn, StatusCodesOut, CampaignStatsIn, CampaignStatsOut, ExportStatementIn };
