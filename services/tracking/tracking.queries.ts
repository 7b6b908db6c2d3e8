/**
 * The tracking service's SQL: polling (through the key, then the day by id), the message history
 * (keyset pagination on an index: no OFFSET, no COUNT), and ingestion's set-based writes
 * (tracking.writes.ts), each run by the `Exec` of the caller's transaction (the days themselves:
 * tracking.days.ts). The history filters are in tracking.filters.ts. Webhook events go to tracking's
 * own feed, `message_event_feed` (migration 0031), which the notifier follows.
 */
import { QueryTypes, type Sequelize } from "sequelize";
import type { Channel } from "../../lib/messaging/channels";
import type { Exec } from "../../lib/db/db";
import { badRequest } from "../../lib/errors";
import { webhookFeedInsert } from "../../lib/db/feeds";
import { runPrepared, type Param } from "../../lib/db/prepared";
import { WEBHOOK_ACCOUNTS_VIEW, type WebhookEvent } from "../notifier/notifier.contract";
import { historyConditions } from "./tracking.filters";
import type { MessageState } from "./tracking.fold";
import {
  MESSAGE_COLUMNS,
  STATUS_COLUMNS,
  toHistoryItem,
  toStatusOut,
  unknownStatus,
  type HistoryRow,
  type MessageRow,
  type StatusRow,
} from "./tracking.models";
import type { HistoryIn, HistoryOut, MessageStatusOut } from "./tracking.schemas";

/** Ids per lookup statement: a bulk poll of 1000 runs as up to 4 statements side by side. */
const STATUS_CHUNK = 250;

/** A message's key as one string (account, channel, customerMessageId), for maps of a batch. */
export const keyOf = (companyId: string, channel: string, id: string) => `${companyId}\u0000${channel}\u0000${id}`;

/** The milliseconds of 2020-01-01 (UTC): message ids count from it (migration 0023: `ms << 22 | n`). */
const ID_EPOCH_MS = 1_577_836_800_000n;
/** The day (UTC, since 1970) of a message id: its partition. */
export const dayOfMessageId = (id: string): bigint => ((BigInt(id) >> 22n) + ID_EPOCH_MS) / 86_400_000n;

/**
 * The messages of `ids` (one account's) as one statement: a branch per day, each `id = ANY` of that
 * day's ids, so that the planner prunes each branch to its one partition and probes only its ids
 * (one `id = ANY` of every id would probe each touched partition with all of them). `bind` holds
 * $1 (the account); the arrays are appended.
 */
export function byDaySql(columns: string, ids: string[], bind: unknown[], extra = ""): string {
  const days = new Map<bigint, string[]>();
  for (const id of ids) {
    const d = dayOfMessageId(id);
    const list = days.get(d);
    if (list) list.push(id);
    else days.set(d, [id]);
  }
  return [...days.values()]
    .map((list) => `SELECT ${columns} FROM messages m WHERE m.company_id = $1 AND m.id = ANY ($${bind.push(list)}::bigint[])${extra}`)
    .join(" UNION ALL ");
}

/**
 * The statuses of `ids` (in the order given, repeats answered again): the key's id from
 * `message_keys` (its primary key), then the rows by id, pruned to their days' partitions. Over a
 * large table each id costs two index descents and a heap page, mostly outside PostgreSQL's
 * buffers, so a bulk poll is split into chunks run on separate connections at once.
 */
