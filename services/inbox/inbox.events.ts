/**
 * The inbox's live-view events: rows of `inbox_events`, written in the same transaction as the change
 * each tells, so that a stream resumed with `Last-Event-ID` finds everything written while its client
 * was away. After the commit the writer calls `announceInboxEvents`, which wakes the open streams of
 * those accounts on every gateway (a broadcast: the rows, not the event, are the truth).
 *
 * Write them as the last statement before the commit: the insert draws the ids from the account's
 * counter (inbox.contract.ts), whose row it holds until the commit, so that the account's events
 * commit in id order and readers never pass an id whose transaction is still open. The insert is
 * `insertInboxEvents` of inbox.queries.ts.
 */
import type { ServiceBroker } from "moleculer";
import type { Sequelize, Transaction } from "sequelize";
import { INBOX_EVENTS_WRITTEN, type InboxEventsWritten, type InboxEventType } from "./inbox.contract";
import { insertInboxEvents } from "./inbox.queries";

export { INBOX_EVENTS_WRITTEN, type InboxEventsWritten, type InboxEventType } from "./inbox.contract";

export interface InboxEvent {
  companyId: string;
  conversationId: string;
  type: InboxEventType;
  data: Record<string, unknown>;
}

/** Appends the events in one statement inside `transaction` (their ids drawn from the accounts' counters, in order); answers how many rows were written. */
export async function appendInboxEvents(sequelize: Sequelize, transaction: Transaction | null, events: readonly InboxEvent[]): Promise<number> {
  if (events.length === 0) return 0;
  const rows = events.map((e, i) => ({ i, c: e.companyId, v: e.conversationId, t: e.type, d: e.data }));
  await insertInboxEvents(sequelize, transaction, rows);
  return events.length;
}

/** Wakes the streams of these accounts (after the commit, never inside it). */
export function announceInboxEvents(broker: ServiceBroker, events: readonly Pick<InboxEvent, "companyId">[]): void {
  if (events.length === 0) return;
  const payload: InboxEventsWritten = { companyIds: [...new Set(events.map((e) => e.companyId))] };
  void Promise.resolve(broker.broadcast(INBOX_EVENTS_WRITTEN, payload)).catch(() => undefined);
}
