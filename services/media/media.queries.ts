/** The media service's SQL on media and media_references; every statement a partner's call makes names the account. */
import { QueryTypes, type Sequelize, type Transaction } from "sequelize";
import { queryPage, type Page } from "../../lib/http/paging";
import { MEDIA_COLUMNS, toMediaOut, type MediaRow } from "./media.models";
import type { MediaOut } from "./media.schemas";

/** One media of the account (FOR UPDATE within `transaction` when `lock`), or null. */
export async function mediaRow(
  sequelize: Sequelize,
  companyId: string,
  id: string,
  o: { transaction?: Transaction; lock?: boolean } = {},
): Promise<MediaRow | null> {
  const [row] = await sequelize.query<MediaRow>(`SELECT ${MEDIA_COLUMNS} FROM media WHERE company_id = $1 AND id = $2${o.lock ? " FOR UPDATE" : ""}`, {
    bind: [companyId, id.toLowerCase()],
    type: QueryTypes.SELECT,
    transaction: o.transaction,
  });
  return row ?? null;
}

/** The account's media, newest first. */
export function mediaPage(sequelize: Sequelize, companyId: string, page: number, limit: number): Promise<Page<MediaOut>> {
  return queryPage(sequelize, {
    select: `SELECT ${MEDIA_COLUMNS} FROM media WHERE company_id = :companyId ORDER BY created_at DESC, id DESC LIMIT :limit OFFSET :offset`,
    count: "SELECT count(*) AS total FROM media WHERE company_id = :companyId",
    replacements: { companyId },
    page,
    limit,
    map: toMediaOut,
  });
}

/** Up to 100 owners referring to a media (sorted). */
export async function ownersOf(sequelize: Sequelize, companyId: string, id: string, transaction?: Transaction): Promise<string[]> {
  const rows = await sequelize.query<{ owner: string }>(`SELECT owner FROM media_references WHERE company_id = $1 AND media_id = $2 ORDER BY owner LIMIT 100`, {
    bind: [companyId, id],
    type: QueryTypes.SELECT,
    transaction,
  });
  return rows.map((r) => r.owner);
}

export async function deleteMedia(sequelize: Sequelize, companyId: string, id: string, transaction?: Transaction): Promise<void> {
  await sequelize.query(`DELETE FROM media WHERE company_id = $1 AND id = $2`, { bind: [companyId, id], transaction });
}

/** Bytes of media the account keeps. */
export async function usedBytes(sequelize: Sequelize, companyId: string, transaction?: Transaction): Promise<number> {
  const [{ used }] = (await sequelize.query(`SELECT coalesce(sum(size), 0) AS used FROM media WHERE company_id = $1`, {
    bind: [companyId],
    type: QueryTypes.SELECT,
    transaction,
  })) as [{ used: string }];
  return Number(used);
}

/** One upload of an account at a time past this point, until `transaction` ends. */
export async function lockAccountUploads(sequelize: Sequelize, companyId: string, transaction: Transaction): Promise<void> {
  await sequelize.query(`SELECT pg_advisory_xact_lock(hashtext($1))`, { bind: [`media:${companyId}`], transaction });
}

export interface NewMedia {
  id: string;
  companyId: string;
  fileName: string;
  contentType: string;
  size: number;
  sha256: string;
  width: number | null;
  height: number | null;
  durationMs: number | null;
  nodeId: string;
}

export async function insertMedia(sequelize: Sequelize, m: NewMedia, transaction: Transaction): Promise<MediaRow> {
  const [row] = await sequelize.query<MediaRow>(
    `INSERT INTO media (id, company_id, file_name, content_type, size, sha256, width, height, duration_ms, node_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING ${MEDIA_COLUMNS}`,
    {
      bind: [m.id, m.companyId, m.fileName, m.contentType, m.size, m.sha256, m.width, m.height, m.durationMs, m.nodeId],
      type: QueryTypes.SELECT,
      transaction,
    },
  );
  return row!;
}

/** Which of these ids (of any account) have a media row: what the sweep keeps. */
export async function idsWithRows(sequelize: Sequelize, ids: string[]): Promise<Set<string>> {
  if (!ids.length) return new Set();
  const rows = await sequelize.query<{ id: string }>(`SELECT id FROM media WHERE id = ANY($1::uuid[])`, { bind: [ids], type: QueryTypes.SELECT });
  return new Set(rows.map((r) => r.id));
}

export type ResolvedRow = { id: string; content_type: string; size: string };

/** The media of the account among `ids` (well-formed, lower-case). */
export function resolvedRows(sequelize: Sequelize, companyId: string, ids: string[]): Promise<ResolvedRow[]> {
  if (!ids.length) return Promise.resolve([]);
  return sequelize.query<ResolvedRow>(`SELECT id, content_type, size FROM media WHERE company_id = $1 AND id = ANY($2::uuid[])`, {
    bind: [companyId, ids],
    type: QueryTypes.SELECT,
  });
}

/** The media of the account among `ids`, locked FOR SHARE until `transaction` ends (a DELETE waits). */
export async function shareLockMedia(sequelize: Sequelize, companyId: string, ids: string[], transaction: Transaction): Promise<Set<string>> {
  if (!ids.length) return new Set();
  const rows = await sequelize.query<{ id: string }>(`SELECT id FROM media WHERE company_id = $1 AND id = ANY($2::uuid[]) ORDER BY id FOR SHARE`, {
    bind: [companyId, ids],
    type: QueryTypes.SELECT,
    transaction,
  });
  return new Set(rows.map((r) => r.id));
}

/** The owner's references become exactly `ids`. */
export async function replaceReferences(sequelize: Sequelize, companyId: string, owner: string, ids: string[], transaction: Transaction): Promise<void> {
  await sequelize.query(`DELETE FROM media_references WHERE company_id = $1 AND owner = $2 AND NOT (media_id = ANY($3::uuid[]))`, {
    bind: [companyId, owner, ids],
    transaction,
  });
  if (!ids.length) return;
  await sequelize.query(
    `INSERT INTO media_references (company_id, owner, media_id) SELECT $1, $2, unnest($3::uuid[]) ON CONFLICT (company_id, owner, media_id) DO NOTHING`,
    { bind: [companyId, owner, ids], transaction },
  );
}

/** Drops every reference of the owner; how many there were. */
export async function releaseReferences(sequelize: Sequelize, companyId: string, owner: string): Promise<number> {
  const rows = await sequelize.query(`DELETE FROM media_references WHERE company_id = $1 AND owner = $2 RETURNING media_id`, {
    bind: [companyId, owner],
    type: QueryTypes.SELECT,
  });
  return rows.length;
}

/** The bytes and files of media stored, all accounts and nodes (media.metrics.ts reads it at each scrape). */
export function storedTotals(sequelize: Sequelize): Promise<{ bytes: number; files: number }> {
  return sequelize
    .query<{ bytes: string; files: string }>(`SELECT coalesce(sum(size), 0) AS bytes, count(*) AS files FROM media`, { type: QueryTypes.SELECT })
    .then((r) => ({ bytes: Number(r[0]!.bytes), files: Number(r[0]!.files) }));
}
