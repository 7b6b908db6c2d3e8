/**
 * Reads of the tracking tables: polling (one index lookup per id), the message history (keyset
 * pagination on an index: no OFFSET, no COUNT) and retention (bounded batches).
 */
import { QueryTypes, type Sequelize } from "sequelize";
import type { Channel } from "../../lib/channels";
import type { Exec } from "../../lib/db";
import { badRequest } from "../../lib/errors";
import { historyConditions } from "./tracking.contract";
import { STATUS_COLUMNS, toHistoryItem, toStatusOut, unknownStatus, type HistoryRow, type StatusRow } from "./tracking.models";
import type { HistoryIn, HistoryOut, MessageStatusOut } from "./tracking.schemas";

/** Ids per lookup statement: a bulk poll of 1000 runs as up to 4 statements side by side. */
const STATUS_CHUNK = 250;

/**
 * The statuses of `ids` (in the order given, repeats answered again): indexed lookups on the
 * unique key. Over a large table each id costs an index descent and a heap page, mostly outside
 * PostgreSQL's buffers, so a bulk poll is split into chunks run on separate connections at once.
 */
export async function statusesOf(sequelize: Sequelize, companyId: string, channel: Channel, ids: string[]): Promise<MessageStatusOut[]> {
  const distinct = [...new Set(ids)];
  const chunks: string[][] = [];
  for (let i = 0; i < distinct.length; i += STATUS_CHUNK) chunks.push(distinct.slice(i, i + STATUS_CHUNK));
  const results = await Promise.all(
    chunks.map((chunk) =>
      sequelize.query<StatusRow>(`SELECT ${STATUS_COLUMNS} FROM messages WHERE company_id = $1 AND channel = $2 AND customer_message_id = ANY ($3::text[])`, {
        bind: [companyId, channel, chunk],
        type: QueryTypes.SELECT,
      }),
    ),
  );
  const byId = new Map(results.flat().map((r) => [r.customer_message_id, toStatusOut(r)]));
  return ids.map((id) => byId.get(id) ?? unknownStatus(id, channel));
}

interface Cursor {
  s: string;
  i: string;
}

const CURSOR_TIME = /^(19[7-9]\d|[2-9]\d{3})-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;
const MAX_BIGINT = 9223372036854775807n;

const encodeCursor = (c: Cursor) => Buffer.from(JSON.stringify([c.s, c.i])).toString("base64url");

function decodeCursor(raw: string): Cursor {
  try {
    const v = JSON.parse(Buffer.from(raw, "base64url").toString("utf8")) as unknown;
    // Exactly what encodeCursor wrote: a UTC timestamp with microseconds, and a bigint id.
    if (
      Array.isArray(v) &&
      v.length === 2 &&
      typeof v[0] === "string" &&
      typeof v[1] === "string" &&
      CURSOR_TIME.test(v[0]) &&
      !Number.isNaN(Date.parse(v[0])) &&
      /^\d{1,19}$/.test(v[1]) &&
      BigInt(v[1]) <= MAX_BIGINT
    ) {
      return { s: v[0], i: v[1] };
    }
  } catch {
    // fall through
  }
  throw badRequest("The cursor is not one this API gave out.", [{ path: "cursor", message: "is not a valid cursor" }]);
}

/**
 * One page of the account's sent messages, newest first: (sent_at, id) below the cursor, on the
 * index that starts with the filter's equality columns (company, then destination or campaign).
 */
export async function historyPage(exec: Exec, companyId: string, channels: Channel[], q: HistoryIn): Promise<HistoryOut> {
  const bind: unknown[] = [];
  const param = (value: unknown, cast: string) => {
    bind.push(value);
    return `$${bind.length}::${cast}`;
  };
  const where = [...historyConditions(companyId, channels, q, param), "m.sent_at IS NOT NULL"];
  if (q.cursor) {
    const c = decodeCursor(q.cursor);
    bind.push(c.s, c.i);
    where.push(`(m.sent_at, m.id) < ($${bind.length - 1}::timestamptz, $${bind.length}::bigint)`);
  }
  bind.push(q.limit + 1);
  const rows = await exec<HistoryRow>(
    `SELECT m.id, ${STATUS_COLUMNS.split(", ")
      .map((c) => `m.${c}`)
      .join(", ")}, m.text, m.campaign_id, m.total_parts, m.price,
            to_char(m.sent_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS sent_key
       FROM messages m
      WHERE ${where.join(" AND ")}
      ORDER BY m.sent_at DESC, m.id DESC
      LIMIT $${bind.length}`,
    bind,
  );
  const more = rows.length > q.limit;
  const page = more ? rows.slice(0, q.limit) : rows;
  const last = page[page.length - 1];
  return {
    data: page.map(toHistoryItem),
    limit: q.limit,
    nextCursor: more && last ? encodeCursor({ s: last.sent_key, i: String(last.id) }) : null,
  };
}

/**
 * Removes messages created before `cutoff`, `batchSize` rows per statement,
 * each its own short transaction, skipping rows another writer holds; returns how many went.
 */
export async function purgeBefore(
  sequelize: Sequelize,
  cutoff: Date,
  batchSize: number,
  maxBatches = Infinity,
): Promise<{ messages: number; batches: number }> {
  const out = { messages: 0, batches: 0 };
  for (const [table, field] of [["messages", "messages"]] as const) {
    for (;;) {
      if (out.batches >= maxBatches) return out;
      const [row] = await sequelize.query<{ n: string }>(
        `WITH gone AS (DELETE FROM ${table} WHERE id IN (SELECT id FROM ${table} WHERE created_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING 1)
         SELECT count(*) AS n FROM gone`,
        { bind: [cutoff.toISOString(), batchSize], type: QueryTypes.SELECT },
      );
      const n = Number(row!.n);
      out.batches++;
      out[field] += n;
      if (n < batchSize) break;
    }
  }
  return out;
}
