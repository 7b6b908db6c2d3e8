/**
 * The inbox's live-view events: rows of `inbox_events`, written in the same transaction as the change
 * each tells, so that a stream resumed with `Last-Event-ID` finds everything written while its client
 * was away. After the commit the writer calls `announceInboxEvents`, which wakes the open streams of
 * those accounts on every gateway (a broadcast: the rows, not the event, are the truth).
 *
 * Write them as the last statement before the commit: the insert draws the ids from the account's
 * counter (inbox.contract.ts), whose row it holds until the commit, so that the account's events
 * commit in id order and readers never pass an id whose transaction is still open.
 */
import type { ServiceBroker } from "moleculer";
import { QueryTypes, type Sequelize, type Transaction } from "sequelize";
import { drawEventIdsSql, eventIdSql, INBOX_EVENTS_WRITTEN, type InboxEventsWritten, type InboxEventType } from "./inbox.contract";

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
  await sequelize.query(
    `WITH x AS MATERIALIZED (SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(i int, c text, v uuid, t text, d jsonb)),
          ${drawEventIdsSql("x", "c")}
     INSERT INTO inbox_events (company_id, id, conversation_id, type, data)
     SELECT x.c, ${eventIdSql("x.c", "x.i")}, x.v, x.t, x.d FROM x JOIN drawn d ON d.company_id = x.c ORDER BY x.i`,
    { bind: [JSON.stringify(rows)], type: QueryTypes.INSERT, transaction: transaction ?? undefined },
  );
  return events.length;
}

/** Wakes the streams of these accounts (after the commit, never inside it). */
export function announceInboxEvents(broker: ServiceBroker, events: readonly Pick<InboxEvent, "companyId">[]): void {
  if (events.length === 0) return;
  const payload: InboxEventsWritten = { companyIds: [...new Set(events.map((e) => e.companyId))] };
  void Promise.resolve(broker.broadcast(INBOX_EVENTS_WRITTEN, payload)).catch(() => undefined);
}