export async function statusesOf(sequelize: Sequelize, companyId: string, channel: Channel, ids: string[]): Promise<MessageStatusOut[]> {
  const distinct = [...new Set(ids)];
  const chunks: string[][] = [];
  for (let i = 0; i < distinct.length; i += STATUS_CHUNK) chunks.push(distinct.slice(i, i + STATUS_CHUNK));
  const results = await Promise.all(
    chunks.map(async (chunk) => {
      const found = await sequelize.query<{ id: string }>(
        `SELECT id FROM message_keys WHERE company_id = $1 AND channel = $2 AND customer_message_id = ANY ($3::text[])`,
        { bind: [companyId, channel, chunk], type: QueryTypes.SELECT },
      );
      if (found.length === 0) return [];
      const bind: unknown[] = [companyId];
      const sql = byDaySql(
        STATUS_COLUMNS.split(", ")
          .map((c) => `m.${c}`)
          .join(", "),
        found.map((r) => String(r.id)),
        bind,
      );
      return sequelize.query<StatusRow>(sql, { bind, type: QueryTypes.SELECT });
    }),
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
export async function historyPage(exec: Exec, companyId: string, channels: Channel[], q: HistoryIn, o: { prepared?: boolean } = {}): Promise<HistoryOut> {
  // In the text (a LIMIT parameter's generic plan would be made for a tenth of the rows): an integer.
  if (!Number.isSafeInteger(q.limit) || q.limit < 1) throw new Error(`not a page size: ${q.limit}`);
  const params: Param[] = [];
  const param = (value: unknown, cast: string) => `$${params.push([value, cast])}::${cast}`;
  const where = [...historyConditions(companyId, channels, q, param), "m.sent_at IS NOT NULL"];
  if (q.cursor) {
    const c = decodeCursor(q.cursor);
    where.push(`(m.sent_at, m.id) < (${param(c.s, "timestamptz")}, ${param(c.i, "bigint")})`);
  }
  const sql = `SELECT m.id, ${STATUS_COLUMNS.split(", ")
    .map((c) => `m.${c}`)
    .join(", ")}, m.text, m.campaign_id, m.total_parts, m.price,
            to_char(m.sent_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS sent_key
       FROM messages m
      WHERE ${where.join(" AND ")}
      ORDER BY m.sent_at DESC, m.id DESC
      LIMIT ${q.limit + 1}`;
  // Over hundreds of daily partitions planning is most of a page's cost: planned once per connection
  // (lib/db/prepared.ts), not on embedded PGlite (one shared session, a few days).
  const rows = o.prepared
    ? await runPrepared<HistoryRow>(exec, "history", sql, params)
    : await exec<HistoryRow>(
        sql,
        params.map(([v]) => v),
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

// --- ingestion's writes (tracking.writes.ts): set-based, in the transaction `exec` runs in

/** The state columns of `messages` as a JSON record carries them (stateJson). */
const STATE_COLUMNS = `status_code smallint, delivery_date timestamptz, read_at timestamptz, price numeric, part_codes smallint[], last_part_date timestamptz, total_parts smallint`;
/** A message's state as the JSON record of STATE_COLUMNS. */
const stateJson = (s: MessageState) => ({
  status_code: s.statusCode,
  delivery_date: s.deliveryDate,
  read_at: s.readAt,
  price: s.price,
  part_codes: s.partCodes,
  last_part_date: s.lastPartDate,
  total_parts: s.totalParts,
});

/** A registration as the upsert reads it from its JSON array (short keys: the batch crosses as one text). */
export interface RegistrationRecord {
  c: string;
  ch: string;
  id: string;
  d: string;
  s: string | null;
  p: number;
  tx: string | null;
  cp: string | null;
  sim: boolean;
  st: number;
}

/** A simulated message whose receipt came before its registration. */
export interface LateSimulation {
  company_id: string;
  channel: string;
  customer_message_id: string;
  created_at: Date;
}

/** A message's key as the statements read it from their JSON arrays. */
export interface KeyRecord {
  c: string;
  ch: string;
  id: string;
}

/** The ids `message_keys` holds for `keys` (those it has): one probe of its primary key each. */
export function idsOf(exec: Exec, keys: KeyRecord[]): Promise<Array<KeyRecord & { mid: string }>> {
  return exec<KeyRecord & { mid: string }>(
    `SELECT k.company_id AS c, k.channel AS ch, k.customer_message_id AS id, k.id::text AS mid
       FROM jsonb_to_recordset($1::jsonb) AS x(c text, ch text, id text)
       JOIN message_keys k ON k.company_id = x.c AND k.channel = x.ch AND k.customer_message_id = x.id`,
    [JSON.stringify(keys)],
  );
}

/** The columns a registration sets, as its JSON record carries them. */
const REGISTRATION_RECORD = `c text, ch text, id text, d text, s timestamptz, p smallint, tx text, cp text, sim boolean, st smallint`;

/**
 * Inserts the registrations; a placeholder made by an early receipt (no sentAt yet) gets the
 * registration's data and keeps its status, a repeat changes nothing. Answers the simulated messages
 * among the placeholders completed (their events must never go out).
 *
 * The common case is one statement: the keys new to `message_keys` (ON CONFLICT DO NOTHING, which
 * waits for a concurrent writer of the same key and then skips it) and their rows under the ids they
 * drew. The rest, keys already there, are then found by id (a new statement sees what the concurrent
 * writer committed) and completed when they are placeholders.
 */
export async function upsertRegistrations(exec: Exec, rows: RegistrationRecord[]): Promise<LateSimulation[]> {
  const inserted = await exec<KeyRecord>(
    `WITH x AS (SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(${REGISTRATION_RECORD})),
     k AS (
       INSERT INTO message_keys (company_id, channel, customer_message_id) SELECT c, ch, id FROM x
       ON CONFLICT (company_id, channel, customer_message_id) DO NOTHING
       RETURNING company_id, channel, customer_message_id, id)
     INSERT INTO messages (id, company_id, channel, customer_message_id, destination, sent_at, total_parts, text, campaign_id, simulation, status_code)
     SELECT k.id, x.c, x.ch, x.id, x.d, COALESCE(x.s, date_trunc('milliseconds', now())), x.p, x.tx, x.cp, x.sim, x.st
       FROM k JOIN x ON x.c = k.company_id AND x.ch = k.channel AND x.id = k.customer_message_id
     RETURNING company_id AS c, channel AS ch, customer_message_id AS id`,
    [JSON.stringify(rows)],
  );
  if (inserted.length === rows.length) return [];
  const done = new Set(inserted.map((r) => keyOf(r.c, r.ch, r.id)));
  const rest = rows.filter((r) => !done.has(keyOf(r.c, r.ch, r.id)));
  const ids = new Map((await idsOf(exec, rest)).map((r) => [keyOf(r.c, r.ch, r.id), r.mid]));
  const known = rest.flatMap((r) => {
    const mid = ids.get(keyOf(r.c, r.ch, r.id));
    return mid ? [{ ...r, mid }] : [];
  });
  if (known.length === 0) return [];
  const bind: unknown[] = [JSON.stringify(known)];
  return exec<LateSimulation>(
    `WITH up AS (
       UPDATE messages AS m
          SET sent_at = COALESCE(x.s, date_trunc('milliseconds', now())), text = x.tx, campaign_id = x.cp,
              simulation = x.sim, destination = x.d, updated_at = now()
         FROM jsonb_to_recordset($1::jsonb) AS x(mid bigint, ${REGISTRATION_RECORD})
        WHERE m.company_id = x.c AND m.id = x.mid AND m.id = ANY ($${bind.push(known.map((r) => r.mid))}::bigint[]) AND m.sent_at IS NULL
       RETURNING m.company_id, m.channel, m.customer_message_id, m.created_at, m.simulation)
     SELECT company_id, channel, customer_message_id, created_at FROM up WHERE simulation`,
    bind,
  );
}

/**
 * Takes back the DELIVERY and READ events of late simulated messages (their events must never go
 * out): a RETRACT row in the feed for each, naming the time its row was made (every event of it was
 * written since). The notifier drops those it has not sent (notifier.feed.ts).
 */
export async function retractLateSimulationEvents(exec: Exec, late: LateSimulation[]): Promise<void> {
  const rows: WebhookEvent[] = late.map((r) => ({
    company_id: r.company_id,
    channel: r.channel as Channel,
    event_type: "RETRACT",
    message_id: r.customer_message_id,
    num_part: null,
    payload: null,
    message_sent_at: new Date(r.created_at).toISOString(),
  }));
  await exec(FEED_INSERT, [JSON.stringify(rows)]);
}

/** Tracking's webhook events into its feed (`$1`: a JSON array of `WebhookEvent`), for accounts with a webhook. */
const FEED_INSERT = webhookFeedInsert("message_event_feed", WEBHOOK_ACCOUNTS_VIEW);

/** A first receipt of a single-part message, as the one-statement update reads it (`i`: its place in the batch; `mid`: its message's id). */
export interface FirstReceiptRecord {
  i: number;
  mid: string;
  c: string;
  ch: string;
  id: string;
  code: number;
  d: string;
  p: number | null;
  payload: Record<string, unknown>;
}

/** A receipt the common statement applied: its place, its message's `simulation` and status after it, the events written in all. */
export interface AppliedReceipt {
  i: number;
  simulation: boolean;
  events: string;
  status_code: number;
  delivery_date: Date | null;
  read_at: Date | null;
}

/**
 * The common receipt in one statement: the first receipt of a registered single-part message still
 * in flight sets its status and writes its DELIVERY event (not for a simulated one, nor for an
 * account without a webhook). The UPDATE re-checks "in flight" under the row lock, so a repeat or a
 * concurrent receipt does not match. The ids are given twice: as the join's and as an array the
 * planner prunes the partitions by.
 * Answers the receipts applied, each with its message's `simulation` and new status, and the events written in all.
 */
export function applyFirstReceipts(exec: Exec, rows: FirstReceiptRecord[]): Promise<AppliedReceipt[]> {
  return exec<AppliedReceipt>(
    `WITH x AS (
       SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(i int, mid bigint, c text, ch text, id text, code smallint, d timestamptz, p numeric, payload jsonb)),
     upd AS (
       UPDATE messages AS m
          SET status_code = x.code, delivery_date = x.d, price = CASE WHEN x.p IS NULL THEN m.price ELSE COALESCE(m.price, 0) + x.p END, updated_at = now()
         FROM x
        WHERE m.company_id = x.c AND m.id = x.mid AND m.id = ANY ($2::bigint[])
          AND m.status_code IN (0, 1) AND m.total_parts = 1
       RETURNING x.i, m.simulation, m.sent_at, x.c, x.ch, x.id, x.payload, m.status_code, m.delivery_date, m.read_at),
     ev AS (
       INSERT INTO message_event_feed (company_id, channel, event_type, message_id, num_part, payload, message_sent_at)
       SELECT c, ch, 'DELIVERY', id, CASE WHEN ch = 'SMS' THEN 1 END, payload, sent_at FROM upd
        WHERE NOT simulation AND EXISTS (SELECT 1 FROM ${WEBHOOK_ACCOUNTS_VIEW} w WHERE w.company_id = upd.c) ORDER BY i
       RETURNING 1)
     SELECT i, simulation, (SELECT count(*) FROM ev) AS events, status_code, delivery_date, read_at FROM upd`,
    [JSON.stringify(rows), rows.map((r) => r.mid)],
  );
}

/**
 * The messages of `keys` (account and id), locked FOR UPDATE in id order: one probe of the day's
 * `(company_id, id)` key each, the ids given again as an array the planner prunes the days by.
 */
export function lockMessages(exec: Exec, keys: Array<{ c: string; mid: string }>): Promise<MessageRow[]> {
  return exec<MessageRow>(
    `SELECT ${MESSAGE_COLUMNS}
       FROM jsonb_to_recordset($1::jsonb) AS k(c text, mid bigint)
       JOIN messages m ON m.company_id = k.c AND m.id = k.mid
      WHERE m.id = ANY ($2::bigint[])
      ORDER BY m.id FOR UPDATE OF m`,
    [JSON.stringify(keys), keys.map((k) => k.mid)],
  );
}

/**
 * Inserts messages first heard of through a receipt or read (no registration yet): their keys, then
 * their rows under the ids drawn, in one statement; answers how many were inserted (fewer: a
 * concurrent writer made one).
 */
export async function insertPlaceholders(exec: Exec, fresh: MessageState[]): Promise<number> {
  const inserted = await exec<{ n: string }>(
    `WITH x AS (SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(c text, ch text, id text, d text, ${STATE_COLUMNS})),
     k AS (
       INSERT INTO message_keys (company_id, channel, customer_message_id) SELECT c, ch, id FROM x
       ON CONFLICT (company_id, channel, customer_message_id) DO NOTHING
       RETURNING company_id, channel, customer_message_id, id),
     ins AS (
       INSERT INTO messages (id, company_id, channel, customer_message_id, destination, total_parts, status_code, delivery_date, read_at, price, part_codes, last_part_date)
       SELECT k.id, x.c, x.ch, x.id, x.d, x.total_parts, x.status_code, x.delivery_date, x.read_at, x.price, x.part_codes, x.last_part_date
         FROM k JOIN x ON x.c = k.company_id AND x.ch = k.channel AND x.id = k.customer_message_id
       RETURNING 1)
     SELECT count(*) AS n FROM ins`,
    [JSON.stringify(fresh.map((s) => ({ c: s.companyId, ch: s.channel, id: s.customerMessageId, d: s.destination, ...stateJson(s) })))],
  );
  return Number(inserted[0]!.n);
}

/**
 * Writes the folded states of `changed` (by id) and the webhook events `events` in one statement (one
 * round trip); answers how many events were written (those of accounts with a webhook).
 */
export async function updateStatesWithEvents(exec: Exec, changed: MessageState[], events: WebhookEvent[]): Promise<number> {
  const [row] = await exec<{ n: number }>(
    `WITH upd AS (
       UPDATE messages AS m
          SET status_code = x.status_code, delivery_date = x.delivery_date, read_at = x.read_at, price = x.price,
              part_codes = x.part_codes, last_part_date = x.last_part_date, total_parts = x.total_parts, updated_at = now()
         FROM jsonb_to_recordset($1::jsonb) AS x(id bigint, c text, ${STATE_COLUMNS})
        WHERE m.company_id = x.c AND m.id = x.id AND m.id = ANY ($3::bigint[])),
     ev AS (${FEED_INSERT.replace("$1", "$2")} RETURNING 1)
     SELECT count(*)::int AS n FROM ev`,
    [JSON.stringify(changed.map((s) => ({ id: s.id, c: s.companyId, ...stateJson(s) }))), JSON.stringify(events), changed.map((s) => s.id)],
  );
  return Number(row?.n ?? 0);
}

/** Writes webhook events to the feed (one statement); answers how many were written (those of accounts with a webhook). */
export async function insertWebhookEvents(exec: Exec, events: WebhookEvent[]): Promise<number> {
  const [row] = await exec<{ n: number }>(`WITH ev AS (${FEED_INSERT} RETURNING 1) SELECT count(*)::int AS n FROM ev`, [JSON.stringify(events)]);
  return Number(row?.n ?? 0);
}
