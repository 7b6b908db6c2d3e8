/** The campaigns' SQL (pg parameters), each statement one round trip. */
import type { Sequelize } from "sequelize";
import type { Channel } from "../../lib/channels";
import { rawQuery, type Exec } from "../../lib/db";
import { audienceSql, likeEscape, liveListsSql } from "../contacts/contacts.contract";
import { CAMPAIGN_COLUMNS, type CampaignRow } from "./campaigns.models";
import type { CampaignSort, ListCampaignsIn } from "./campaigns.schemas";

export type Q = Exec;
export const q =
  (sequelize: Sequelize): Q =>
  (sql, params) =>
    rawQuery(sequelize, sql, params);

export async function findCampaign(exec: Q, companyId: string, id: string, lock = false): Promise<CampaignRow | null> {
  const [row] = await exec<CampaignRow>(`SELECT ${CAMPAIGN_COLUMNS} FROM campaigns WHERE id = $1 AND company_id = $2${lock ? " FOR UPDATE" : ""}`, [
    id,
    companyId,
  ]);
  return row ?? null;
}

/** The ids among `ids` that are not live lists of the account. */
export async function missingLists(exec: Q, companyId: string, ids: number[], lock = false): Promise<number[]> {
  const live = await exec<{ id: string }>(liveListsSql("$1", "$2", lock), [companyId, ids]);
  const have = new Set(live.map((r) => Number(r.id)));
  return [...new Set(ids)].filter((id) => !have.has(id));
}

export interface CampaignValues {
  name: string;
  channel: Channel;
  contactListIds: number[];
  text: string;
  mediaIds: string[];
  scheduledAt: string | null;
  sendRatePerSecond: number | null;
}

export async function insertCampaign(exec: Q, id: string, companyId: string, v: CampaignValues): Promise<CampaignRow> {
  const [row] = await exec<CampaignRow>(
    `INSERT INTO campaigns (id, company_id, name, channel, contact_list_ids, text, media_ids, scheduled_at, send_rate_per_second, media_released)
     VALUES ($1, $2, $3, $4, $5::bigint[], $6, $7::text[], $8::timestamptz, $9, cardinality($7::text[]) = 0) RETURNING ${CAMPAIGN_COLUMNS}`,
    [id, companyId, v.name, v.channel, v.contactListIds, v.text, v.mediaIds, v.scheduledAt, v.sendRatePerSecond],
  );
  return row!;
}

/** Writes a DRAFT's new values; null when it is no longer a DRAFT. */
export async function updateDraft(exec: Q, companyId: string, id: string, v: CampaignValues): Promise<CampaignRow | null> {
  const [row] = await exec<CampaignRow>(
    `UPDATE campaigns SET name = $3, channel = $4, contact_list_ids = $5::bigint[], text = $6, media_ids = $7::text[], scheduled_at = $8::timestamptz,
            send_rate_per_second = $9, media_released = cardinality($7::text[]) = 0, updated_at = now()
      WHERE id = $1 AND company_id = $2 AND status = 'DRAFT' RETURNING ${CAMPAIGN_COLUMNS}`,
    [id, companyId, v.name, v.channel, v.contactListIds, v.text, v.mediaIds, v.scheduledAt, v.sendRatePerSecond],
  );
  return row ?? null;
}

const SORTS: Record<CampaignSort, string> = { createdAt: "created_at", name: "lower(name)", status: "status", scheduledAt: "scheduled_at" };

export async function campaignsPage(exec: Q, companyId: string, p: ListCampaignsIn): Promise<{ rows: CampaignRow[]; total: number }> {
  const params: unknown[] = [companyId];
  const where = ["company_id = $1"];
  if (p.status) where.push(`status = $${params.push(p.status)}`);
  if (p.channel) where.push(`channel = $${params.push(p.channel)}`);
  if (p.search) where.push(`name ILIKE $${params.push(likeEscape(p.search))}`);
  const dir = p.sortOrder === "desc" ? "DESC" : "ASC";
  const w = where.join(" AND ");
  const [rows, [count]] = await Promise.all([
    exec<CampaignRow>(
      `SELECT ${CAMPAIGN_COLUMNS} FROM campaigns WHERE ${w} ORDER BY ${SORTS[p.sortBy]} ${dir} NULLS LAST, id ${dir} LIMIT ${p.limit} OFFSET ${p.page * p.limit}`,
      params,
    ),
    exec<{ total: string }>(`SELECT count(*) AS total FROM campaigns WHERE ${w}`, params),
  ]);
  return { rows, total: Number(count!.total) };
}

