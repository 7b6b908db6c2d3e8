/**
 * The SQL tracking publishes through tracking.contract.ts (re-exported there, so importers name the
 * contract): the outbox insert the notifier consumes, and the history conditions (GET
 * /messages/history and its export). Builders of SQL text, save `appendOutboxEvents`, which runs the
 * outbox insert in the caller's transaction.
 */
import { QueryTypes, type Sequelize, type Transaction } from "sequelize";
import { CHANNELS, statusByName, type Channel } from "../../lib/messaging/channels";
import type { HistoryFilters, OutboxEvent } from "./tracking.contract";

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
