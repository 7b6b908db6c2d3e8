/**
 * Conversations as partners see them (key operation INBOX): list, describe, read the thread, mark
 * read, archive and unarchive. Every change writes its live-view event row in its transaction and
 * announces it after the commit.
 */
import type { Context, Service } from "moleculer";
import type { Sequelize, Transaction } from "sequelize";
import { apiAction, type ApiServiceSettings, type AuthMeta } from "../../lib/http/api";
import type { HeavyGate } from "../../lib/db/heavy";
import { ApiError } from "../../lib/errors";
import type { Page } from "../../lib/http/paging";
import { announceInboxEvents, appendInboxEvents, type InboxEvent, type InboxEventType } from "./inbox.events";
import { toConversationOut, type ConversationRow } from "./inbox.models";
import { conversationsPage, findConversation, markRead, setStatus, threadPage } from "./inbox.queries";
import { callTracking } from "../tracking/tracking.contract";
import { statusByCode } from "../../lib/messaging/channels";
import {
  chatIdIn,
  conversationOut,
  conversationPage,
  listConversationsIn,
  readIn,
  threadIn,
  threadPage as threadPageSchema,
  type ChatIdIn,
  type ConversationOut,
  type ListConversationsIn,
  type ReadIn,
  type ThreadIn,
  type ThreadMessageOut,
} from "./inbox.schemas";

export interface ConversationsThis extends Service<ApiServiceSettings> {
  sequelize: Sequelize;
  /** This node's heavy-read slots (searches), shared with every service of the process (lib/db/heavy.ts). */
  heavyGate: HeavyGate;
}

export const conversationNotFound = (chatId: string) => new ApiError("CONVERSATION_NOT_FOUND", `No conversation ${chatId} in this account.`);

/** Runs a change of one conversation with its live-view event, in one transaction; announces after the commit. */
async function change(
  svc: ConversationsThis,
  companyId: string,
  chatId: string,
  type: InboxEventType,
  fn: (q: { sequelize: Sequelize; tx: Transaction }) => Promise<ConversationRow | null>,
): Promise<ConversationRow | null> {
  const sequelize = svc.sequelize;
  const out = await sequelize.transaction(async (tx) => {
    const row = await fn({ sequelize, tx });
    if (!row) return null;
    const event: InboxEvent = { companyId, conversationId: row.id, type, data: { ...toConversationOut(row) } };
    await appendInboxEvents(sequelize, tx, [event]);
    return { row, event };
  });
  if (out) announceInboxEvents(svc.broker, [out.event]);
  return out?.row ?? null;
}

/** Archive or unarchive: 204 either way (a repeat changes nothing and writes no event); 404 when not the account's. */
async function setConversationStatus(svc: ConversationsThis, ctx: Context<ChatIdIn, AuthMeta>, status: "ACTIVE" | "ARCHIVED"): Promise<null> {
  const { companyId } = ctx.meta;
  const row = await change(svc, companyId, ctx.params.chatId, status === "ARCHIVED" ? "conversation.archived" : "conversation.unarchived", (q) =>
    setStatus(q, companyId, ctx.params.chatId, status),
  );
  if (!row && !(await findConversation({ sequelize: svc.sequelize }, companyId, ctx.params.chatId))) throw conversationNotFound(ctx.params.chatId);
  ctx.meta.$statusCode = 204;
  return null;
}

const unarchive = (rest: string) =>
  apiAction({
    rest,
    operation: "INBOX",
    summary: "Unarchive a conversation",
    description: "Restores an archived conversation to the default inbox list. 204, no body (also when it was not archived).",
    tag: "inbox",
    params: chatIdIn,
    responses: { 204: null },
    errors: [400, 404],
    handler(this: ConversationsThis, ctx: Context<ChatIdIn, AuthMeta>): Promise<null> {
      return setConversationStatus(this, ctx, "ACTIVE");
    },
  });

