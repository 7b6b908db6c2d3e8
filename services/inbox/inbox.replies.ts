/**
 * Replies (`POST /inbox/conversations/{chatId}/messages`): `{ text }` or `{ mediaId }`, sent through
 * the upstream adapter (lib/http/upstream.ts) under a customerMessageId of its own (`inbox-<uuid>`), so
 * tracking follows it like any message (status polling, history, DELIVERY and READ events) and the
 * thread shows its status. On WhatsApp outside the 24-hour window nothing is sent: the reply is
 * registered at tracking and gets the final receipt CONVERSATION_CLOSED (12) through tracking's
 * ingest, so its status and DELIVERY event take the normal path. A number opted out of the channel
 * (contract section 7) gets nothing: 409 RECIPIENT_OPTED_OUT.
 */
import { randomUUID } from "node:crypto";
import type { Context, Service } from "moleculer";
import type { Sequelize } from "sequelize";
import { apiAction, type ApiServiceSettings, type AuthMeta } from "../../lib/http/api";
import { DELIVERY_STATUSES } from "../../lib/messaging/channels";
import { ApiError } from "../../lib/errors";
import { registrationOf, type OutboundMessage, type Upstream } from "../../lib/http/upstream";
import { callMedia } from "../media/media.contract";
import { callTracking } from "../tracking/tracking.contract";
import { announceInboxEvents, appendInboxEvents } from "./inbox.events";
import { conversationNotFound } from "./inbox.conversations";
import type { InboxMetrics } from "./inbox.metrics";
import { canReply, toThreadMessageOut } from "./inbox.models";
import { findConversation, heldReplies, insertReply, markReplyMediaReleased, optedOut } from "./inbox.queries";
import { MAX_REPLY_TEXT, replyIn, threadMessageOut, type ReplyIn, type ThreadMessageOut } from "./inbox.schemas";

/** WhatsApp's final code for a message outside the customer-service window (spec part 2). */
export const CONVERSATION_CLOSED = 12;

export interface RepliesThis extends Service<ApiServiceSettings> {
  sequelize: Sequelize;
  upstream: Upstream;
  metrics: InboxMetrics;
  releaseMediaOf(companyId: string, owner: string): Promise<void>;
  releaseReplyMedia(): Promise<number>;
  /** Where the release of reply media goes on (this node's; null: from the oldest held reply). */
  releaseCursor?: { at: string; id: string } | null;
}

/** Final statuses on RCS and WhatsApp: a reply in one of them no longer needs its media. */
const FINAL_CODES: readonly number[] = DELIVERY_STATUSES.filter((s) => s.final).map((s) => s.code);
/** Replies whose media is released per round. */
const RELEASE_BATCH = 200;

export const replyMethods = {
  /** Drops a reply's hold on its media (idempotent). */
  async releaseMediaOf(this: RepliesThis, companyId: string, owner: string): Promise<void> {
    await callMedia(this.broker, "media.release", { owner }, { meta: { companyId } });
  },

  /**
   * One round: the media of replies that are too old to wait for a final status, or whose status is
   * final (tracking's `tracking.statusCodes`, asked per account and channel for each page of held
   * replies), is released. At most 10 pages of RELEASE_BATCH a round; the next round goes on after
   * the last page read (`releaseCursor`, this node's), and starts over once it has read them all,
   * so replies still in flight at the head never hide final ones behind them. Without a tracking
   * node the old ones are released all the same and the others wait for the next round.
   */
  async releaseReplyMedia(this: RepliesThis): Promise<number> {
    let n = 0;
    const release = async (r: { id: string; company_id: string; message_id: string }) => {
      await this.releaseMediaOf(r.company_id, `reply:${r.message_id}`);
      await markReplyMediaReleased(this.sequelize, r.id);
      n++;
    };
    for (let round = 0; round < 10; round++) {
      const held = await heldReplies(this.sequelize, this.releaseCursor ?? null, RELEASE_BATCH);
      const groups = new Map<string, typeof held>();
      for (const r of held) {
        if (r.old) {
          await release(r);
          continue;
        }
        const k = `${r.company_id}\u0000${r.channel}`;
        groups.set(k, [...(groups.get(k) ?? []), r]);
      }
      for (const group of groups.values()) {
        const { company_id: companyId, channel } = group[0]!;
        const answer = await callTracking(this.broker, "tracking.statusCodes", { companyId, channel, ids: group.map((r) => r.message_id) }).catch(
          (err: unknown) => {
            this.logger.warn({ err, companyId }, "reply statuses unknown now (tracking did not answer); their media waits for the next round");
            return null;
          },
        );
        if (!answer) continue;
        for (const [i, r] of group.entries()) if (FINAL_CODES.includes(answer.codes[i]!)) await release(r);
      }
      const last = held[held.length - 1];
      this.releaseCursor = held.length < RELEASE_BATCH || !last ? null : { at: last.at, id: last.id };
      if (!this.releaseCursor) break;
    }
    return n;
  },
};

const bad = (path: string, message: string, detail: string) => new ApiError("VALIDATION_ERROR", detail, { errors: [{ path, message }] });

