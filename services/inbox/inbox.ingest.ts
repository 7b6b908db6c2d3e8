/**
 * Inbound messages arrive here, and only here: from tracking's internal ingress (which validates
 * the HTTP body and hands the items over, whichever node runs inbox) and from the simulator's end
 * users. A call's messages are stored all or none, in a transaction it shares with the calls that
 * arrived while the previous one committed (a group commit, as tracking's ingress does for receipts):
 * conversations found or created (an archived one reopens), messages stored once, their INBOUND
 * webhook events (the inbox's feed `inbound_event_feed`, which the notifier follows) and the live view's
 * `message.created` / `conversation.unarchived` rows; the events are announced after the commit.
 * Opt-out keywords (STOP, START, ...) are handed to contacts before (contacts.keywords.ts, through contacts.contract.ts).
 *
 * The grouping lives here, in the inbox node, not in tracking's ingress: it then serves every caller
 * (the ingress on any number of tracking nodes, the simulator) and gathers all of one inbox node's
 * concurrent calls, where an ingress committer would only gather one ingress node's requests and
 * would put a whole group (up to its bounds) in one bus message to inbox. Each call still travels
 * alone and is answered alone, so a request and its answer stay the size of one call.
 */
import type { Context, Service } from "moleculer";
import { instantOf } from "../../lib/messaging/time";
import type { Sequelize, Transaction } from "sequelize";
import type { ApiServiceSettings } from "../../lib/http/api";
import { ApiError, type FieldError } from "../../lib/errors";
import { GroupCommitter } from "../../lib/db/group-commit";
import { RETRYABLE_SQLSTATES, retryOn } from "../../lib/jobs/jobs";
import { isE164, PHONE_ERROR } from "../../lib/messaging/phone";
import { webhookFeedInsert } from "../../lib/db/feeds";
import { WEBHOOK_ACCOUNTS_VIEW, withoutEmpty, type WebhookEvent } from "../notifier/notifier.contract";
import { announceInboxEvents, appendInboxEvents, type InboxEvent } from "./inbox.events";
import { applyKeywords } from "../contacts/contacts.contract";
import type { InboxMetrics } from "./inbox.metrics";
import { toConversationOut, toThreadMessageOut } from "./inbox.models";
import { ingestInbound } from "./inbox.queries";
import { INBOX_CHANNELS, ingestIn, type InboundMessageIn, type IngestIn, type IngestOut } from "./inbox.schemas";

/** The INBOUND event of spec part 6 for the first arrival of an inbound message. */
export function inboundEvent(channel: "RCS" | "WHATSAPP", v: InboundMessageIn): WebhookEvent {
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
  return {
    company_id: v.companyId,
    channel,
    event_type: "INBOUND",
    message_id: v.messageId,
    num_part: null,
    payload: withoutEmpty(payload),
    message_sent_at: null,
  };
}

/** The inbox's webhook events into its feed (migration 0031; `$1`: a JSON array), for accounts with a webhook. */
const FEED_INSERT = webhookFeedInsert("inbound_event_feed", WEBHOOK_ACCOUNTS_VIEW);

export interface IngestThis extends Service<ApiServiceSettings> {
  sequelize: Sequelize;
  metrics: InboxMetrics;
  ingestCommitter: GroupCommitter<IngestIn, IngestOut>;
}

/** An end user's number that is no valid number, or a date-time that is no instant PostgreSQL can store. */
export function badItems(items: IngestIn["items"]): FieldError[] {
  const errors: FieldError[] = [];
  items.forEach((it, i) => {
    if (!isE164(it.source)) errors.push({ path: `items[${i}].source`, message: PHONE_ERROR });
    if (Number.isNaN(instantOf(it.receivedDate))) errors.push({ path: `items[${i}].receivedDate`, message: "must be a date-time of a year from 1970 to 9999" });
  });
  return errors;
}

/** A group holds at most this many messages (one submission above it still goes, alone). */
export const GROUP_MAX_MESSAGES = 2000;
/** ... and at most this many bytes of them (as {@link ingestBytes} estimates them): the statements' JSON parameters stay a few MiB. */
export const GROUP_MAX_BYTES = 4 * 1024 * 1024;

/** A call's size in bytes, about as its rows travel to PostgreSQL as JSON (strings as UTF-8, plus each row's fixed part). */
export function ingestBytes(p: IngestIn): number {
  let n = 0;
  for (const it of p.items) {
    n += 200 + Buffer.byteLength(it.companyId) + Buffer.byteLength(it.messageId) + Buffer.byteLength(it.destination);
    if (it.text !== undefined) n += Buffer.byteLength(it.text);
    if (it.mediaKey !== undefined) n += Buffer.byteLength(it.mediaKey);
  }
  return n;
}

