/**
 * What other services may import from tracking: the payload of the events it emits and the history
 * filters (schema, range check) that the exports of messages take too, the status feed and the
 * actions others call (the message exports' statements: `tracking.exportStatement`). It publishes no
 * SQL: its webhook events are the feed `message_webhook_events` the notifier follows; "a campaign's messages" is the view `campaign_messages` (migration 0028), its statistics the
 * action `tracking.campaignStats`.
 */
import { instantOf } from "../../lib/messaging/time";
import { badRequest, type FieldError } from "../../lib/errors";
import type { HistoryIn, InboundIn } from "./tracking.schemas";
import { callerOf, type Action } from "../../lib/bus/calls";
import type { CampaignStatsIn, CampaignStatsOut } from "./tracking.stats.schemas";
import type { ExportStatementIn } from "./tracking.export";
import type { IngestIn as TrackingIngestIn, IngestOut as TrackingIngestOut, StatusCodesIn, StatusCodesOut } from "./tracking.schemas";

export { historyFilterProperties, RANGE_RULE } from "./tracking.schemas";
export { campaignStatsIn } from "./tracking.stats.schemas";
export type { InboundIn };

/**
 * The webhook events of tracking's writes (DELIVERY, READ, and RETRACT of a late simulated message's
 * events), a read-only view over its feed `message_event_feed` (migration 0031) that the notifier
 * follows: rows are `WebhookEvent` (notifier.contract.ts) with `tx` and `id`. Kept two days, and a day
 * is dropped only once the notifier has read all of it.
 */
export const MESSAGE_EVENTS_VIEW = "message_webhook_events";

/**
 * The status feed tracking publishes (migration 0027): the read-only view `message_status_changes`
 * holds one row per RCS or WhatsApp message whose status or read a tracking write changed, with the
 * status that write left and what its receipt said of the number's reachability (`destination`,
 * `reach`, migration 0034), written in that write's transaction. Its columns are
 * {@link StatusFeedRow}. A follower reads past its own cursor, in `(tx, id)` order, only the rows
 * whose `tx` is below `pg_snapshot_xmin(pg_current_snapshot())`. Those transactions have ended, so
 * nothing can commit behind the cursor. Rows are kept two days, dropped by day once both followers
 * have read the whole day: the inbox (its view `inbox_feed_positions`) and contacts
 * (`contacts_feed_positions`).
 * `STATUS_FEED_WRITTEN` is broadcast after a commit that appended rows.
 */
export const STATUS_FEED_VIEW = "message_status_changes";

/**
 * The inbound feed tracking publishes (migration 0032): the read-only view `inbound_messages_received`
 * holds each inbound message the internal ingress accepted (validated), written in the transaction
 * the 202 waited for. Its columns are {@link InboundFeedRow}. The inbox follows it as the status feed
 * (rows of ended transactions only, in `(tx, id)` order, past its cursor) and stores the messages;
 * tracking calls nothing of the inbox's. Kept two days, dropped by day once the inbox has read the
 * whole day. `INBOUND_FEED_WRITTEN` is broadcast after a commit that appended rows.
 */
export const INBOUND_FEED_VIEW = "inbound_messages_received";
export const INBOUND_FEED_WRITTEN = "tracking.inboundWritten";
export interface InboundFeedRow {
  company_id: string;
  id: string;
  tx: string;
  channel: "RCS" | "WHATSAPP";
  message_id: string;
  source: string;
  destination: string;
  received_date: string;
  message_type: string;
  text: string | null;
  media_key: string | null;
}
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
  /** The number the message went to (null on rows written before migration 0034). */
  destination: string | null;
  /** What the change's receipt said of the number on the channel: DELIVERED true, DISABLED or UNSUPPORTED false, else null. */
  reach: boolean | null;
}

/** RCS/WhatsApp reachability learnt from a receipt (a status feed row's `reach`), for the contacts' communicationSupported. */
export interface ChannelSupport {
  companyId: string;
  channel: "RCS" | "WHATSAPP";
  destination: string;
  supported: boolean;
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
