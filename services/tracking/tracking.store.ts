/**
 * Ingestion: what upstreams report becomes message rows, statuses and outbox events, set-based and
 * in one transaction per write. The status model lives in `fold` (pure, unit-tested): receipts and
 * reads are folded into a message's state in arrival order, and every change the spec says produces
 * an event yields that event, exactly once.
 */
import type { Sequelize } from "sequelize";
import { rawTransaction, type Exec } from "../../lib/db";
import { DELIVERED, inFlightCode, statusByCode, type Channel } from "../../lib/channels";
import { iso } from "../../lib/time";
import type { InboundIn, RegistrationIn } from "./tracking.schemas";

export interface ReceiptItem {
  kind: "receipt";
  channel: Channel;
  companyId: string;
  messageId: string;
  destination: string;
  code: number;
  /** ISO 8601, UTC. */
  date: string;
  price?: number;
  /** The carrier's part count, when it said (SMS); RCS and WhatsApp: 1. */
  totalParts: number | null;
  numPart: number;
}

export interface ReadItem {
  kind: "read";
  channel: Channel;
  companyId: string;
  messageId: string;
  destination: string;
  date: string;
}

export type IngestItem =
  { kind: "message"; message: RegistrationIn } | ReceiptItem | ReadItem | { kind: "inbound"; channel: "RCS" | "WHATSAPP"; inbound: InboundIn };

/** A message row as the fold sees it. */
export interface MessageState {
  id: string | null;
  companyId: string;
  channel: Channel;
  customerMessageId: string;
  destination: string;
  sentAt: string | null;
  totalParts: number;
  simulation: boolean;
  statusCode: number;
  deliveryDate: string | null;
  readAt: string | null;
  price: number | null;
  partCodes: Array<number | null> | null;
  lastPartDate: string | null;
  changed: boolean;
}

export interface OutboxEvent {
  company_id: string;
  channel: Channel;
  event_type: "DELIVERY" | "READ" | "INBOUND";
  message_id: string;
  num_part: number | null;
  payload: Record<string, unknown>;
  message_sent_at: string | null;
}

/** RCS/WhatsApp reachability learnt from a receipt, for the contacts' communicationSupported. */
export interface ChannelSupport {
  companyId: string;
  channel: "RCS" | "WHATSAPP";
  destination: string;
  supported: boolean;
}

export interface WriteEffects {
  events: number;
  support: ChannelSupport[];
}

const isFinal = (code: number) => statusByCode(code).final;
const keyOf = (companyId: string, channel: string, id: string) => `${companyId}\u0000${channel}\u0000${id}`;

/** The state of a message first heard of through a receipt or read (its registration still to come). */
export function placeholder(item: ReceiptItem | ReadItem): MessageState {
  return {
    id: null,
    companyId: item.companyId,
    channel: item.channel,
    customerMessageId: item.messageId,
    destination: item.destination,
    sentAt: null,
    totalParts: item.kind === "receipt" ? (item.totalParts ?? 1) : 1,
    simulation: false,
    statusCode: inFlightCode(item.channel),
    deliveryDate: null,
    readAt: null,
    price: null,
    partCodes: null,
    lastPartDate: null,
    changed: true,
  };
}

const addPrice = (a: number | null, b: number | undefined) => (b === undefined ? a : Math.round(((a ?? 0) + b) * 1e6) / 1e6);
const later = (a: string | null, b: string) => (a === null || Date.parse(b) > Date.parse(a) ? b : a);

/**
 * Folds one receipt or read into a message's state (mutating it) and returns the event it produces,
 * or null: a repeat, a receipt for a message already final, or a simulated message.
 */