/**
 * The audience snapshot, one statement: every recipient of the campaign's lists (contacts'
 * audienceSql) inserted with what its message needs; answers how many.
 */
export async function snapshotAudience(exec: Q, c: CampaignRow, customKeys: string[]): Promise<number> {
  const [row] = await exec<{ n: number }>(
    `WITH ins AS (
       INSERT INTO campaign_recipients (campaign_id, contact_id, destination, vars, simulation)
       SELECT $1::uuid, a.contact_id, a.destination, a.vars, a.simulation
         FROM (${audienceSql({ companyId: "$2::text", listIds: "$3", customKeys: "$4", channel: c.channel })}) a
       RETURNING 1)
     SELECT count(*)::int AS n FROM ins`,
    [c.id, c.company_id, c.contact_list_ids.map(Number), customKeys],
  );
  return Number(row!.n);
}

/** The audience as it would be now, every row by contact id (the preview reads it through a cursor). */
export function audienceQuery(c: CampaignRow, customKeys: string[]): { sql: string; params: unknown[] } {
  return {
    sql: `SELECT a.contact_id, a.destination, a.vars FROM (${audienceSql({ companyId: "$1::text", listIds: "$2", customKeys: "$3", channel: c.channel })}) a
      ORDER BY a.contact_id`,
    params: [c.company_id, c.contact_list_ids.map(Number), customKeys],
  };
}

/** The audience as it would be now, `limit` rows from after contact `after` (preview). */
export async function audiencePage(
  exec: Q,
  c: CampaignRow,
  customKeys: string[],
  after: string | null,
  limit: number,
): Promise<Array<{ contact_id: string; destination: string; vars: Record<string, unknown> }>> {
  return exec(
    `SELECT a.contact_id, a.destination, a.vars FROM (${audienceSql({ companyId: "$1::text", listIds: "$2", customKeys: "$3", channel: c.channel })}) a
      WHERE $4::uuid IS NULL OR a.contact_id > $4::uuid ORDER BY a.contact_id LIMIT ${Number(limit)}`,
    [c.company_id, c.contact_list_ids.map(Number), customKeys, after],
  );
}

/** The snapshot of a confirmed campaign, `limit` rows from after contact `after` (preview). */
export async function recipientsPage(
  exec: Q,
  campaignId: string,
  after: string | null,
  limit: number,
): Promise<Array<{ contact_id: string; destination: string; vars: Record<string, unknown> }>> {
  return exec(
    `SELECT contact_id, destination, vars FROM campaign_recipients WHERE campaign_id = $1 AND ($2::uuid IS NULL OR contact_id > $2::uuid)
      ORDER BY contact_id LIMIT ${Number(limit)}`,
    [campaignId, after],
  );
}

/** A change of status from one of `from`, as one guarded UPDATE; null when the campaign was in none of them (or is not the account's). */
export async function transition(
  exec: Q,
  companyId: string,
  id: string,
  from: readonly string[],
  set: string,
  params: unknown[] = [],
): Promise<CampaignRow | null> {
  const [row] = await exec<CampaignRow>(
    `UPDATE campaigns SET ${set}, updated_at = now() WHERE id = $1 AND company_id = $2 AND status = ANY ($3::text[]) RETURNING ${CAMPAIGN_COLUMNS}`,
    [id, companyId, from, ...params],
  );
  return row ?? null;
}

/** The size of the audience as it would be snapshotted now. */
export async function audienceCount(exec: Q, c: CampaignRow): Promise<number> {
  const [row] = await exec<{ n: number }>(
    `SELECT count(*)::int AS n FROM (${audienceSql({ companyId: "$1::text", listIds: "$2", customKeys: "$3", channel: c.channel })}) a`,
    [c.company_id, c.contact_list_ids.map(Number), []],
  );
  return Number(row!.n);
}