export const conversationActions = {
  /** Lists the account's conversations (ACTIVE unless status says otherwise), newest activity first. */
  listConversations: apiAction({
    rest: "GET /inbox/conversations",
    operation: "INBOX",
    summary: "Find conversations",
    description:
      "ACTIVE conversations unless `status=ARCHIVED` or `status=ALL`; optionally one `channel`, or numbers containing the digits of `search`. Newest activity (`lastMessageAt`) first.",
    tag: "inbox",
    params: listConversationsIn,
    responses: { 200: conversationPage },
    errors: [400],
    handler(this: ConversationsThis, ctx: Context<ListConversationsIn, AuthMeta>): Promise<Page<ConversationOut>> {
      const page = () => conversationsPage(this.sequelize, ctx.meta.companyId, ctx.params);
      // A search by number is a heavy read: the account's share of the node's slots.
      return ctx.params.search ? this.heavyGate.run(ctx.meta.companyId, page) : page();
    },
  }),

  /** Describes one conversation, with its reply window. */
  getConversation: apiAction({
    rest: "GET /inbox/conversations/:chatId",
    operation: "INBOX",
    summary: "Describe a conversation",
    tag: "inbox",
    params: chatIdIn,
    responses: { 200: conversationOut },
    errors: [400, 404],
    async handler(this: ConversationsThis, ctx: Context<ChatIdIn, AuthMeta>): Promise<ConversationOut> {
      const row = await findConversation({ sequelize: this.sequelize }, ctx.meta.companyId, ctx.params.chatId);
      if (!row) throw conversationNotFound(ctx.params.chatId);
      return toConversationOut(row);
    },
  }),

  /** A page of a conversation's messages, oldest first; each reply with its current delivery status. */
  thread: apiAction({
    rest: "GET /inbox/conversations/:chatId/messages",
    operation: "INBOX",
    summary: "Read a conversation's messages",
    description: "Oldest first. A reply (OUTBOUND) carries its current `deliveryStatus`, as `GET /messages/status` answers it.",
    tag: "inbox",
    params: threadIn,
    responses: { 200: threadPageSchema },
    errors: [400, 404],
    async handler(this: ConversationsThis, ctx: Context<ThreadIn, AuthMeta>): Promise<Page<ThreadMessageOut>> {
      const row = await findConversation({ sequelize: this.sequelize }, ctx.meta.companyId, ctx.params.chatId);
      if (!row) throw conversationNotFound(ctx.params.chatId);
      const page = await threadPage(this.sequelize, ctx.meta.companyId, row.id, ctx.params);
      // The replies' statuses are tracking's: one call for the page's replies, as GET /messages/status answers them.
      const replies = page.data.filter((m) => m.direction === "OUTBOUND");
      if (replies.length > 0) {
        const { codes } = await callTracking(ctx, "tracking.statusCodes", {
          companyId: ctx.meta.companyId,
          channel: row.channel,
          ids: replies.map((r) => r.id),
        });
        replies.forEach((r, i) => (r.deliveryStatus = statusByCode(codes[i]!).name));
      }
      return page;
    },
  }),

  /** Marks the conversation read up to a message; answers the conversation with its new unreadCount. */
  markRead: apiAction({
    rest: "POST /inbox/conversations/:chatId/read",
    operation: "INBOX",
    summary: "Mark a conversation read",
    description:
      "`upToMessageId`: a message of the conversation; `unreadCount` becomes the number of inbound messages after it. Read marks only move forward: a mark before an earlier one leaves `unreadCount` as it is. A message not in the conversation is a 400.",
    tag: "inbox",
    idempotent: false,
    params: readIn,
    responses: { 200: conversationOut },
    errors: [400, 404],
    async handler(this: ConversationsThis, ctx: Context<ReadIn, AuthMeta>): Promise<ConversationOut> {
      const { companyId } = ctx.meta;
      const { chatId, upToMessageId } = ctx.params;
      const row = await change(this, companyId, chatId, "conversation.read", (q) => markRead(q, companyId, chatId, upToMessageId));
      if (row) return toConversationOut(row);
      if (!(await findConversation({ sequelize: this.sequelize }, companyId, chatId))) throw conversationNotFound(chatId);
      throw new ApiError("VALIDATION_ERROR", `Message ${upToMessageId} is not in conversation ${chatId}.`, {
        errors: [{ path: "upToMessageId", message: "must be a message of the conversation" }],
      });
    },
  }),

  /** Archives a conversation (no message is deleted); 204. */
  archive: apiAction({
    rest: "PATCH /inbox/conversations/:chatId/archive",
    operation: "INBOX",
    summary: "Archive a conversation",
    description: "The conversation leaves the default inbox list; no message is deleted. A new inbound message reopens it. 204, no body.",
    tag: "inbox",
    params: chatIdIn,
    responses: { 204: null },
    errors: [400, 404],
    handler(this: ConversationsThis, ctx: Context<ChatIdIn, AuthMeta>): Promise<null> {
      return setConversationStatus(this, ctx, "ARCHIVED");
    },
  }),

  /** Unarchives a conversation, at the path the spec quotes; 204. */
  unarchive: unarchive("PATCH /conversations/:chatId/unarchive"),
  /** Unarchives a conversation, under /inbox like the rest; 204. */
  unarchiveInInbox: unarchive("PATCH /inbox/conversations/:chatId/unarchive"),
};
