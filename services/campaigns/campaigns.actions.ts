/**
 * The campaign resource (contract section 4, Campaign): create, find, get, update, delete,
 * confirm, pause, resume, cancel. Every query filters by the caller's account, so another account's
 * campaign is not found (404) on every route. Only a DRAFT is changed, deleted or confirmed; each
 * status change is one guarded UPDATE, so two requests racing cannot both win.
 */
import { randomUUID } from "node:crypto";
import type { Context } from "moleculer";
import type { Sequelize } from "sequelize";
import { API_PREFIX, apiAction, type AuthMeta } from "../../lib/http/api";
import { inTransaction, type Exec } from "../../lib/db/db";
import { ApiError, badRequest } from "../../lib/errors";
import { toPage, type Page } from "../../lib/http/paging";
import { callMediaOf, checkCampaign, checkLists, requireChannel } from "./campaigns.checks";
import { toCampaignOut, type CampaignRow } from "./campaigns.models";
import {
  campaignsPage,
  CHANGES,
  deleteDraft,
  findCampaign,
  insertCampaign,
  markScheduled,
  q,
  refreshRecipientStats,
  snapshotAudience,
  transition,
  undoCreate,
  updateDraft,
  type CampaignValues,
} from "./campaigns.queries";
import {
  campaignIdIn,
  campaignOut,
  campaignPage,
  createCampaignIn,
  FINAL_STATUSES,
  listCampaignsIn,
  updateCampaignIn,
  type CampaignIn,
  type CampaignOut,
  type CampaignStatus,
  type ListCampaignsIn,
  type UpdateCampaignIn,
} from "./campaigns.schemas";
import { parseText } from "./campaigns.text";

export interface CampaignsThis {
  sequelize: Sequelize;
  logger: { warn(...args: unknown[]): void };
  /** A campaign was confirmed or resumed here: look for work now. */
  kick(): void;
  /** Campaigns became final: drop their media references now. */
  releaseMedia(): Promise<void>;
}

type Ctx<P> = Context<P, AuthMeta & { $location?: string }>;

/** Snapshots of a million recipients take a while. */
export const CONFIRM_TIMEOUT_MS = 300_000;

const notFound = (id: string) => new ApiError("CAMPAIGN_NOT_FOUND", `No campaign ${id} in this account.`);
const conflict = (status: CampaignStatus, what: string) =>
  new ApiError("CAMPAIGN_STATE_CONFLICT", `The campaign is ${status}; ${what}.`, { campaignStatus: status });

async function mustFind(sequelize: Sequelize, companyId: string, id: string): Promise<CampaignRow> {
  const row = await findCampaign(q(sequelize), companyId, id);
  if (!row) throw notFound(id);
  return row;
}

/** An instant as ISO text; text Date.parse cannot read (a leap second "…23:59:60Z" passes the date-time format) is kept as given for checkSchedule's 400. */
const instant = (s: string) => {
  const t = Date.parse(s);
  return Number.isNaN(t) ? s : new Date(t).toISOString();
};

const valuesOf = (p: CampaignIn): CampaignValues => ({
  name: p.name,
  channel: p.channel,
  contactListIds: [...new Set(p.contactListIds)],
  text: p.message.text,
  // Media ids are uuids: one given in two letter cases is one media, stored once (lower case, as media answers it).
  mediaIds: [...new Set((p.message.mediaIds ?? []).map((m) => m.toLowerCase()))],
  scheduledAt: p.scheduledAt ? instant(p.scheduledAt) : null,
  sendRatePerSecond: p.sendRatePerSecond ?? null,
});

/** A stored campaign's values, as valuesOf gives them (to put a draft back). */
const oldValues = (old: CampaignRow): CampaignValues => ({
  name: old.name,
  channel: old.channel,
  contactListIds: old.contact_list_ids.map(Number),
  text: old.text,
  mediaIds: old.media_ids,
  scheduledAt: old.scheduled_at ? new Date(old.scheduled_at).toISOString() : null,
  sendRatePerSecond: old.send_rate_per_second,
});

const owner = (id: string) => `campaign:${id}`;

/**
 * Runs `write` (a transaction of campaign rows only) and, once it has committed, `media` (the calls to
 * media.reference/release). Media is never called inside the transaction: on embedded PGlite one
 * session serves every connection, so the media service's own query would wait for a transaction that
 * waits for it. If the media call fails, `undo` puts the campaign rows back (the draft removed, or its
 * old values), so a refusal of media leaves nothing changed; an undo that fails is logged.
 */
