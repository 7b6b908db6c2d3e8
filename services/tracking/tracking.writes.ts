/**
 * Ingestion's writes: what upstreams report becomes message rows, statuses and outbox events,
 * set-based, in the one transaction the caller holds. Registrations first, then the common receipt
 * in one statement, then everything else folded (tracking.fold.ts) into the rows it concerns, then
 * the outbox rows of exactly these changes. (Inbound messages belong to inbox: inbox.ingest.)
 */
import type { Exec } from "../../lib/db";
import { inFlightCode } from "../../lib/channels";
import { MESSAGE_STATUS_EVENTS_SQL, type StatusChangeKey } from "../inbox/inbox.contract";
import { OUTBOX_INSERT, type ChannelSupport } from "./tracking.contract";
import {
  channelSupportOf,
  deliveryPayload,
  fold,
  placeholder,
  type IngestItem,
  type MessageState,
  type OutboxEvent,
  type ReadItem,
  type ReceiptItem,
} from "./tracking.fold";
import { MESSAGE_COLUMNS, stateOf, type MessageRow } from "./tracking.models";
import type { RegistrationIn } from "./tracking.schemas";

export interface WriteEffects {
  events: number;
  support: ChannelSupport[];
  /** Accounts whose inbox replies changed status (their `message.status` events were written): announced after the commit. */
  inboxCompanies: string[];
}

const keyOf = (companyId: string, channel: string, id: string) => `${companyId}\u0000${channel}\u0000${id}`;

/** A placeholder lost its insert to a concurrent writer: the whole write is retried. */
export class RetryWrite extends Error {}

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
  // RCS/WhatsApp messages whose status or read changed here: the inbox's replies among them get a `message.status` event.
  const statusChanged: StatusChangeKey[] = [];
  const changedStatus = (u: ReceiptItem | ReadItem) => {
    if (u.channel === "RCS" || u.channel === "WHATSAPP") statusChanged.push({ c: u.companyId, ch: u.channel, id: u.messageId });
  };

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
        if (done.has(i)) changedStatus(r);
        if (!done.has(i) || simulated.has(i)) continue; // a simulated message was never sent: it proves nothing about the number
        const learnt = channelSupportOf(r);
        if (learnt) support.push(learnt);
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
      `SELECT ${MESSAGE_COLUMNS}
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
      if (ev) changedStatus(u);
      const learnt = ev && u.kind === "receipt" ? channelSupportOf(u) : null;
      if (learnt) support.push(learnt);
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

  // 3. The outbox: the events of exactly these changes (those not written with the updates above).
  if (events.length > 0) await run(OUTBOX_INSERT, [JSON.stringify(events)]);

  // 4. The inbox's live view: a `message.status` event for each inbox reply among the changed messages (inbox.contract.ts).
  const inbox = statusChanged.length > 0 ? await q<{ company_id: string }>(MESSAGE_STATUS_EVENTS_SQL, [JSON.stringify(statusChanged)]) : [];
  return { events: eventCount + events.length, support, inboxCompanies: inbox.map((r) => r.company_id) };
}
