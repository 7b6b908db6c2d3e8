/**
 * The SQL tracking still publishes through tracking.contract.ts (re-exported there, so importers
 * name the contract): the outbox insert the notifier consumes, which the inbox runs for INBOUND
 * events in its own transaction (`appendOutboxEvents`; issue 33 item 1, still to move).
 */
import { QueryTypes, type Sequelize, type Transaction } from "sequelize";
import type { OutboxEvent } from "./tracking.contract";

/**
 * Only for an account with a webhook: `webhook_accounts`, the view the notifier publishes (an event
 * is sent to the registered callback URL; without one there is nobody to send it to).
 */
export const LISTENED = (companyId: string) => `EXISTS (SELECT 1 FROM webhook_accounts w WHERE w.company_id = ${companyId})`;

/**
 * The insert of outbox rows given as a JSON array in `$1` (set-based, one statement), for the
 * accounts that have a webhook, in the array's order (the ids are the order of delivery; the
 * planner may join the webhooks in any order, hence the ordinality).
 */
export const OUTBOX_INSERT = `INSERT INTO outbox_events (company_id, channel, event_type, message_id, num_part, payload, message_sent_at)
  SELECT x.company_id, x.channel, x.event_type, x.message_id, x.num_part, x.payload, x.message_sent_at
    FROM ROWS FROM (jsonb_to_recordset($1::jsonb) AS (company_id text, channel text, event_type text, message_id text, num_part smallint, payload jsonb, message_sent_at timestamptz))
         WITH ORDINALITY AS x(company_id, channel, event_type, message_id, num_part, payload, message_sent_at, n)
   WHERE ${LISTENED("x.company_id")}
   ORDER BY x.n`;

/** Writes outbox rows inside the caller's transaction (one statement). */
export async function appendOutboxEvents(sequelize: Sequelize, transaction: Transaction, events: readonly OutboxEvent[]): Promise<void> {
  if (events.length === 0) return;
  await sequelize.query(OUTBOX_INSERT, { bind: [JSON.stringify(events)], type: QueryTypes.INSERT, transaction });
}