async function withMedia<T>(
  self: CampaignsThis,
  write: (exec: Exec) => Promise<T>,
  media: (row: T) => Promise<unknown>,
  undo: () => Promise<unknown>,
): Promise<T> {
  const row = await inTransaction(self.sequelize, write);
  try {
    await media(row);
  } catch (err) {
    await undo().catch((e) => self.logger.warn("could not undo a campaign write after its media call failed", e));
    throw err;
  }
  return row;
}

/** A guarded status change: the row, or the 404/409 that explains why not. */
async function change(self: CampaignsThis, ctx: Ctx<{ id: string }>, from: readonly CampaignStatus[], set: string, what: string): Promise<CampaignRow> {
  const row = await transition(q(self.sequelize), ctx.meta.companyId, ctx.params.id, from, set);
  if (row) return row;
  const now = await mustFind(self.sequelize, ctx.meta.companyId, ctx.params.id);
  throw conflict(now.status, what);
}

const idAction = (
  rest: string,
  summary: string,
  description: string,
  errors: number[],
  handler: (this: CampaignsThis, ctx: Ctx<{ id: string }>) => Promise<CampaignOut | null>,
) => apiAction({ rest, operation: "CAMPAIGNS", summary, description, params: campaignIdIn, responses: { 200: campaignOut }, errors, handler });