export function fold(s: MessageState, item: ReceiptItem | ReadItem): OutboxEvent | null {
  if (item.kind === "read") {
    if (s.readAt !== null) return null;
    s.readAt = item.date;
    s.changed = true;
    return s.simulation
      ? null
      : event(s, "READ", null, { eventType: "READ", channel: s.channel, messageId: s.customerMessageId, destination: item.destination, eventDate: item.date });
  }
  if (isFinal(s.statusCode)) return null; // final codes never change; a repeat makes no second event
  let numPart: number | null = null;
  if (s.channel === "SMS") {
    // The carrier's part count is the authority until the first part is recorded: the registration
    // may have left it out or got it wrong.
    if (item.totalParts !== null && item.totalParts !== s.totalParts && s.partCodes === null) s.totalParts = item.totalParts;
    if (s.totalParts > 1) {
      if (item.numPart > s.totalParts) return null;
      const codes = s.partCodes ?? (s.partCodes = Array.from({ length: s.totalParts }, () => null));
      if (codes[item.numPart - 1] != null) return null; // this part was already reported
      codes[item.numPart - 1] = item.code;
      s.lastPartDate = later(s.lastPartDate, item.date);
      s.price = addPrice(s.price, item.price);
      numPart = item.numPart;
      if (codes.every((c) => c != null)) {
        // Final once every part has a receipt: DELIVERED if all were, else the lowest-numbered failure.
        s.statusCode = codes.find((c) => c !== DELIVERED) ?? DELIVERED;
        s.deliveryDate = s.lastPartDate;
      }
    } else {
      s.statusCode = item.code;
      s.deliveryDate = item.date;
      s.price = addPrice(s.price, item.price);
      numPart = 1;
    }
  } else {
    s.statusCode = item.code;
    s.deliveryDate = item.date;
  }
  s.changed = true;
  if (s.simulation) return null;
  return event(s, "DELIVERY", numPart, deliveryPayload(item, s.totalParts, numPart));
}

/** The DELIVERY event of spec part 6 for a receipt: SMS adds its price and `numPart` of `totalParts`. */
function deliveryPayload(r: ReceiptItem, totalParts: number, numPart: number | null): Record<string, unknown> {
  const st = statusByCode(r.code);
  return withoutEmpty({
    eventType: "DELIVERY",
    channel: r.channel,
    messageId: r.messageId,
    destination: r.destination,
    statusCode: st.code,
    description: st.description,
    eventDate: r.date,
    ...(r.channel === "SMS" ? { price: r.price, totalParts, numPart } : {}),
  });
}

/** Fields without a value are omitted (spec part 6). */
function withoutEmpty(payload: Record<string, unknown>): Record<string, unknown> {
  for (const k of Object.keys(payload)) if (payload[k] === undefined || payload[k] === null) delete payload[k];
  return payload;
}

function event(s: MessageState, type: OutboxEvent["event_type"], numPart: number | null, payload: Record<string, unknown>): OutboxEvent {
  return {
    company_id: s.companyId,
    channel: s.channel,
    event_type: type,
    message_id: s.customerMessageId,
    num_part: numPart,
    payload: withoutEmpty(payload),
    message_sent_at: s.sentAt,
  };
}

interface MessageRow {
  id: string;
  company_id: string;
  channel: Channel;
  customer_message_id: string;
  destination: string;
  sent_at: Date | null;
  total_parts: number;
  simulation: boolean;
  status_code: number;
  delivery_date: Date | null;
  read_at: Date | null;
  price: string | null;
  part_codes: number[] | null;
  last_part_date: Date | null;
}

function stateOf(r: MessageRow): MessageState {
  return {
    id: r.id,
    companyId: r.company_id,
    channel: r.channel,
    customerMessageId: r.customer_message_id,
    destination: r.destination,
    sentAt: iso(r.sent_at),
    totalParts: r.total_parts,
    simulation: r.simulation,
    statusCode: r.status_code,
    deliveryDate: iso(r.delivery_date),
    readAt: iso(r.read_at),
    price: r.price === null ? null : Number(r.price),
    partCodes: r.part_codes,
    lastPartDate: iso(r.last_part_date),
    changed: false,
  };
}

/** A placeholder lost its insert to a concurrent writer: the whole write is retried. */
export class RetryWrite extends Error {
  readonly retryable = true;
}

