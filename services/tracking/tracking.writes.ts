/**
 * Ingestion's writes: what upstreams report becomes message rows, statuses and webhook events,
 * set-based, in the one transaction the caller holds. Registrations first, then the common receipt
 * in one statement, then everything else folded (tracking.fold.ts) into the rows it concerns, then
 * the webhook events of exactly these changes (tracking's feed, which the notifier follows). (Inbound messages belong to inbox: inbox.ingest.) The
 * statements are in tracking.queries.ts.
 */
import type { Exec } from "../../lib/db/db";
import { inFlightCode } from "../../lib/messaging/channels";
import {
  channelSupportOf,
  deliveryPayload,
  fold,
  placeholder,
  type InboundItem,
  type IngestItem,
  type WriteItem,
  type MessageState,
  type WebhookEvent,
  type ReadItem,
  type ReceiptItem,
} from "./tracking.fold";
import { stateOf } from "./tracking.models";
import {
  applyFirstReceipts,
  retractLateSimulationEvents,
  idsOf,
  insertWebhookEvents,
  insertPlaceholders,
  keyOf,
  lockMessages,
  updateStatesWithEvents,
  upsertRegistrations,
} from "./tracking.queries";
import type { RegistrationIn } from "./tracking.schemas";
import { appendInboundFeed, appendStatusFeed, type StatusChange } from "./tracking.feed";

export interface WriteEffects {
  events: number;
  /** RCS/WhatsApp status changes appended to `message_status_feed` (its followers are woken after the commit). */
  statusChanges: number;
  /** Inbound messages appended to `inbound_message_feed` (the inbox is woken after the commit). */
  inbound: number;
}

/** A placeholder lost its insert to a concurrent writer: the whole write is retried. */
export class RetryWrite extends Error {}

