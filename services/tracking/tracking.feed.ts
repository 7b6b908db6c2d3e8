/**
 * Tracking's status feed (migration 0027; tracking.contract.ts says what it promises): the writer's
 * side. The ingest appends to it in the transaction of the changes; the inbox follows it through the
 * view `message_status_changes` (inbox.feed.ts).
 */
import type { Exec } from "../../lib/db/db";

/**
 * One RCS or WhatsApp message whose status or read a write changed: account, channel,
 * customerMessageId, and its status as that write left it (code, deliveryDate, readAt).
 */
export interface StatusChange {
  c: string;
  ch: "RCS" | "WHATSAPP";
  id: string;
  st: number;
  dd: string | null;
  ra: string | null;
}

/**
 * Appends `changes` to `message_status_feed` (migration 0027), in the writer's transaction: what the
 * view `message_status_changes` publishes to followers (the inbox's live view). Answers how many.
 */
export async function appendStatusFeed(exec: Exec, changes: StatusChange[]): Promise<number> {
  const [row] = await exec<{ n: number }>(
    `WITH ins AS (
       INSERT INTO message_status_feed (company_id, channel, customer_message_id, status_code, delivery_date, read_at)
       SELECT k.c, k.ch, k.id, k.st, k.dd, k.ra FROM jsonb_to_recordset($1::jsonb) AS k(c text, ch text, id text, st smallint, dd timestamptz, ra timestamptz)
       RETURNING 1)
     SELECT count(*)::int AS n FROM ins`,
    [JSON.stringify(changes)],
  );
  return Number(row?.n ?? 0);
}
