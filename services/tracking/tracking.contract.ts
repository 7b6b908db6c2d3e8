/**
 * What other services may import from tracking: the payload of the events it emits and the history
 * filters (schema, range check, SQL conditions) that the exports of messages reuse.
 */
import { CHANNELS, statusByName, type Channel } from "../../lib/channels";
import { badRequest, type FieldError } from "../../lib/errors";
import { historyFilterProperties, type HistoryIn } from "./tracking.schemas";

export { historyFilterProperties };

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
  const t = Date.parse(value);
  if (Number.isNaN(t) || t < Date.UTC(1970, 0, 1) || t > Date.UTC(9999, 0, 1)) return { path, message: "must be a date-time between 1970 and 9999" };
  return null;
}

/** `from` and `to` must be dates PostgreSQL can store, `from` before `to` (400 otherwise). */
export function checkHistoryRange(q: HistoryFilters): void {
  for (const field of ["from", "to"] as const) {
    const bad = dateError(q[field], field);
    if (bad) throw badRequest(`\`${field}\` is not a date PostgreSQL can store.`, [bad]);
  }
  if (q.from && q.to && Date.parse(q.from) >= Date.parse(q.to))
    throw badRequest("`from` must be before `to`.", [{ path: "from", message: "must be before to" }]);
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
 * Campaign statistics from the tracked statuses: one row per status code with the messages, reads,
 * SMS parts and summed SMS prices. Only messages sent for a campaign and not simulated are counted,
 * through the partial index messages_history_campaign (company, campaign, sentAt): never a scan of
 * every message of the account. Parameters $1 (account), then the filters given, in order.
 */
export function campaignStatsSql(companyId: string, q: CampaignStatsFilters): { sql: string; params: unknown[] } {
  const params: unknown[] = [companyId];
  const p = (v: unknown) => `$${params.push(v)}`;
  const where = ["m.company_id = $1", "m.campaign_id IS NOT NULL", "m.sent_at IS NOT NULL", "NOT m.simulation"];
  if (q.campaignId) where.push(`m.campaign_id = ${p(q.campaignId)}`);
  if (q.channel) where.push(`m.channel = ${p(q.channel)}`);
  if (q.from) where.push(`m.sent_at >= ${p(new Date(q.from).toISOString())}::timestamptz`);
  if (q.to) where.push(`m.sent_at < ${p(new Date(q.to).toISOString())}::timestamptz`);
  return {
    sql: `SELECT m.status_code AS code, count(*)::bigint AS messages, count(m.read_at)::bigint AS reads,
                 coalesce(sum(m.total_parts), 0)::bigint AS parts, coalesce(sum(m.price), 0)::float8 AS price
            FROM messages m WHERE ${where.join(" AND ")} GROUP BY m.status_code`,
    params,
  };
}