/** Everything a batch of ingress items changes, in one transaction the caller holds (`exec` runs in it). */
export async function writeItems(exec: Exec, all: WriteItem[]): Promise<WriteEffects> {
  const inboundItems = all.filter((it): it is InboundItem => it.kind === "inbound");
  const items = inboundItems.length === 0 ? (all as IngestItem[]) : all.filter((it): it is IngestItem => it.kind !== "inbound");
  let events: WebhookEvent[] = [];
  let eventCount = 0;
  // RCS/WhatsApp messages whose status or read changed here, with their status as this write leaves
  // it (the last change wins): appended to the status feed the inbox follows for its replies, and
  // with what the change says of the number's reachability, which contacts follows (migration 0034).
  const statusChanged = new Map<string, StatusChange>();
  const reach = new Map<string, boolean>();
  const learn = (r: ReceiptItem) => {
    const learnt = channelSupportOf(r);
    if (learnt) reach.set(keyOf(r.companyId, r.channel, r.messageId), learnt.supported);
  };
  const iso = (d: Date | string | null) => (d === null ? null : new Date(d).toISOString());
  const changedStatus = (u: ReceiptItem | ReadItem, st: { code: number; deliveryDate: Date | string | null; readAt: Date | string | null }) => {
    if (u.channel === "RCS" || u.channel === "WHATSAPP")
      statusChanged.set(keyOf(u.companyId, u.channel, u.messageId), {
        c: u.companyId,
        ch: u.channel,
        id: u.messageId,
        d: u.destination,
        r: null,
        st: st.code,
        dd: iso(st.deliveryDate),
        ra: iso(st.readAt),
      });
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
    const late = await upsertRegistrations(exec, rows);
    // A simulated message whose receipt came first: its events must never go out (taken back in the feed).
    if (late.length > 0) await retractLateSimulationEvents(exec, late);
  }

  // 2a. The common case in one statement: the first receipt of a registered single-part message
  //     still in flight. The UPDATE's own condition re-checks "in flight" under the row lock, so a
  //     repeat or a concurrent receipt simply does not match; whatever does not match goes to 2b.
  let updates = items.filter((it): it is ReceiptItem | ReadItem => it.kind === "receipt" || it.kind === "read");
  // The ids of the messages they concern (message_keys), once for both steps; none yet: a placeholder in 2b.
  const ids = new Map<string, string>();
  if (updates.length > 0) {
    const keys = new Map<string, { c: string; ch: string; id: string }>();
    for (const u of updates) keys.set(keyOf(u.companyId, u.channel, u.messageId), { c: u.companyId, ch: u.channel, id: u.messageId });
    for (const r of await idsOf(exec, [...keys.values()])) ids.set(keyOf(r.c, r.ch, r.id), r.mid);
  }
  if (updates.length > 0) {
    const firstOf = new Map<string, number>();
    updates.forEach((u, i) => {
      const k = keyOf(u.companyId, u.channel, u.messageId);
      if (!firstOf.has(k)) firstOf.set(k, i);
    });
    const fast = updates
      .map((u, i) => ({ u, i }))
      .filter(
        ({ u, i }) =>
          u.kind === "receipt" &&
          (u.totalParts ?? 1) === 1 &&
          u.numPart === 1 &&
          firstOf.get(keyOf(u.companyId, u.channel, u.messageId)) === i &&
          ids.has(keyOf(u.companyId, u.channel, u.messageId)),
      )
      .map(({ u, i }) => ({ i, r: u as ReceiptItem }));
    if (fast.length > 0) {
      const rows = fast.map(({ i, r }) => {
        return {
          i,
          mid: ids.get(keyOf(r.companyId, r.channel, r.messageId))!,
          c: r.companyId,
          ch: r.channel,
          id: r.messageId,
          code: r.code,
          d: r.date,
          p: r.price ?? null,
          payload: deliveryPayload(r, 1, 1),
        };
      });
      const applied = await applyFirstReceipts(exec, rows);
      const done = new Map(applied.map((a) => [Number(a.i), a]));
      const simulated = new Set(applied.filter((a) => a.simulation).map((a) => Number(a.i)));
      eventCount += applied.length > 0 ? Number(applied[0]!.events) : 0;
      for (const { i, r } of fast) {
        const a = done.get(i);
        if (a) changedStatus(r, { code: a.status_code, deliveryDate: a.delivery_date, readAt: a.read_at });
        if (!done.has(i) || simulated.has(i)) continue; // a simulated message was never sent: it proves nothing about the number
        learn(r);
      }
      updates = updates.filter((_, i) => !done.has(i));
    }
  }

  // 2b. Everything else (multi-part SMS, reads, messages not yet registered, repeats), folded in
  //     arrival order into the rows they concern, locked in id order.
  if (updates.length > 0) {
    const toLock = new Map<string, { c: string; mid: string }>();
    for (const u of updates) {
      const mid = ids.get(keyOf(u.companyId, u.channel, u.messageId));
      if (mid) toLock.set(mid, { c: u.companyId, mid });
    }
    const found = toLock.size > 0 ? await lockMessages(exec, [...toLock.values()]) : [];
    const states = new Map<string, MessageState>();
    // The messages whose fold made an event: their final state goes to the inbox (below).
    const folded = new Map<string, ReceiptItem | ReadItem>();
    for (const r of found) states.set(keyOf(r.company_id, r.channel, r.customer_message_id), stateOf(r));
    for (const u of updates) {
      const k = keyOf(u.companyId, u.channel, u.messageId);
      let s = states.get(k);
      if (!s) states.set(k, (s = placeholder(u)));
      const ev = fold(s, u);
      if (ev) events.push(ev);
      if (ev) folded.set(k, u);
      if (ev && u.kind === "receipt") learn(u);
    }
    for (const [k, u] of folded) {
      const s = states.get(k)!;
      changedStatus(u, { code: s.statusCode, deliveryDate: s.deliveryDate, readAt: s.readAt });
    }
    const fresh = [...states.values()].filter((s) => s.id === null);
    const changed = [...states.values()].filter((s) => s.id !== null && s.changed);
    if (fresh.length > 0) {
      const inserted = await insertPlaceholders(exec, fresh);
      // Registered (or received) by a concurrent write meanwhile: start over, it will be found.
      if (inserted !== fresh.length) throw new RetryWrite("a message row appeared concurrently");
    }
    if (changed.length > 0) {
      // The updates, and the webhook events of what came so far, in one statement (one round trip).
      const pending = events;
      events = [];
      eventCount += await updateStatesWithEvents(exec, changed, pending);
    }
  }

  // 3. The feed: the webhook events of exactly these changes (those not written with the updates above).
  if (events.length > 0) eventCount += await insertWebhookEvents(exec, events);

  // 4. The status feed (migration 0027): the changed RCS/WhatsApp messages, for the inbox's live view of its replies.
  for (const [k, supported] of reach) {
    const change = statusChanged.get(k);
    if (change) change.r = supported;
  }
  const statusChanges = statusChanged.size > 0 ? await appendStatusFeed(exec, [...statusChanged.values()]) : 0;
  // The events written (an account without a webhook gets none): the notifiers are woken only for them.
  // 5. The inbound feed (migration 0032): inbound messages, for the inbox to follow.
  const inbound = inboundItems.length > 0 ? await appendInboundFeed(exec, inboundItems) : 0;
  return { events: eventCount, statusChanges, inbound };
}
