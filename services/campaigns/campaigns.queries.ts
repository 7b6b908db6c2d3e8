/**
 * The campaigns' SQL (pg parameters), each statement one round trip; the sender's claim and outcome
 * statements are in campaigns.sender.queries.ts.
 */
import { QueryTypes, type Sequelize } from "sequelize";
import type { Channel } from "../../lib/messaging/channels";
import { execOf, queryRows, type Exec } from "../../lib/db/db";
import { GSM7_BASIC, GSM7_EXTENSION } from "../../lib/messaging/sms";
import { likeEscape } from "../../lib/db/literals";
import { audienceSql, contactGoneSql, liveListsSql, optedOutSql } from "./campaigns.contacts";
import { CAMPAIGN_COLUMNS, type CampaignRow } from "./campaigns.models";
import type { CampaignSort, ListCampaignsIn } from "./campaigns.schemas";
import type { Piece } from "./campaigns.text";

export type Q = Exec;
/** Statements on their own (each atomic by itself), outside any transaction. */
export const q = (sequelize: Sequelize): Q => execOf(sequelize);

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

/** A snapshot at least this large, and a tenth of the recipients the statistics know, has them refreshed at once. */
export const RECIPIENT_STATS_MIN = 1000;

/**
 * After a confirm's snapshot of `added` recipients: ANALYZE campaign_recipients when the statistics
 * know fewer than ten times as many rows (pg_class.reltuples; -1: never analyzed), rather than wait
 * for autovacuum. Statistics taken before a large first snapshot estimate one recipient for a
 * campaign they have not seen, and the sender's outcome statement then reads every recipient of the
 * campaign for each batch instead of probing its keys (bench:campaign at 100,000 recipients: 136 ms a
 * batch of 500, a third of PostgreSQL's time; campaigns-sender-plans.spec). True when it analyzed.
 */
export async function refreshRecipientStats(sequelize: Sequelize, added: number): Promise<boolean> {
  if (added < RECIPIENT_STATS_MIN) return false;
  const [known] = await queryRows<{ n: number }>(sequelize, `SELECT reltuples::float8 AS n FROM pg_class WHERE oid = 'campaign_recipients'::regclass`);
  if (added * 10 < Number(known?.n ?? 0)) return false;
  await queryRows(sequelize, `ANALYZE campaign_recipients`);
  return true;
}

/**
 * The audience snapshot, one statement: every recipient of the campaign's lists (contacts'
 * audienceSql) inserted with what its message needs; answers how many.
 */
