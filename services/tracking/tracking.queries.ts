/**
 * Reads of the tracking tables: polling (one index lookup per id), the message history (keyset
 * pagination on an index: no OFFSET, no COUNT) and retention (bounded batches).
 */
import { QueryTypes, type Sequelize } from "sequelize";
import { CHANNELS, statusByCode, statusByName, type Channel } from "../../lib/channels";
import { badRequest } from "../../lib/errors";
import type { HistoryIn, HistoryItemOut, HistoryOut, MessageStatusOut } from "./tracking.schemas";
import { dateError } from "./tracking.ingress";
import { iso } from "../../lib/time";

interface StatusRow {
  customer_message_id: string;
  channel: Channel;
  destination: string;
  sent_at: Date | null;
  status_code: number;
  delivery_date: Date | null;
  read_at: Date | null;
  simulation: boolean;
}

interface HistoryRow extends StatusRow {
  id: string;
  text: string | null;
  campaign_id: string | null;
  total_parts: number;
  price: string | null;
  sent_key: string;
}

const STATUS_COLUMNS = "customer_message_id, channel, destination, sent_at, status_code, delivery_date, read_at, simulation";

export function toStatusOut(r: StatusRow): MessageStatusOut {
  const st = statusByCode(r.status_code);
  return {
    customerMessageId: r.customer_message_id,
    channel: r.channel,
    deliveryStatus: st.name,
    statusCode: st.code,
    description: st.description,
    destination: r.destination,
    sentAt: iso(r.sent_at),
    deliveryDate: iso(r.delivery_date),
    readAt: iso(r.read_at),
    simulation: r.simulation,
  };
}

/** What an id the account never sent answers: UNKNOWN, code 0. */
export function unknownStatus(customerMessageId: string, channel: Channel): MessageStatusOut {
  return {
    customerMessageId,
    channel,
    deliveryStatus: "UNKNOWN",
    statusCode: 0,
    description: "unknown",
    destination: null,
    sentAt: null,
    deliveryDate: null,
    readAt: null,
    simulation: false,
  };
}

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
/** The history filters (GET /messages/history, its export and delivery reports). */
export type HistoryFilters = Pick<HistoryIn, "channel" | "status" | "destination" | "campaignId" | "from" | "to">;

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
 * One page of the account's sent messages, newest first: (sent_at, id) below the cursor, on the
 * index that starts with the filter's equality columns (company, then destination or campaign).
 */
export async function historyPage(sequelize: Sequelize, companyId: string, channels: Channel[], q: HistoryIn): Promise<HistoryOut> {
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
  const rows = await sequelize.query<HistoryRow>(
    `SELECT m.id, ${STATUS_COLUMNS.split(", ")
      .map((c) => `m.${c}`)
      .join(", ")}, m.text, m.campaign_id, m.total_parts, m.price,
            to_char(m.sent_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS sent_key
       FROM messages m
      WHERE ${where.join(" AND ")}
      ORDER BY m.sent_at DESC, m.id DESC
      LIMIT $${bind.length}`,
    { bind, type: QueryTypes.SELECT },
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

function toHistoryItem(r: HistoryRow): HistoryItemOut {
  return { ...toStatusOut(r), text: r.text, campaignId: r.campaign_id, totalParts: r.total_parts, price: r.price === null ? null : Number(r.price) };
}

/**
 * Removes messages (and inbound messages) created before `cutoff`, `batchSize` rows per statement,
 * each its own short transaction, skipping rows another writer holds; returns how many went.
 */
export async function purgeBefore(
  sequelize: Sequelize,
  cutoff: Date,
  batchSize: number,
  maxBatches = Infinity,
): Promise<{ messages: number; inbound: number; batches: number }> {
  const out = { messages: 0, inbound: 0, batches: 0 };
  for (const [table, field] of [
    ["messages", "messages"],
    ["inbound_messages", "inbound"],
  ] as const) {
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
