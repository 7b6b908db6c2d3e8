/**
 * The history filters (GET /messages/history, and the history and delivery-report exports,
 * tracking.export.ts) as SQL conditions on tracking's `messages m`. Tracking's own SQL: no other
 * service imports it (issue 33 item 1).
 */
import { CHANNELS, statusByName, type Channel } from "../../lib/messaging/channels";
import type { HistoryFilters } from "./tracking.contract";

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