export async function snapshotAudience(exec: Q, c: CampaignRow, customKeys: string[]): Promise<{ audience: number; skipped: number }> {
  const [row] = await exec<{ n: number; skipped: number }>(
    `WITH ins AS (
       INSERT INTO campaign_recipients (company_id, campaign_id, contact_id, destination, vars, simulation, status)
       SELECT $2::text, $1::uuid, a.contact_id, a.destination, a.vars, a.simulation,
              CASE WHEN ${optedOutSql("$2::text", "$5::text", "a.destination")} THEN 'SKIPPED' ELSE 'PENDING' END
         FROM (${audienceSql({ companyId: "$2::text", listIds: "$3", customKeys: "$4", channel: c.channel })}) a
       RETURNING status)
     SELECT count(*)::int AS n, count(*) FILTER (WHERE status = 'SKIPPED')::int AS skipped FROM ins`,
    [c.id, c.company_id, c.contact_list_ids.map(Number), customKeys, c.channel],
  );
  return { audience: Number(row!.n), skipped: Number(row!.skipped) };
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

/** What each requested status change sets (`transition`'s `set`). */
export const CHANGES = {
  pause: "status = 'PAUSED', pause_reason = 'Paused by request.'",
  resume: "status = CASE WHEN scheduled_at > now() THEN 'SCHEDULED' ELSE 'SENDING' END, pause_reason = NULL",
  cancel: "status = 'CANCELLED', completed_at = now()",
} as const;

/** Deletes the account's campaign while it is a DRAFT; false when it is not (or no longer) one. */
export async function deleteDraft(exec: Q, companyId: string, id: string): Promise<boolean> {
  const gone = await exec(`DELETE FROM campaigns WHERE id = $1 AND company_id = $2 AND status = 'DRAFT' RETURNING id`, [id, companyId]);
  return gone.length > 0;
}

/** Takes back a DRAFT just created (its media call failed); answers nothing. */
export const undoCreate = (exec: Q, companyId: string, id: string): Promise<unknown> =>
  exec(`DELETE FROM campaigns WHERE id = $1 AND company_id = $2 AND status = 'DRAFT'`, [id, companyId]);

/** The confirm's last step: the campaign (locked DRAFT, its audience snapshotted) becomes SCHEDULED with its counts. */
export async function markScheduled(exec: Q, id: string, audience: number, skipped: number): Promise<CampaignRow> {
  const [row] = await exec<CampaignRow>(
    `UPDATE campaigns SET status = 'SCHEDULED', audience = $2, skipped = $3, confirmed_at = now(), scheduled_at = coalesce(scheduled_at, now()), updated_at = now()
            WHERE id = $1 RETURNING *`,
    [id, audience, skipped],
  );
  return row!;
}

/** Where a preview reads its recipients: the audience now (a DRAFT) or the snapshot (confirmed). */
export function previewSource(c: CampaignRow, customKeys: string[]): { sql: string; params: unknown[] } {
  // Each row: contact_id, destination, vars, and opted_out (its number opted out of the channel: it would be, or was, skipped).
  return c.status === "DRAFT"
    ? {
        sql: `SELECT au.contact_id, au.destination, au.vars, ${optedOutSql("$1::text", "$4::text", "au.destination")} AS opted_out
                FROM (${audienceSql({ companyId: "$1::text", listIds: "$2", customKeys: "$3", channel: c.channel })}) au`,
        params: [c.company_id, c.contact_list_ids.map(Number), customKeys, c.channel],
      }
    : {
        // The snapshot without the contacts deleted since: the preview never shows a deleted contact.
        // A recipient already sent (or failed) stays counted as such whatever its number said since.
        sql: `SELECT r.contact_id, r.destination, r.vars,
                     (r.status = 'SKIPPED' OR (r.status = 'PENDING' AND ${optedOutSql("$2::text", "$3::text", "r.destination")})) AS opted_out
                FROM campaign_recipients r WHERE r.campaign_id = $1 AND NOT ${contactGoneSql("$2::text", "r.contact_id")}`,
        params: [c.id, c.company_id, c.channel],
      };
}

/** The preview's counts when every recipient gets the same text: recipients, and those opted out. */
export function previewAudience(source: { sql: string; params: unknown[] }): { sql: string; params: unknown[] } {
  return {
    sql: `SELECT count(*)::int AS n, count(*) FILTER (WHERE a.opted_out)::int AS opted_out FROM (${source.sql}) a`,
    params: source.params,
  };
}

/**
 * A recipient's text as SQL over its `vars` (alias `a`): each placeholder its value, or its fallback
 * when the value is missing or empty, as `render` does. Literals and fallbacks are parameters.
 */
function renderedSql(pieces: Piece[], params: unknown[]): string {
  const p = (v: unknown) => {
    params.push(v);
    return `$${params.length}::text`;
  };
  if (!pieces.length) return "''::text";
  return pieces
    .map((piece) => {
      if (typeof piece === "string") return p(piece);
      const value = piece.name === "customField" ? `a.vars -> 'customFields' ->> ${p(piece.key)}` : `a.vars ->> '${piece.name}'`;
      return `coalesce(nullif(${value}, ''), ${p(piece.fallback)})`;
    })
    .join(" || ");
}

export interface PreviewTotals {
  audience: number;
  opted_out: number;
  too_long: number;
  gsm7: number;
  ucs2: number;
  parts: number;
  /** Recipients whose parts SQL could not settle by arithmetic (see `previewTotals`). */
  unsure: number;
}

/**
 * The preview's counts, in one statement: recipients, texts over `max` characters (code points), and
 * on SMS each text's encoding and parts (lib/messaging/sms.ts's rules): GSM-7 when every character is in its
 * tables (`translate` deletes them all), units counting an extension character (GSM-7) or a
 * character outside the BMP (UCS-2) twice. One part when the units fit a single message; else every
 * part but the last holds P or P-1 units (a two-unit character is never split), so the parts lie
 * between ceil(U/P) and floor((U-1)/(P-1))+1, and where those agree (always when no character takes
 * two units) that is the count. The rest are `unsure`: their distinct texts are counted by
 * `previewUnsure` and split as the sender splits them.
 */
export function previewTotals(source: { sql: string; params: unknown[] }, pieces: Piece[], channel: Channel, max: number): { sql: string; params: unknown[] } {
  if (channel !== "SMS") {
    const params = [...source.params];
    const text = renderedSql(pieces, params);
    params.push(max);
    return {
      sql: `SELECT count(*)::int AS audience, count(*) FILTER (WHERE a.opted_out)::int AS opted_out,
                   count(*) FILTER (WHERE NOT a.opted_out AND char_length(${text}) > $${params.length}::int)::int AS too_long, 0 AS gsm7, 0 AS ucs2, 0 AS parts, 0 AS unsure
              FROM (${source.sql}) a`,
      params,
    };
  }
  const { cte, params, maxP } = smsCte(source, pieces, max);
  return {
    sql: `${cte}
          SELECT (SELECT count(*) FROM m)::int AS audience, (SELECT count(*) FROM m WHERE opted_out)::int AS opted_out,
                 (SELECT count(*) FROM m WHERE n > ${maxP} AND NOT opted_out)::int AS too_long,
                 count(*) FILTER (WHERE gsm)::int AS gsm7, count(*) FILTER (WHERE NOT gsm)::int AS ucs2,
                 coalesce(sum(parts), 0)::int AS parts, count(*) FILTER (WHERE parts IS NULL)::int AS unsure
            FROM k`,
    params,
  };
}

/** The distinct texts of the `unsure` recipients of `previewTotals`, each with how many recipients get it. */
export function previewUnsure(source: { sql: string; params: unknown[] }, pieces: Piece[], max: number): { sql: string; params: unknown[] } {
  const { cte, params } = smsCte(source, pieces, max);
  return { sql: `${cte} SELECT t, count(*)::int AS n FROM k WHERE parts IS NULL GROUP BY t`, params };
}

/**
 * A regular expression that matches a text of GSM-7 characters only: one bracket expression of both
 * tables, every character that is not a letter or digit escaped. (A translate() over the 130
 * characters cost 30 us a recipient: 3 s for 100,000; the regular expression's automaton reads
 * each character once.)
 */
const GSM7_ONLY = `^[${[...(GSM7_BASIC + GSM7_EXTENSION)].map((ch) => (/[\p{L}\p{N}\s]/u.test(ch) ? ch : `\\${ch}`)).join("")}]*$`;

/** The statements of previewTotals and previewUnsure: m (every text), k (those that fit, with their parts when settled). */
function smsCte(source: { sql: string; params: unknown[] }, pieces: Piece[], max: number): { cte: string; params: unknown[]; maxP: string } {
  const params = [...source.params];
  const text = renderedSql(pieces, params);
  params.push(max, GSM7_ONLY, GSM7_EXTENSION);
  const maxP = `$${params.length - 2}::int`;
  const all = `$${params.length - 1}::text`;
  const ext = `$${params.length}::text`;
  const cte = `WITH m AS (
            SELECT t, n, gsm, opted_out, CASE WHEN gsm THEN n - char_length(translate(t, ${ext}, '')) ELSE n - char_length(regexp_replace(t, '[\\U00010000-\\U0010FFFF]', '', 'g')) END AS two
              FROM (SELECT t, opted_out, char_length(t) AS n, t ~ ${all} AS gsm FROM (SELECT ${text} AS t, a.opted_out FROM (${source.sql}) a) r) x
          ), u AS (
            SELECT t, gsm, two, n + two AS units, CASE WHEN gsm THEN 160 ELSE 70 END AS single, CASE WHEN gsm THEN 153 ELSE 67 END AS part
              FROM m WHERE n <= ${maxP} AND NOT opted_out
          ), k AS (
            SELECT t, gsm, CASE WHEN units <= single THEN 1
                                WHEN two = 0 OR (units + part - 1) / part = (units - 1) / (part - 1) + 1 THEN (units + part - 1) / part END AS parts FROM u
          )`;
  return { cte, params, maxP };
}

/** The first `limit` recipients (by contact id) not opted out whose text fits `max`: the preview's samples, rendered by the caller. */
export function previewSamples(source: { sql: string; params: unknown[] }, pieces: Piece[], max: number, limit: number): { sql: string; params: unknown[] } {
  const params = [...source.params];
  const text = renderedSql(pieces, params);
  params.push(max);
  return {
    sql: `SELECT a.contact_id, a.destination, a.vars FROM (${source.sql}) a
           WHERE NOT a.opted_out AND char_length(${text}) <= $${params.length}::int ORDER BY a.contact_id LIMIT ${Number(limit)}`,
    params,
  };
}

/**
 * The campaigns now due become SENDING; in the same statement, how long (ms) until the next one is
 * due (the campaigns the UPDATE took still read SCHEDULED in its snapshot: only later ones count).
 */
export async function startDueCampaigns(exec: Q): Promise<{ ms: number | null } | undefined> {
  const [next] = await exec<{ ms: number | null }>(
    `WITH due AS (UPDATE campaigns SET status = 'SENDING', updated_at = now() WHERE status = 'SCHEDULED' AND scheduled_at <= now() RETURNING id)
     SELECT (SELECT count(*) FROM due) AS n,
            (EXTRACT(EPOCH FROM (SELECT min(scheduled_at) FROM campaigns WHERE status = 'SCHEDULED' AND scheduled_at > now()) - now()) * 1000)::bigint AS ms`,
  );
  return next;
}

/** The campaigns being sent, at most `limit`, in turns between accounts: each account's oldest schedule first, then each account's next. */
export const sendingCampaigns = (exec: Q, limit: number): Promise<CampaignRow[]> =>
  exec<CampaignRow>(
    // Fair between accounts: every account's oldest SENDING campaign, then every account's second, ...
    `SELECT ${CAMPAIGN_COLUMNS} FROM (SELECT c.*, row_number() OVER (PARTITION BY company_id ORDER BY scheduled_at, id) AS turn FROM campaigns c WHERE status = 'SENDING') c
      ORDER BY turn, scheduled_at, id LIMIT $1`,
    [limit],
  );

/** Drops a contact mark its holder handed to contacts. */
export const deleteMark = (exec: Q, id: string, owner: string): Promise<unknown> =>
  exec(`DELETE FROM campaign_contact_marks WHERE id = $1 AND owner = $2`, [id, owner]);

/** Ended campaigns whose media references are not yet released, at most `limit`. */
export const unreleasedMedia = (exec: Q, limit: number): Promise<{ id: string; company_id: string }[]> =>
  exec(`SELECT id, company_id FROM campaigns WHERE NOT media_released AND status IN ('SENT', 'FAILED', 'CANCELLED') LIMIT $1`, [limit]);

/** Records that a campaign's media references were released. */
export const markMediaReleased = (exec: Q, id: string): Promise<unknown> => exec(`UPDATE campaigns SET media_released = true WHERE id = $1`, [id]);

/** The SENDING campaigns (all nodes), and how long (s) the one longest without progress has been still (null: none). */
export const sendingStill = (sequelize: Sequelize): Promise<{ sending: number; still: number | null }> =>
  sequelize
    .query<{ sending: number; still: number | null }>(
      `SELECT count(*)::int AS sending, EXTRACT(EPOCH FROM now() - min(updated_at))::float8 AS still FROM campaigns WHERE status = 'SENDING'`,
      { type: QueryTypes.SELECT },
    )
    .then((r) => r[0]!);

/** A campaign sending now, with its progress; `total`: how many send (all of them, not only the `limit` answered). */
export interface SendingProgressRow {
  id: string;
  company_id: string;
  channel: string;
  audience: number;
  sent: number;
  failed: number;
  skipped: number;
  total: number;
}

/** The campaigns sending now, at most `limit`, oldest confirmed first. */
export const sendingProgress = (sequelize: Sequelize, limit: number): Promise<SendingProgressRow[]> =>
  queryRows<SendingProgressRow>(
    sequelize,
    `SELECT id, company_id, channel, audience, sent, failed, skipped, count(*) OVER ()::int AS total
               FROM campaigns WHERE status = 'SENDING' ORDER BY confirmed_at NULLS LAST, id LIMIT ${Number(limit)}`,
  );
