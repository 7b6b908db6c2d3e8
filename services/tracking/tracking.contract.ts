/**
 * What other services may import from tracking: the payload of the events it emits and the history
 * filters (schema, range check, SQL conditions) that the exports of messages reuse.
 */
import { QueryTypes, type Sequelize, type Transaction } from "sequelize";
import { instantOf } from "../../lib/time";
import { CHANNELS, statusByName, type Channel } from "../../lib/channels";
import { badRequest, type FieldError } from "../../lib/errors";
import { historyFilterProperties, RANGE_RULE, type HistoryIn, type InboundIn } from "./tracking.schemas";

export { historyFilterProperties, RANGE_RULE };
export type { InboundIn };

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

/** The insert of outbox rows given as a JSON array in `$1` (set-based, one statement). */
export const OUTBOX_INSERT = `INSERT INTO outbox_events (company_id, channel, event_type, message_id, num_part, payload, message_sent_at)
  SELECT x.company_id, x.channel, x.event_type, x.message_id, x.num_part, x.payload, x.message_sent_at
    FROM jsonb_to_recordset($1::jsonb) AS x(company_id text, channel text, event_type text, message_id text, num_part smallint, payload jsonb, message_sent_at timestamptz)`;

/** Writes outbox rows inside the caller's transaction (one statement). */
export async function appendOutboxEvents(sequelize: Sequelize, transaction: Transaction, events: readonly OutboxEvent[]): Promise<void> {
  if (events.length === 0) return;
  await sequelize.query(OUTBOX_INSERT, { bind: [JSON.stringify(events)], type: QueryTypes.INSERT, transaction });
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
 * The tracked status of messages another service sent through the upstream adapter (inbox replies):
 * `LEFT JOIN messages <alias>` on the account, channel and customerMessageId given as SQL
 * expressions, one probe of the unique index messages_key per row. `<alias>.status_code` is null
 * for a message tracking has not heard of yet (UNKNOWN).
 */
export function trackedMessageJoin(alias: string, on: { companyId: string; channel: string; customerMessageId: string }): string {
  return `LEFT JOIN messages ${alias} ON ${alias}.company_id = ${on.companyId} AND ${alias}.channel = ${on.channel} AND ${alias}.customer_message_id = ${on.customerMessageId}`;
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

/**
 * The history filters as SQL conditions on `messages m` of one account. `param` places each value:
 * a bind placeholder for a query, an inlined literal for a COPY (which takes no parameters).
 */
export function historyConditions(
  companyId: string,
  channels: readonly Channel[],
  q: HistoryFilters,
  param: (value: unknown, cast: string) => string,
): string[] {
  const where = [`m.company_id = ${param(companyId, "text")}`];
  const allowed = q.channel ? [q.channel] : channels;
  if (allowed.length < CHANNELS.length) where.push(`m.channel = ANY (${param(allowed, "text[]")})`);
  if (q.status) where.push(`m.status_code = ${param(statusByName(q.status)!.code, "smallint")}`);
  if (q.destination) where.push(`m.destination = ${param(q.destination, "text")}`);
  if (q.campaignId) where.push(`m.campaign_id = ${param(q.campaignId, "text")}`, "m.campaign_id IS NOT NULL");
  if (q.from) where.push(`m.sent_at >= ${param(new Date(q.from).toISOString(), "timestamptz")}`);
  if (q.to) where.push(`m.sent_at < ${param(new Date(q.to).toISOString(), "timestamptz")}`);
  return where;
}

/**
 * RCS and WhatsApp reachability as the receipts tell it: true when the latest message on `channel`
 * to the number `phone` (an SQL expression) that got a final receipt was UNSUPPORTED (11) or
 * DISABLED (10). A number never tried is not refused. One index probe per number
 * (messages_history_destination). `companyId` is an SQL expression too (a parameter).
 */
export function channelRefusedSql(channel: "RCS" | "WHATSAPP", companyId: string, phone: string): string {
  return `EXISTS (SELECT 1 FROM (SELECT m.status_code FROM messages m
             WHERE m.company_id = ${companyId} AND m.destination = ${phone} AND m.sent_at IS NOT NULL
               AND m.channel = '${channel === "RCS" ? "RCS" : "WHATSAPP"}' AND m.status_code NOT IN (0, 1)
             ORDER BY m.sent_at DESC, m.id DESC LIMIT 1) last
           WHERE last.status_code IN (10, 11))`;
}

/** Filters of the campaign statistics. */
export interface CampaignStatsFilters {
  campaignId?: string;
  channel?: Channel;
  from?: string;
  to?: string;
}

/**
 * "A campaign's messages" as SQL conditions on `messages m`: sent for a campaign, not simulated,
 * within the filters (the partial index messages_history_campaign serves them). Parameters $1
 * (account), then the filters given, in order.
 */
export function campaignMessageConditions(companyId: string, q: CampaignStatsFilters): { where: string[]; params: unknown[] } {
  const params: unknown[] = [companyId];
  const p = (v: unknown) => `$${params.push(v)}`;
  const where = ["m.company_id = $1", "m.campaign_id IS NOT NULL", "m.sent_at IS NOT NULL", "NOT m.simulation"];
  // Campaign ids are stored as the campaigns service makes them (lower case); one asked in upper case is the same campaign.
  if (q.campaignId) where.push(`m.campaign_id = ${p(q.campaignId.toLowerCase())}`);
  if (q.channel) where.push(`m.channel = ${p(q.channel)}`);
  if (q.from) where.push(`m.sent_at >= ${p(new Date(q.from).toISOString())}::timestamptz`);
  if (q.to) where.push(`m.sent_at < ${p(new Date(q.to).toISOString())}::timestamptz`);
  return { where, params };
}

/**
 * Campaign statistics from the tracked statuses: one row per status code with the messages, reads,
 * SMS parts and summed SMS prices. Only messages sent for a campaign and not simulated are counted,
 * through the partial index messages_history_campaign (company, campaign, sentAt): never a scan of
 * every message of the account. Parameters $1 (account), then the filters given, in order.
 */
export function campaignStatsSql(companyId: string, q: CampaignStatsFilters): { sql: string; params: unknown[] } {
  const { where, params } = campaignMessageConditions(companyId, q);
  return {
    sql: `SELECT m.status_code AS code, count(*)::bigint AS messages, count(m.read_at)::bigint AS reads,
                 coalesce(sum(m.total_parts), 0)::bigint AS parts, coalesce(sum(m.price), 0)::float8 AS price
            FROM messages m WHERE ${where.join(" AND ")} GROUP BY m.status_code`,
    params,
  };
}