const OUTBOX_INSERT = `INSERT INTO outbox_events (company_id, channel, event_type, message_id, num_part, payload, message_sent_at)
  SELECT x.company_id, x.channel, x.event_type, x.message_id, x.num_part, x.payload, x.message_sent_at
    FROM jsonb_to_recordset($1::jsonb) AS x(company_id text, channel text, event_type text, message_id text, num_part smallint, payload jsonb, message_sent_at timestamptz)`;

const STATE_COLUMNS = `status_code smallint, delivery_date timestamptz, read_at timestamptz, price numeric, part_codes smallint[], last_part_date timestamptz, total_parts smallint`;
const stateJson = (s: MessageState) => ({
  status_code: s.statusCode,
  delivery_date: s.deliveryDate,
  read_at: s.readAt,
  price: s.price,
  part_codes: s.partCodes,
  last_part_date: s.lastPartDate,
  total_parts: s.totalParts,
});

/** Everything a batch of ingress items changes, in one transaction the caller holds (`exec` runs in it). */
export async function writeItems(exec: Exec, items: IngestItem[]): Promise<WriteEffects> {
  const q = exec;
  const run = exec;
  let events: OutboxEvent[] = [];
  let eventCount = 0;
  const support: ChannelSupport[] = [];

  // 1. Registrations. A repeat changes nothing; a placeholder made by an early receipt gets the
  //    registration's data and keeps the status its receipts gave it.
  const registrations = new Map<string, RegistrationIn>();
  for (const it of items) {
    if (it.kind !== "message") continue;
    const m = it.message;
    const k = keyOf(m.companyId, m.channel, m.customerMessageId);
    if (!registrations.has(k)) registrations.set(k, m);
  }
  if (registrations.size > 0) {
    const rows = [...registrations.values()].map((m) => ({
      c: m.companyId,
      ch: m.channel,
      id: m.customerMessageId,
      d: m.destination,
      s: m.sentAt ? new Date(m.sentAt).toISOString() : null,
      p: m.totalParts ?? 1,
      tx: m.text ?? null,
      cp: m.campaignId ?? null,
      sim: m.simulation ?? false,
      st: inFlightCode(m.channel),
    }));
    const late = await q<{ company_id: string; channel: string; customer_message_id: string; created_at: Date }>(
      `WITH up AS (
         INSERT INTO messages AS m (company_id, channel, customer_message_id, destination, sent_at, total_parts, text, campaign_id, simulation, status_code)
         SELECT x.c, x.ch, x.id, x.d, COALESCE(x.s, date_trunc('milliseconds', now())), x.p, x.tx, x.cp, x.sim, x.st
           FROM jsonb_to_recordset($1::jsonb) AS x(c text, ch text, id text, d text, s timestamptz, p smallint, tx text, cp text, sim boolean, st smallint)
         ON CONFLICT (company_id, channel, customer_message_id) DO UPDATE
            SET sent_at = EXCLUDED.sent_at, text = EXCLUDED.text, campaign_id = EXCLUDED.campaign_id,
                simulation = EXCLUDED.simulation, destination = EXCLUDED.destination, updated_at = now()
          WHERE m.sent_at IS NULL
         RETURNING m.company_id, m.channel, m.customer_message_id, m.created_at, (m.simulation AND NOT (m.xmax = 0)) AS late_simulation)
       SELECT company_id, channel, customer_message_id, created_at FROM up WHERE late_simulation`,
      [JSON.stringify(rows)],
    );
    // A simulated message whose receipt came first: its events must never go out. They were all
    // written since its row was (the BRIN index on created_at keeps this to recent blocks).
    if (late.length > 0) {
      await run(
        `DELETE FROM outbox_events o USING jsonb_to_recordset($1::jsonb) AS x(c text, ch text, id text, since timestamptz)
          WHERE o.created_at >= x.since AND o.company_id = x.c AND o.channel = x.ch AND o.message_id = x.id AND o.event_type IN ('DELIVERY', 'READ')`,
        [JSON.stringify(late.map((r) => ({ c: r.company_id, ch: r.channel, id: r.customer_message_id, since: new Date(r.created_at).toISOString() })))],
      );
    }
  }

  // 2a. The common case in one statement: the first receipt of a registered single-part message
  //     still in flight. The UPDATE's own condition re-checks "in flight" under the row lock, so a
  //     repeat or a concurrent receipt simply does not match; whatever does not match goes to 2b.
  let updates = items.filter((it): it is ReceiptItem | ReadItem => it.kind === "receipt" || it.kind === "read");
  if (updates.length > 0) {
    const firstOf = new Map<string, number>();
    updates.forEach((u, i) => {
      const k = keyOf(u.companyId, u.channel, u.messageId);
      if (!firstOf.has(k)) firstOf.set(k, i);
    });
    const fast = updates
      .map((u, i) => ({ u, i }))
      .filter(
        ({ u, i }) => u.kind === "receipt" && (u.totalParts ?? 1) === 1 && u.numPart === 1 && firstOf.get(keyOf(u.companyId, u.channel, u.messageId)) === i,
      )
      .map(({ u, i }) => ({ i, r: u as ReceiptItem }));
    if (fast.length > 0) {
      const rows = fast.map(({ i, r }) => {
        return { i, c: r.companyId, ch: r.channel, id: r.messageId, code: r.code, d: r.date, p: r.price ?? null, payload: deliveryPayload(r, 1, 1) };
      });
      const applied = await q<{ i: number; simulation: boolean; events: string }>(
        `WITH x AS (
           SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(i int, c text, ch text, id text, code smallint, d timestamptz, p numeric, payload jsonb)),
         upd AS (
           UPDATE messages AS m
              SET status_code = x.code, delivery_date = x.d, price = CASE WHEN x.p IS NULL THEN m.price ELSE COALESCE(m.price, 0) + x.p END, updated_at = now()
             FROM x
            WHERE m.company_id = x.c AND m.channel = x.ch AND m.customer_message_id = x.id
              AND m.status_code IN (0, 1) AND m.total_parts = 1
           RETURNING x.i, m.simulation, m.sent_at, x.c, x.ch, x.id, x.payload),
         ev AS (
           INSERT INTO outbox_events (company_id, channel, event_type, message_id, num_part, payload, message_sent_at)
           SELECT c, ch, 'DELIVERY', id, CASE WHEN ch = 'SMS' THEN 1 END, payload, sent_at FROM upd WHERE NOT simulation ORDER BY i
           RETURNING 1)
         SELECT i, simulation, (SELECT count(*) FROM ev) AS events FROM upd`,
        [JSON.stringify(rows)],
      );
      const done = new Set(applied.map((a) => Number(a.i)));
      const simulated = new Set(applied.filter((a) => a.simulation).map((a) => Number(a.i)));
      eventCount += applied.length > 0 ? Number(applied[0]!.events) : 0;
      for (const { i, r } of fast) {
        if (!done.has(i) || simulated.has(i)) continue; // a simulated message was never sent: it proves nothing about the number
        if (r.channel !== "SMS" && [DELIVERED, 10, 11].includes(r.code)) {
          support.push({ companyId: r.companyId, channel: r.channel, destination: r.destination, supported: r.code === DELIVERED });
        }
      }
      updates = updates.filter((_, i) => !done.has(i));
    }
  }

  // 2b. Everything else (multi-part SMS, reads, messages not yet registered, repeats), folded in
  //     arrival order into the rows they concern, locked in id order.
  if (updates.length > 0) {
    const keys = new Map<string, { c: string; ch: string; id: string }>();
    for (const u of updates) keys.set(keyOf(u.companyId, u.channel, u.messageId), { c: u.companyId, ch: u.channel, id: u.messageId });
    const found = await q<MessageRow>(
      `SELECT m.id, m.company_id, m.channel, m.customer_message_id, m.destination, m.sent_at, m.total_parts, m.simulation,
              m.status_code, m.delivery_date, m.read_at, m.price, m.part_codes, m.last_part_date
         FROM jsonb_to_recordset($1::jsonb) AS k(c text, ch text, id text)
         JOIN messages m ON m.company_id = k.c AND m.channel = k.ch AND m.customer_message_id = k.id
        ORDER BY m.id FOR UPDATE OF m`,
      [JSON.stringify([...keys.values()])],
    );
    const states = new Map<string, MessageState>();
    for (const r of found) states.set(keyOf(r.company_id, r.channel, r.customer_message_id), stateOf(r));
    for (const u of updates) {
      const k = keyOf(u.companyId, u.channel, u.messageId);
      let s = states.get(k);
      if (!s) states.set(k, (s = placeholder(u)));
      const ev = fold(s, u);
      if (ev) events.push(ev);
      if (ev && u.kind === "receipt" && u.channel !== "SMS" && [DELIVERED, 10, 11].includes(u.code)) {
        support.push({ companyId: u.companyId, channel: u.channel, destination: u.destination, supported: u.code === DELIVERED });
      }
    }
    const fresh = [...states.values()].filter((s) => s.id === null);
    const changed = [...states.values()].filter((s) => s.id !== null && s.changed);
    if (fresh.length > 0) {
      const inserted = await q<{ n: string }>(
        `WITH ins AS (
           INSERT INTO messages (company_id, channel, customer_message_id, destination, total_parts, status_code, delivery_date, read_at, price, part_codes, last_part_date)
           SELECT x.c, x.ch, x.id, x.d, x.total_parts, x.status_code, x.delivery_date, x.read_at, x.price, x.part_codes, x.last_part_date
             FROM jsonb_to_recordset($1::jsonb) AS x(c text, ch text, id text, d text, ${STATE_COLUMNS})
           ON CONFLICT (company_id, channel, customer_message_id) DO NOTHING
           RETURNING 1)
         SELECT count(*) AS n FROM ins`,
        [JSON.stringify(fresh.map((s) => ({ c: s.companyId, ch: s.channel, id: s.customerMessageId, d: s.destination, ...stateJson(s) })))],
      );
      // Registered (or received) by a concurrent write meanwhile: start over, it will be found.
      if (Number(inserted[0]!.n) !== fresh.length) throw new RetryWrite("a message row appeared concurrently");
    }
    if (changed.length > 0) {
      // The updates, and the outbox rows of what came so far, in one statement (one round trip).
      const pending = events;
      eventCount += pending.length;
      events = [];
      await run(
        `WITH upd AS (
           UPDATE messages AS m
              SET status_code = x.status_code, delivery_date = x.delivery_date, read_at = x.read_at, price = x.price,
                  part_codes = x.part_codes, last_part_date = x.last_part_date, total_parts = x.total_parts, updated_at = now()
             FROM jsonb_to_recordset($1::jsonb) AS x(id bigint, ${STATE_COLUMNS})
            WHERE m.id = x.id)
         ${OUTBOX_INSERT.replace("$1", "$2")}`,
        [JSON.stringify(changed.map((s) => ({ id: s.id, ...stateJson(s) }))), JSON.stringify(pending)],
      );
    }
  }

  // 3. Inbound messages: stored once; the first arrival produces the INBOUND event.
  const inbound = new Map<string, { channel: "RCS" | "WHATSAPP"; v: InboundIn }>();
  for (const it of items) {
    if (it.kind !== "inbound") continue;
    const k = keyOf(it.inbound.companyId, it.channel, it.inbound.messageId);
    if (!inbound.has(k)) inbound.set(k, { channel: it.channel, v: it.inbound });
  }
  if (inbound.size > 0) {
    const rows = [...inbound.values()].map(({ channel, v }) => ({
      c: v.companyId,
      ch: channel,
      id: v.messageId,
      src: v.source,
      dst: v.destination,
      at: new Date(v.receivedDate).toISOString(),
      ty: v.messageType,
      tx: v.text ?? null,
      mk: v.mediaKey ?? null,
    }));
    const created = await q<{ company_id: string; channel: string; message_id: string }>(
      `INSERT INTO inbound_messages (company_id, channel, message_id, source, destination, received_at, message_type, text, media_key)
       SELECT x.c, x.ch, x.id, x.src, x.dst, x.at, x.ty, x.tx, x.mk
         FROM jsonb_to_recordset($1::jsonb) AS x(c text, ch text, id text, src text, dst text, at timestamptz, ty text, tx text, mk text)
       ON CONFLICT (company_id, channel, message_id) DO NOTHING
       RETURNING company_id, channel, message_id`,
      [JSON.stringify(rows)],
    );
    for (const r of created) {
      const { channel, v } = inbound.get(keyOf(r.company_id, r.channel, r.message_id))!;
      const payload: Record<string, unknown> = {
        eventType: "INBOUND",
        channel,
        messageId: v.messageId,
        source: v.source,
        destination: v.destination,
        receivedDate: new Date(v.receivedDate).toISOString(),
        messageType: v.messageType,
        text: v.text,
        mediaKey: v.mediaKey,
      };
      events.push({
        company_id: v.companyId,
        channel,
        event_type: "INBOUND",
        message_id: v.messageId,
        num_part: null,
        payload: withoutEmpty(payload),
        message_sent_at: null,
      });
    }
  }

  // 4. The outbox: the events of exactly these changes (those not written with the updates above).
  if (events.length > 0) await run(OUTBOX_INSERT, [JSON.stringify(events)]);
  return { events: eventCount + events.length, support };
}

