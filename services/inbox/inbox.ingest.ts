/**
 * Inbound messages arrive here, and only here: from tracking's internal ingress (which validates
 * the HTTP body and hands the items over, whichever node runs inbox) and from the simulator's end
 * users. One transaction per call for the whole batch: conversations found or created (an archived
 * one reopens), messages stored once, the INBOUND outbox rows (the notifier's hand-over, built by
 * tracking's contract) and the live view's `message.created` / `conversation.unarchived` rows.
 */
import type { Context, Service } from "moleculer";
import type { Sequelize } from "sequelize";
import type { ApiServiceSettings } from "../../lib/api";
import { ApiError, type FieldError } from "../../lib/errors";
import { RETRYABLE_SQLSTATES, retryOn } from "../../lib/jobs";
import { isE164, PHONE_ERROR } from "../../lib/phone";
import { appendOutboxEvents, inboundEvent } from "../tracking/tracking.contract";
import { announceInboxEvents, appendInboxEvents, type InboxEvent } from "./inbox.events";
import type { InboxMetrics } from "./inbox.metrics";
import { toConversationOut, toThreadMessageOut } from "./inbox.models";
import { ingestInbound } from "./inbox.queries";
import { ingestIn, type IngestIn, type IngestOut } from "./inbox.schemas";

export interface IngestThis extends Service<ApiServiceSettings> {
  sequelize: Sequelize;
  metrics: InboxMetrics;
}

/** An end user's number that is no valid number, or a date-time that is no instant PostgreSQL can store. */
function badItems(items: IngestIn["items"]): FieldError[] {
  const errors: FieldError[] = [];
  items.forEach((it, i) => {
    if (!isE164(it.source)) errors.push({ path: `items[${i}].source`, message: PHONE_ERROR });
    const t = Date.parse(it.receivedDate);
    if (Number.isNaN(t) || t < Date.UTC(1970, 0, 1) || t > Date.UTC(9999, 0, 1))
      errors.push({ path: `items[${i}].receivedDate`, message: "must be a date-time between 1970 and 9999" });
  });
  return errors;
}

/** Stores one channel's inbound messages in one transaction; answers how many were new. */
export async function ingest(svc: IngestThis, p: IngestIn): Promise<IngestOut> {
  const bad = badItems(p.items);
  if (bad.length > 0)
    throw new ApiError("VALIDATION_ERROR", `${bad.length} inbound message field(s) are invalid; nothing was stored.`, { errors: bad.slice(0, 50) });
  const sequelize = svc.sequelize;
  const events = await retryOn(RETRYABLE_SQLSTATES, 5, () =>
    sequelize.transaction(async (tx) => {
      const { created, conversations } = await ingestInbound({ sequelize, tx }, p.channel, p.items);
      const live: InboxEvent[] = [];
      for (const c of conversations)
        if (c.was_archived) live.push({ companyId: c.company_id, conversationId: c.id, type: "conversation.unarchived", data: { ...toConversationOut(c) } });
      for (const { message, item } of created)
        live.push({
          companyId: item.companyId,
          conversationId: message.conversation_id,
          type: "message.created",
          data: { chatId: message.conversation_id, ...toThreadMessageOut(message) },
        });
      await appendOutboxEvents(
        sequelize,
        tx,
        created.map(({ item }) => inboundEvent(p.channel, item)),
      );
      await appendInboxEvents(sequelize, tx, live);
      return { live, created: created.length };
    }),
  );
  announceInboxEvents(svc.broker, events.live);
  svc.metrics.stored(p.channel, events.created);
  return { created: events.created };
}

export const ingestActions = {
  /** Stores inbound messages (tracking's ingress, the simulator's end users): conversations found, created or reopened; INBOUND outbox rows. */
  ingest: {
    visibility: "public" as const,
    params: ingestIn,
    handler(this: IngestThis, ctx: Context<IngestIn>): Promise<IngestOut> {
      return ingest(this, ctx.params);
    },
  },
};