export const replyActions = {
  /** Replies in a conversation (text or one media); 202 with the message, then tracked like any message. */
  reply: apiAction({
    rest: "POST /inbox/conversations/:chatId/messages",
    operation: "INBOX",
    summary: "Reply in a conversation",
    description: `Exactly one of \`text\` (at most ${MAX_REPLY_TEXT.RCS} characters on RCS, ${MAX_REPLY_TEXT.WHATSAPP} on WhatsApp) and \`mediaId\` (a media of the account). Answers 202 with the message; its \`id\` is the customerMessageId under which \`GET /messages/status\`, the history and the DELIVERY/READ events know it. On WhatsApp more than 24 hours after the last inbound message, nothing is sent and the reply ends CONVERSATION_CLOSED (12). A number that opted out of the channel (it wrote STOP, say: \`GET /contacts/opt-outs\`) is a 409 \`recipient-opted-out\` and nothing is sent or stored. An upstream that refuses the reply is a 502 (nothing stored).`,
    tag: "inbox",
    params: replyIn,
    responses: { 202: threadMessageOut },
    errors: [400, 404, 409, 502, 503],
    async handler(this: RepliesThis, ctx: Context<ReplyIn, AuthMeta>): Promise<ThreadMessageOut> {
      const { companyId } = ctx.meta;
      const { chatId, text, mediaId } = ctx.params;
      if ((text === undefined) === (mediaId === undefined))
        throw bad(text === undefined ? "text" : "mediaId", "give exactly one of text and mediaId", "A reply carries exactly one of `text` and `mediaId`.");
      const conv = await findConversation({ sequelize: this.sequelize }, companyId, chatId);
      if (!conv) throw conversationNotFound(chatId);
      if (await optedOut({ sequelize: this.sequelize }, companyId, conv.channel, conv.contact_number)) {
        this.metrics.replied(conv.channel, "optedOut");
        throw new ApiError("RECIPIENT_OPTED_OUT", `${conv.contact_number} opted out of ${conv.channel} in this account; nothing was sent.`);
      }
      if (text !== undefined) {
        const length = [...text].length;
        const max = MAX_REPLY_TEXT[conv.channel];
        if (length > max)
          throw bad(
            "text",
            `must have at most ${max} characters on ${conv.channel}`,
            `The text has ${length} characters; ${conv.channel} allows at most ${max}.`,
          );
      }
      let mediaKey: string | null = null;
      if (mediaId !== undefined) {
        const out = await callMedia(ctx, "media.resolve", { ids: [mediaId] }, { meta: { companyId } });
        if (out.found.length === 0) throw bad("mediaId", "must be a media of this account", `No media ${mediaId} in this account.`);
        mediaKey = out.found[0]!.mediaKey;
      }

      const customerMessageId = `inbox-${randomUUID()}`;
      const message: OutboundMessage = {
        companyId,
        channel: conv.channel,
        customerMessageId,
        destination: conv.contact_number,
        senderId: conv.sender_id,
        text: text ?? "",
        ...(mediaId ? { mediaIds: [mediaId] } : {}),
      };
      const open = canReply(conv);
      // The upstream may fetch the media after taking the reply: it is held (DELETE /media answers
      // 409 meanwhile) until the reply's status is final (releaseReplyMedia).
      const holdsMedia = open && mediaId !== undefined;
      const owner = `reply:${customerMessageId}`;
      if (holdsMedia) await callMedia(ctx, "media.reference", { owner, mediaIds: [mediaId] }, { meta: { companyId } });
      if (open) {
        const outcome = await this.upstream.send([message]).catch(async (err: unknown) => {
          if (holdsMedia) await this.releaseMediaOf(companyId, owner);
          throw err;
        });
        if (outcome.failed.length > 0) {
          if (holdsMedia) await this.releaseMediaOf(companyId, owner);
          this.metrics.replied(conv.channel, "failed");
          this.logger.warn({ chatId: conv.id, customerMessageId, error: outcome.failed[0]!.error }, "the upstream refused a reply");
          throw new ApiError("UPSTREAM_ERROR", "The upstream did not take the reply; nothing was stored. Try again.");
        }
      }

      const sequelize = this.sequelize;
      const stored = await sequelize.transaction(async (tx) => {
        const r = await insertReply({ sequelize, tx }, conv, {
          messageId: customerMessageId,
          messageType: mediaId ? "MEDIA" : "TEXT",
          text: text ?? null,
          mediaKey,
          holdsMedia,
        });
        const out = toThreadMessageOut({ ...r.message, status_code: open ? null : CONVERSATION_CLOSED });
        const event = { companyId, conversationId: conv.id, type: "message.created" as const, data: { chatId: conv.id, ...out } };
        await appendInboxEvents(sequelize, tx, [event]);
        return { out, event };
      });
      announceInboxEvents(this.broker, [stored.event]);

      if (!open) {
        // Never sent: registered, then its final receipt, so status, history and the DELIVERY event follow the normal path.
        const now = new Date().toISOString();
        await callTracking(ctx, "tracking.ingest", { path: "messages", body: registrationOf(message, now) });
        await callTracking(ctx, "tracking.ingest", {
          path: "receipts/whatsapp",
          body: { companyId, messageId: customerMessageId, destination: conv.contact_number, statusCode: CONVERSATION_CLOSED, eventDate: now },
        });
      }
      this.metrics.replied(conv.channel, open ? "sent" : "closed");
      ctx.meta.$statusCode = 202;
      return stored.out;
    },
  }),
};
