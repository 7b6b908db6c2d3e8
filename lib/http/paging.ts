/**
 * The page envelope, once: query properties (`page`, `limit`, `sortBy`, `sortOrder`) for a params
 * schema, the envelope schema for a response, and the envelope itself. A `limit` over 1000, a
 * negative `page`, an unknown `sortBy` or another `sortOrder` fail validation (400), never clamped.
 * `queryPage` writes no SQL of its own: it runs the page and count statements its caller wrote (in
 * the caller's `<name>.queries.ts`), filling in the limit and offset.
 */
import { QueryTypes, type Sequelize } from "sequelize";

export interface PageIn<S extends string = string> {
  page: number;
  limit: number;
  sortBy: S;
  sortOrder: "asc" | "desc";
}

export interface Page<T> {
  data: T[];
  page: number;
  limit: number;
  total: number;
  totalPages: number;
}

export function pagingProperties<const S extends string>(sortFields: readonly S[], defaultSort: S, defaultOrder: "asc" | "desc" = "asc") {
  return {
    page: { type: "integer", minimum: 0, maximum: 1_000_000_000, default: 0, description: "0-based page index." },
    limit: { type: "integer", minimum: 1, maximum: 1000, default: 10, description: "Page size, at most 1000." },
    sortBy: { type: "string", enum: [...sortFields], default: defaultSort },
    sortOrder: { type: "string", enum: ["asc", "desc"], default: defaultOrder },
  } as const;
}

/** The page of `item`s: `pageSchema("ContactPage", contactOut) satisfies SchemaOf<Page<ContactOut>>` checks both. */
export function pageSchema<Item extends object>(id: string, item: Item) {
  return {
    $id: id,
    type: "object",
    additionalProperties: false,
    required: ["data", "page", "limit", "total", "totalPages"],
    properties: {
      data: { type: "array", items: item },
      page: { type: "integer", minimum: 0 },
      limit: { type: "integer", minimum: 1 },
      total: { type: "integer", minimum: 0 },
      totalPages: { type: "integer", minimum: 0 },
    },
  } as const;
}

export function toPage<T>(data: T[], total: number, page: number, limit: number): Page<T> {
  return { data, page, limit, total, totalPages: Math.ceil(total / limit) };
}

/**
 * One page of a SQL query and its total, run side by side: `select` places `LIMIT :limit OFFSET
 * :offset` itself (filled in here from page and limit), `count` answers one row `{ total }`; both
 * share `replacements`.
 */
export async function queryPage<Row extends object, Out>(
  sequelize: Sequelize,
  q: { select: string; count: string; replacements: Record<string, unknown>; page: number; limit: number; map: (row: Row) => Out },
): Promise<Page<Out>> {
  const [rows, [count]] = await Promise.all([
    sequelize.query<Row>(q.select, {
      replacements: { ...q.replacements, limit: q.limit, offset: q.page * q.limit },
      type: QueryTypes.SELECT,
    }),
    sequelize.query<{ total: string }>(q.count, { replacements: q.replacements, type: QueryTypes.SELECT }),
  ]);
  return toPage(rows.map(q.map), consistentTotal(Number(count!.total), rows.length, q.page, q.limit), q.page, q.limit);
}

/**
 * The page and the count are read by two statements at once (each on its own connection, so in two
 * snapshots): a row committed between them could make an answer contradict itself (a total of 1
 * beside an empty first page). The rows read win: a page shorter than the limit is the last one, so
 * the total is exactly what precedes it plus its rows; a full page means at least that many.
 */
export function consistentTotal(counted: number, rows: number, page: number, limit: number): number {
  if (rows === 0 && page > 0) return counted; // past the end: only the count knows
  if (rows < limit) return page * limit + rows;
  return Math.max(counted, page * limit + rows);
}
