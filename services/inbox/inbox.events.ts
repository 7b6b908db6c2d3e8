/**
 * The inbox's live-view events: rows of `inbox_events`, written in the same transaction as the change
 * each tells, so that a stream resumed with `Last-Event-ID` finds everything written while its client
 * was away. After the commit the writer calls `announceInboxEvents`, which wakes the open streams of
 * those accounts on every gateway (a broadcast: the rows, not the event, are the truth).
 */
import type { ServiceBroker } from "moleculer";
import { QueryTypes, type Sequelize, type Transaction } from "sequelize";

/** What a live-view event tells. `data` is the message (contract "Conversation" messages) or the conversation. */
export type InboxEventType =
  "message.created" | "message.status" | "conversation.read" | "conversation.archived" | "conversation.unarchived" | "conversation.windowClosed";

export interface InboxEvent {
  companyId: string;
  conversationId: string;
  type: InboxEventType;
  data: Record<string, unknown>;
}

/** The broadcast that wakes the streams of these accounts after `inbox_events` rows were committed. */
export const INBOX_EVENTS_WRITTEN = "inbox.eventsWritten";
export interface InboxEventsWritten {
  companyIds: string[];
}

/** Appends the events in one statement inside `transaction`; answers how many rows were written. */
export async function appendInboxEvents(sequelize: Sequelize, transaction: Transaction | null, events: readonly InboxEvent[]): Promise<number> {
  if (events.length === 0) return 0;
  const rows = events.map((e) => ({ c: e.companyId, v: e.conversationId, t: e.type, d: e.data }));
  await sequelize.query(
    `INSERT INTO inbox_events (company_id, conversation_id, type, data)
     SELECT x.c, x.v, x.t, x.d FROM jsonb_to_recordset($1::jsonb) AS x(c text, v uuid, t text, d jsonb)`,
    { bind: [JSON.stringify(rows)], type: QueryTypes.INSERT, transaction: transaction ?? undefined },
  );
  return events.length;
}

/** Wakes the streams of the accounts these events belong to (after the commit, never inside it). */
export function announceInboxEvents(broker: ServiceBroker, events: readonly Pick<InboxEvent, "companyId">[]): void {
  if (events.length === 0) return;
  const payload: InboxEventsWritten = { companyIds: [...new Set(events.map((e) => e.companyId))] };
  void broker.broadcast(INBOX_EVENTS_WRITTEN, payload);
}