const RETRYABLE_SQLSTATES = new Set(["40P01", "40001", "23505"]);

/** Runs `writeItems` in a transaction, again (up to 5 times) after a deadlock, serialization failure or lost race. */
export async function writeWithRetry(sequelize: Sequelize, items: IngestItem[]): Promise<WriteEffects> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await rawTransaction(sequelize, (exec) => writeItems(exec, items));
    } catch (err) {
      const code = (err as { code?: unknown }).code;
      const retryable = err instanceof RetryWrite || (typeof code === "string" && RETRYABLE_SQLSTATES.has(code));
      if (!retryable || attempt >= 5) throw err;
      await new Promise((r) => setTimeout(r, 5 * attempt + Math.random() * 10));
    }
  }
}

/**
 * Group commit: concurrent submissions are written together, one transaction for many requests,
 * which is what lets single-object posts go past the cost of one commit each. A submission's
 * promise settles once its rows are committed. If a group fails, its submissions are written one
 * by one, so one bad submission never fails another.
 */
export class GroupCommitter {
  private queue: Array<{ items: IngestItem[]; resolve: () => void; reject: (e: unknown) => void }> = [];
  private running = 0;

  constructor(
    private readonly write: (items: IngestItem[]) => Promise<void>,
    private readonly maxConcurrent = 2,
    private readonly maxItems = 2000,
  ) {}