export const campaignActions = {
  /** Creates a DRAFT campaign (nothing is sent until it is confirmed); references its media. */
  create: apiAction({
    rest: "POST /campaigns",
    operation: "CAMPAIGNS",
    summary: "Create a campaign (draft)",
    description:
      "Creates a DRAFT. The key needs CAMPAIGNS and the campaign's channel (else 401). The text fits the channel (1600 characters on SMS, 3072 on RCS, 4096 on WhatsApp) and names only {{firstName}}, {{lastName}} or {{customFields.<key>}} of a declared field, each with an optional fallback ({{firstName|there}}). mediaIds only on RCS and WhatsApp, each a media of the account (503 while media cannot be checked). Lists: live lists of the account. scheduledAt: in the future. A breach of any of these is a 400 naming its field.",
    params: createCampaignIn,
    responses: { 201: campaignOut },
    errors: [400, 503],
    async handler(this: CampaignsThis, ctx: Ctx<CampaignIn>): Promise<CampaignOut> {
      const v = valuesOf(ctx.params);
      await checkCampaign(ctx, q(this.sequelize), v);
      const id = randomUUID();
      const row = await withMedia(
        this,
        (exec) => insertCampaign(exec, id, ctx.meta.companyId, v),
        () => (v.mediaIds.length ? callMediaOf(ctx, "media.reference", { owner: owner(id), mediaIds: v.mediaIds }) : Promise.resolve()),
        // Media refused (or unreachable): the draft goes again, and any reference with it.
        async () => {
          await undoCreate(q(this.sequelize), ctx.meta.companyId, id);
          await callMediaOf(ctx, "media.release", { owner: owner(id) }).catch(() => undefined);
        },
      );
      ctx.meta.$statusCode = 201;
      ctx.meta.$location = `${API_PREFIX}/campaigns/${id}`;
      return toCampaignOut(row);
    },
  }),

  /** Finds the account's campaigns, newest first by default. */
  list: apiAction({
    rest: "GET /campaigns",
    operation: "CAMPAIGNS",
    summary: "Find campaigns",
    description: "Filters `status`, `channel`, `search` (part of the name); the page envelope.",
    params: listCampaignsIn,
    responses: { 200: campaignPage },
    errors: [400],
    async handler(this: CampaignsThis, ctx: Ctx<ListCampaignsIn>): Promise<Page<CampaignOut>> {
      const { rows, total } = await campaignsPage(q(this.sequelize), ctx.meta.companyId, ctx.params);
      return toPage(rows.map(toCampaignOut), total, ctx.params.page, ctx.params.limit);
    },
  }),

  /** One campaign with its progress. */
  get: idAction(
    "GET /campaigns/:id",
    "Get a campaign",
    "The campaign with its status and progress (audience, sent, failed).",
    [400, 404],
    async function (ctx) {
      return toCampaignOut(await mustFind(this.sequelize, ctx.meta.companyId, ctx.params.id));
    },
  ),

  /** Changes a DRAFT (any of its fields); re-references its media. */
  update: apiAction({
    rest: "PUT /campaigns/:id",
    operation: "CAMPAIGNS",
    summary: "Update a draft campaign",
    description:
      "Only a DRAFT (else 409 naming its status). Fields given replace the draft's; the same rules as at creation (each a 400 naming its field). The body names at least one field (an empty one is a 400). The key needs the channel before and after.",
    params: updateCampaignIn,
    responses: { 200: campaignOut },
    errors: [400, 404, 409, 503],
    async handler(this: CampaignsThis, ctx: Ctx<UpdateCampaignIn>): Promise<CampaignOut> {
      const { companyId } = ctx.meta;
      const old = await mustFind(this.sequelize, companyId, ctx.params.id);
      requireChannel(ctx.meta, old.channel);
      if (old.status !== "DRAFT") throw conflict(old.status, "only a DRAFT can be updated");
      const p = ctx.params;
      if (Object.keys(p).length < 2) throw badRequest("The body names no field to change.", [{ path: "", message: "must have at least one field" }]);
      const v = valuesOf({
        name: p.name ?? old.name,
        channel: p.channel ?? old.channel,
        contactListIds: p.contactListIds ?? old.contact_list_ids.map(Number),
        message: p.message ?? { text: old.text, mediaIds: old.media_ids },
        scheduledAt: p.scheduledAt === undefined ? (old.scheduled_at ? new Date(old.scheduled_at).toISOString() : null) : p.scheduledAt,
        sendRatePerSecond: p.sendRatePerSecond === undefined ? old.send_rate_per_second : p.sendRatePerSecond,
      });
      await checkCampaign(ctx, q(this.sequelize), v);
      const row = await withMedia(
        this,
        async (exec) => {
          const r = await updateDraft(exec, companyId, old.id, v);
          if (!r) throw conflict((await findCampaign(exec, companyId, old.id))?.status ?? "CANCELLED", "only a DRAFT can be updated");
          return r;
        },
        () =>
          v.mediaIds.length
            ? callMediaOf(ctx, "media.reference", { owner: owner(old.id), mediaIds: v.mediaIds })
            : old.media_ids.length
              ? callMediaOf(ctx, "media.release", { owner: owner(old.id) })
              : Promise.resolve(),
        // Media refused (or unreachable): the draft's old values and references again.
        async () => {
          await inTransaction(this.sequelize, (exec) => updateDraft(exec, companyId, old.id, oldValues(old)));
          if (old.media_ids.length) await callMediaOf(ctx, "media.reference", { owner: owner(old.id), mediaIds: old.media_ids });
          else await callMediaOf(ctx, "media.release", { owner: owner(old.id) });
        },
      );
      return toCampaignOut(row);
    },
  }),

  /** Deletes a DRAFT and drops its media references. */
  remove: apiAction({
    rest: "DELETE /campaigns/:id",
    operation: "CAMPAIGNS",
    summary: "Delete a draft campaign",
    description: "Only a DRAFT (else 409 naming its status); answers 204.",
    params: campaignIdIn,
    responses: { 204: null },
    errors: [400, 404, 409, 503],
    async handler(this: CampaignsThis, ctx: Ctx<{ id: string }>): Promise<null> {
      const old = await mustFind(this.sequelize, ctx.meta.companyId, ctx.params.id);
      if (old.status !== "DRAFT") throw conflict(old.status, "only a DRAFT can be deleted (cancel it instead)");
      await inTransaction(this.sequelize, async (exec) => {
        if (!(await deleteDraft(exec, ctx.meta.companyId, old.id)))
          throw conflict((await findCampaign(exec, ctx.meta.companyId, old.id))?.status ?? "CANCELLED", "only a DRAFT can be deleted");
      });
      // After the commit (never inside it, see withMedia); release is idempotent.
      if (old.media_ids.length) await callMediaOf(ctx, "media.release", { owner: owner(old.id) });
      ctx.meta.$statusCode = 204;
      return null;
    },
  }),

  /** Confirms a DRAFT: snapshots its audience in one statement and schedules it (202). */
  confirm: apiAction({
    rest: "PUT /campaigns/:id/confirm",
    operation: "CAMPAIGNS",
    summary: "Confirm a campaign (schedule and send)",
    description:
      "Snapshots the audience (distinct valid contacts of the lists reachable on the channel: a phone number; on RCS and WhatsApp not a number whose latest receipt there was UNSUPPORTED or DISABLED) and answers 202 with the campaign SCHEDULED; sending starts at scheduledAt (or now) on any campaigns node. A deleted or foreign list, or an empty audience, is a 400 and the campaign stays DRAFT. Contacts of test lists (isTest) are sent with simulation: true.",
    params: campaignIdIn,
    responses: { 202: campaignOut },
    errors: [400, 404, 409],
    timeout: CONFIRM_TIMEOUT_MS,
    async handler(this: CampaignsThis, ctx: Ctx<{ id: string }>): Promise<CampaignOut> {
      const { companyId } = ctx.meta;
      const old = await mustFind(this.sequelize, companyId, ctx.params.id);
      requireChannel(ctx.meta, old.channel);
      if (old.status !== "DRAFT") throw conflict(old.status, "only a DRAFT can be confirmed");
      const row = await inTransaction(this.sequelize, async (exec) => {
        const c = await findCampaign(exec, companyId, old.id, true);
        if (!c) throw notFound(old.id);
        if (c.status !== "DRAFT") throw conflict(c.status, "only a DRAFT can be confirmed");
        await checkLists(exec, companyId, c.contact_list_ids.map(Number), true);
        const { audience, skipped } = await snapshotAudience(exec, c, parseText(c.text).customKeys);
        if (audience === 0)
          throw badRequest("The audience is empty: no contact of these lists can be reached on this channel; the campaign stays DRAFT.", [
            { path: "contactListIds", message: `no contact reachable on ${c.channel}` },
          ]);
        if (audience === skipped)
          throw badRequest(`Every contact of these lists opted out of ${c.channel}; the campaign stays DRAFT.`, [
            { path: "contactListIds", message: `no contact reachable on ${c.channel}: every number opted out` },
          ]);
        return markScheduled(exec, c.id, audience, skipped);
      });
      // Before the first batch plans its statements (a large snapshot: an ANALYZE of about 100 ms).
      await refreshRecipientStats(this.sequelize, Number(row.audience)).catch((err: unknown) =>
        this.logger.warn({ err, campaignId: row.id }, "ANALYZE campaign_recipients after a snapshot failed"),
      );
      this.kick();
      ctx.meta.$statusCode = 202;
      ctx.meta.$location = `${API_PREFIX}/campaigns/${row.id}`;
      return toCampaignOut(row);
    },
  }),

  /** Pauses a SCHEDULED or SENDING campaign: no batch is claimed after it; the batches in flight finish and record their outcomes. */
  pause: idAction("PUT /campaigns/:id/pause", "Pause a campaign", "Only while SCHEDULED or SENDING (else 409).", [400, 404, 409], async function (ctx) {
    const row = await change(this, ctx, ["SCHEDULED", "SENDING"], CHANGES.pause, "only a SCHEDULED or SENDING campaign can be paused");
    return toCampaignOut(row);
  }),

  /** Resumes a PAUSED campaign where it stopped. */
  resume: idAction(
    "PUT /campaigns/:id/resume",
    "Resume a paused campaign",
    "Only while PAUSED (else 409); recipients already sent are not sent again.",
    [400, 404, 409],
    async function (ctx) {
      const row = await change(this, ctx, ["PAUSED"], CHANGES.resume, "only a PAUSED campaign can be resumed");
      this.kick();
      return toCampaignOut(row);
    },
  ),

  /** Cancels a campaign not yet final: recipients not yet sent never are. */
  cancel: idAction(
    "PUT /campaigns/:id/cancel",
    "Cancel a campaign",
    "Any status but SENT, FAILED and CANCELLED (else 409); messages already sent stay sent.",
    [400, 404, 409],
    async function (ctx) {
      const open = (["DRAFT", "SCHEDULED", "SENDING", "PAUSED"] as const).filter((s) => !FINAL_STATUSES.includes(s));
      const row = await change(this, ctx, open, CHANGES.cancel, "only a campaign not yet final can be cancelled");
      void this.releaseMedia();
      return toCampaignOut(row);
    },
  ),
};