/**
 * Writes a group of calls in one transaction (again after a deadlock or a lost race): per channel,
 * their messages together (conversations found or created once per number, a messageId stored once
 * however many calls carry it: the first call in the group to carry it stores it), then the group's
 * INBOUND webhook events (its feed) and, last before the commit (the account event lock, inbox.events.ts), its
 * live-view events. Answers per call how many of its messages were new, and the events to announce.
 */
export async function writeGroup(sequelize: Sequelize, calls: IngestIn[], around?: GroupHooks): Promise<{ created: number[]; live: InboxEvent[] } | null> {
  // Which call each message is of (a message object given twice counts for the first call).
  const callOf = new Map<InboundMessageIn, number>();
  calls.forEach((c, i) => c.items.forEach((it) => callOf.has(it) || callOf.set(it, i)));
  return retryOn(
    RETRYABLE_SQLSTATES,
    5,
    () =>
      sequelize.transaction(async (tx) => {
        if (around && !(await around.before(tx))) return null;
        const created = calls.map(() => 0);
        const live: InboxEvent[] = [];
        const outbox: WebhookEvent[] = [];
        for (const channel of INBOX_CHANNELS) {
          const items =
            calls.length === 1 ? (calls[0]!.channel === channel ? calls[0]!.items : []) : calls.flatMap((c) => (c.channel === channel ? c.items : []));
          if (items.length === 0) continue;
          const out = await ingestInbound({ sequelize, tx }, channel, items);
          for (const c of out.conversations)
            if (c.was_archived)
              live.push({ companyId: c.company_id, conversationId: c.id, type: "conversation.unarchived", data: { ...toConversationOut(c) } });
          for (const { message, item } of out.created) {
            created[callOf.get(item)!]!++;
            outbox.push(inboundEvent(channel, item));
            live.push({
              companyId: item.companyId,
              conversationId: message.conversation_id,
              type: "message.created",
              data: { chatId: message.conversation_id, ...toThreadMessageOut(message) },
            });
          }
        }
        if (outbox.length > 0) await sequelize.query(FEED_INSERT, { bind: [JSON.stringify(outbox)], transaction: tx });
        await around?.after(tx);
        await appendInboxEvents(sequelize, tx, live);
        return { created, live };
      }),
    { delayMs: (n) => 5 * n + Math.random() * 10 },
  );
}

/** What a caller adds to a group's transaction: `before`, first (false: write nothing), and `after`, with the writes. */
export interface GroupHooks {
  before(tx: Transaction): Promise<boolean>;
  after(tx: Transaction): Promise<void>;
}

/**
 * The inbox node's group committer (lib/db/group-commit.ts): concurrent `inbox.ingest` calls, whoever
 * makes them (tracking's ingress on any node, the simulator), share transactions. After each commit
 * the group's events are announced (one broadcast) and each call answered with its own count.
 */
export function createIngestCommitter(svc: Pick<IngestThis, "sequelize" | "metrics" | "broker">): GroupCommitter<IngestIn, IngestOut> {
  return new GroupCommitter<IngestIn, IngestOut>(
    async (calls) => {
      const started = process.hrtime.bigint();
      const out = (await writeGroup(svc.sequelize, calls))!;
      svc.metrics.transaction(
        calls.reduce((n, c) => n + c.items.length, 0),
        Number(process.hrtime.bigint() - started) / 1e9,
      );
      announceInboxEvents(svc.broker, out.live);
      calls.forEach((c, i) => svc.metrics.stored(c.channel, out.created[i]!));
      return out.created.map((created) => ({ created }));
    },
    { maxConcurrent: 2, maxItems: GROUP_MAX_MESSAGES, maxBytes: GROUP_MAX_BYTES, items: (c) => c.items.length, bytes: ingestBytes },
  );
}

/**
 * Stores one channel's inbound messages, all or none, in a transaction shared with concurrent calls;
 * answers how many were new. Opt-out keywords among them are recorded first, by contacts
 * (contacts.keywords.ts, through contacts.contract.ts): the call fails (503) rather than store a STOP whose opt-out is not kept.
 */
export async function ingest(svc: IngestThis, p: IngestIn, ctx: Context): Promise<IngestOut> {
  const bad = badItems(p.items);
  if (bad.length > 0)
    throw new ApiError("VALIDATION_ERROR", `${bad.length} inbound message field(s) are invalid; nothing was stored.`, { errors: bad.slice(0, 50) });
  await applyKeywords(ctx, p.channel, p.items);
  return svc.ingestCommitter.submit(p);
}

export const ingestActions = {
  /** Stores inbound messages (tracking's ingress, the simulator's end users): conversations found, created or reopened; INBOUND outbox rows; STOP/START keywords recorded at contacts first. */
  ingest: {
    visibility: "public" as const,
    params: ingestIn,
    handler(this: IngestThis, ctx: Context<IngestIn>): Promise<IngestOut> {
      return ingest(this, ctx.params, ctx);
    },
  },
};
