/**
 * Tracking's feeds the inbox follows, the writer's side (tracking.contract.ts says what they
 * promise): the status feed (migration 0027, the view `message_status_changes`, inbox.feed.ts and
 * contacts.support.ts) and
 * the inbound feed (migration 0032, the view `inbound_messages_received`, inbox.inbound.ts). The
 * ingest appends to them in the transaction of the changes.
 */
import type { Exec } from "../../lib/db/db";
import type { InboundItem } from "./tracking.fold";

/**
 * One RCS or WhatsApp message whose status or read a write changed: account, channel,
 * customerMessageId, destination, its status as that write left it (code, deliveryDate, readAt), and
 * what a receipt of it said of the number (`r`: DELIVERED true, DISABLED/UNSUPPORTED false, else null).
 */
export interface StatusChange {
  c: string;
  ch: "RCS" | "WHATSAPP";
  id: string;
  d: string;
  r: boolean | null;
  st: number;
  dd: string | null;
  ra: string | null;
}

/**
 * Appends `changes` to `message_status_feed` (migrations 0027 and 0034), in the writer's transaction:
 * what the view `message_status_changes` publishes to followers (the inbox's live view, contacts'
 * channels). Answers how many.
 */
export async function appendStatusFeed(exec: Exec, changes: StatusChange[]): Promise<number> {
  const [row] = await exec<{ n: number }>(
    `WITH ins AS (
       INSERT INTO message_status_feed (company_id, channel, customer_message_id, status_code, delivery_date, read_at, destination, reach)
       SELECT k.c, k.ch, k.id, k.st, k.dd, k.ra, k.d, k.r
         FROM jsonb_to_recordset($1::jsonb) AS k(c text, ch text, id text, st smallint, dd timestamptz, ra timestamptz, d text, r boolean)
       RETURNING 1)
     SELECT count(*)::int AS n FROM ins`,
    [JSON.stringify(changes)],
  );
  return Number(row?.n ?? 0);
}

/**
 * Appends inbound messages to `inbound_message_feed` (migration 0032), in the writer's transaction:
 * what the view `inbound_messages_received` publishes to the inbox, which stores them. Answers how many.
 */
export async function appendInboundFeed(exec: Exec, items: InboundItem[]): Promise<number> {
  const [row] = await exec<{ n: number }>(
    `WITH ins AS (
       INSERT INTO inbound_message_feed (company_id, channel, message_id, source, destination, received_date, message_type, text, media_key)
       SELECT k.c, k.ch, k.id, k.s, k.d, k.r, k.t, k.x, k.m
         FROM jsonb_to_recordset($1::jsonb) AS k(c text, ch text, id text, s text, d text, r text, t text, x text, m text)
       RETURNING 1)
     SELECT count(*)::int AS n FROM ins`,
    [
      JSON.stringify(
        items.map(({ channel, inbound: v }) => ({
          c: v.companyId,
          ch: channel,
          id: v.messageId,
          s: v.source,
          d: v.destination,
          r: v.receivedDate,
          t: v.messageType,
          x: v.text ?? null,
          m: v.mediaKey ?? null,
        })),
      ),
    ],
  );
  return Number(row?.n ?? 0);
}
