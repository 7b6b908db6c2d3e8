/**
 * `tracking.campaignStats` (GET /campaigns/stats asks it): the statistics of an account's campaign
 * messages, counted by tracking over its own table. Other services see "a campaign's messages"
 * through the view `campaign_messages` (migration 0028), never through this SQL.
 */
import type { Exec } from "../../lib/db/db";
import type { CampaignStatsIn as CampaignStatsFilters, CampaignStatsOut } from "./tracking.stats.schemas";

/**
 * "A campaign's messages" as SQL conditions on `messages m`: sent for a campaign, not simulated,
 * within the filters (the partial index messages_history_campaign serves them). Parameters $1
 * (account), then the filters given, in order.
 */
function campaignMessageConditions(companyId: string, q: CampaignStatsFilters): { where: string[]; params: unknown[] } {
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
function campaignStatsSql(companyId: string, q: CampaignStatsFilters): { sql: string; params: unknown[] } {
  const { where, params } = campaignMessageConditions(companyId, q);
  return {
    sql: `SELECT m.status_code AS code, count(*)::bigint AS messages, count(m.read_at)::bigint AS reads,
                 coalesce(sum(m.total_parts), 0)::bigint AS parts, coalesce(sum(m.price), 0)::float8 AS price
            FROM messages m WHERE ${where.join(" AND ")} GROUP BY m.status_code`,
    params,
  };
}

/** The statistics' rows of the account's campaign messages within the filters (one statement on `exec`). */
export async function campaignStats(exec: Exec, q: CampaignStatsFilters): Promise<CampaignStatsOut> {
  const { sql, params } = campaignStatsSql(q.companyId, q);
  const rows = await exec<{ code: number; messages: string; reads: string; parts: string; price: number }>(sql, params);
  return {
    rows: rows.map((r) => ({ code: Number(r.code), messages: Number(r.messages), reads: Number(r.reads), parts: Number(r.parts), price: Number(r.price) })),
  };
}