  submit(items: IngestItem[]): Promise<void> {
    return new Promise((resolve, reject) => {
      this.queue.push({ items, resolve, reject });
      this.pump();
    });
  }

  /** Submissions waiting for a transaction (for metrics and tests). */
  get pending(): number {
    return this.queue.length;
  }

  private pump(): void {
    while (this.running < this.maxConcurrent && this.queue.length > 0) {
      const group = [this.queue.shift()!];
      let n = group[0]!.items.length;
      while (this.queue.length > 0 && n + this.queue[0]!.items.length <= this.maxItems) {
        const next = this.queue.shift()!;
        n += next.items.length;
        group.push(next);
      }
      this.running++;
      void this.flush(group).finally(() => {
        this.running--;
        this.pump();
      });
    }
  }

  private async flush(group: Array<{ items: IngestItem[]; resolve: () => void; reject: (e: unknown) => void }>): Promise<void> {
    try {
      await this.write(group.length === 1 ? group[0]!.items : group.flatMap((g) => g.items));
      for (const g of group) g.resolve();
    } catch (err) {
      if (group.length === 1) return group[0]!.reject(err);
      for (const g of group) {
        try {
          await this.write(g.items);
          g.resolve();
        } catch (e) {
          g.reject(e);
        }
      }
    }
  }
}
