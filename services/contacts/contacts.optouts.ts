/**
 * Opt-outs (contract section 7): a number's consent per channel of an account, whatever contact
 * holds the number, or none. Partners read and change them (`/contacts/opt-outs`); inbox (STOP and
 * START keywords) and tracking's internal ingress (upstream reports) hand changes over through
 * `contacts.applyOptOuts`; imports set them with the `optedOut` column (contacts.runner.ts). All of
 * them write through one rule (contacts.optouts.queries.ts): a change older than the number's last
 * one is ignored, so repeats and late reports are harmless.
 */
import type { Context } from "moleculer";
import { instantOf } from "../../lib/messaging/time";
import type { Sequelize } from "sequelize";
import { API_PREFIX, apiAction, type AuthMeta } from "../../lib/http/api";
import { ApiError, type FieldError } from "../../lib/errors";
import { RETRYABLE_SQLSTATES, retryOn } from "../../lib/jobs/jobs";
import { isE164, PHONE_ERROR, toE164 } from "../../lib/messaging/phone";
import type { Page } from "../../lib/http/paging";
import { applyOptOutsIn, type ApplyOptOutsIn, type ApplyOptOutsOut } from "./contacts.contract";
import { applyChanges, optOutsPage, type Change, type OptOutState } from "./contacts.optouts.queries";
import { listOptOutsIn, optOutIn, optOutKeyIn, optOutOut, optOutPage, type ListOptOutsIn, type OptOutIn, type OptOutOut } from "./contacts.optouts.schemas";

export interface OptOutsThis {
  sequelize: Sequelize;
}

type Ctx<P> = Context<P, AuthMeta & { $location?: string }>;

/** A partner's phone number in E.164, or a 400 naming the parameter. */
function e164(phone: string): string {
  const e = toE164(phone);
  if (!e) throw new ApiError("VALIDATION_ERROR", "The phone number is not valid.", { errors: [{ path: "phoneNumber", message: PHONE_ERROR }] });
  return e;
}

/** Applies changes in a transaction of their own (run again after a deadlock or a lost race). */
export function applyOptOutChanges(sequelize: Sequelize, changes: Change[]): Promise<Array<{ changed: boolean; state: OptOutState | undefined }>> {
  return retryOn(RETRYABLE_SQLSTATES, 5, () => sequelize.transaction((t) => applyChanges(sequelize, t, changes)), {
    delayMs: (n) => 5 * n + Math.random() * 10,
  });
}

export const optOutActions = {
  /** The account's active opt-outs, newest first. */
  listOptOuts: apiAction({
    rest: "GET /contacts/opt-outs",
    operation: "CONTACTS",
    summary: "Find opt-outs",
    description:
      "The numbers of the account that opted out, per channel, newest first. Campaigns skip them on that channel and inbox replies to them are a 409 `recipient-opted-out`. `phoneNumber` is taken in international format and compared as E.164.",
    params: listOptOutsIn,
    responses: { 200: optOutPage },
    async handler(this: OptOutsThis, ctx: Ctx<ListOptOutsIn>): Promise<Page<OptOutOut>> {
      const p = ctx.params;
      return optOutsPage(this.sequelize, ctx.meta.companyId, { ...p, phoneNumber: p.phoneNumber === undefined ? undefined : e164(p.phoneNumber) });
    },
  }),

  /** Opts a number out of a channel (source API); an active opt-out answers 200 as it is. */
  createOptOut: apiAction({
    rest: "POST /contacts/opt-outs",
    operation: "CONTACTS",
    summary: "Opt a number out",
    description:
      "The number is never messaged on the channel by this account again (campaigns skip it, inbox replies are a 409) until the opt-out is removed or the end user writes START. Answers 201 with the new opt-out, or 200 with the one that exists (unchanged, whatever its source).",
    params: optOutIn,
    responses: { 200: optOutOut, 201: optOutOut },
    async handler(this: OptOutsThis, ctx: Ctx<OptOutIn>): Promise<OptOutOut> {
      const phoneNumber = e164(ctx.params.phoneNumber);
      const change: Change = { companyId: ctx.meta.companyId, channel: ctx.params.channel, phoneNumber, action: "OPT_OUT", source: "API", at: null };
      const [out] = await applyOptOutChanges(this.sequelize, [change]);
      const state = out!.state!;
      ctx.meta.$statusCode = out!.changed ? 201 : 200;
      // Where it is listed: GET /contacts/opt-outs filtered to it.
      if (out!.changed) ctx.meta.$location = `${API_PREFIX}/contacts/opt-outs?channel=${change.channel}&phoneNumber=${encodeURIComponent(phoneNumber)}`;
      return { channel: change.channel, phoneNumber, source: state.source, createdAt: new Date(state.createdAt).toISOString() };
    },
  }),

  /** Removes a number's opt-out of a channel; 404 when it has none. */
  removeOptOut: apiAction({
    rest: "DELETE /contacts/opt-outs/:channel/:phoneNumber",
    operation: "CONTACTS",
    summary: "Remove an opt-out",
    description:
      "The number may be messaged on the channel again. Whatever made the opt-out (a keyword, the upstream, the API, an import), only do this when the end user asked for it. The `+` of the number is URL-encoded in the path (`%2B`). 404 when the number is not opted out of the channel.",
    params: optOutKeyIn,
    responses: { 204: null },
    errors: [404],
    async handler(this: OptOutsThis, ctx: Ctx<OptOutIn>): Promise<null> {
      const phoneNumber = e164(ctx.params.phoneNumber);
      const change: Change = { companyId: ctx.meta.companyId, channel: ctx.params.channel, phoneNumber, action: "OPT_IN", source: "API", at: null };
      const [out] = await applyOptOutChanges(this.sequelize, [change]);
      if (!out!.changed) throw new ApiError("OPT_OUT_NOT_FOUND", `${phoneNumber} is not opted out of ${change.channel} in this account.`);
      ctx.meta.$statusCode = 204;
      return null;
    },
  }),

  /** Internal (inbox keywords, tracking's ingress): opt-outs and opt-ins of numbers, each applied unless older than the number's last change; resolves once committed. */
  applyOptOuts: apiAction({
    visibility: "public",
    params: applyOptOutsIn,
    async handler(this: OptOutsThis, ctx: Context<ApplyOptOutsIn>): Promise<ApplyOptOutsOut> {
      const errors: FieldError[] = [];
      const changes = ctx.params.items.map((it, i): Change => {
        if (!isE164(it.phoneNumber)) errors.push({ path: `items[${i}].phoneNumber`, message: PHONE_ERROR });
        // The same rule as every other date-time of the ingress and the inbox (a year from 1970 to 9999 as written),
        // so a date they took never fails here.
        const at = it.at === undefined ? null : instantOf(it.at);
        if (at !== null && Number.isNaN(at)) errors.push({ path: `items[${i}].at`, message: "must be a date-time of a year from 1970 to 9999" });
        return { companyId: it.companyId, channel: it.channel, phoneNumber: it.phoneNumber, action: it.action, source: it.source, at };
      });
      if (errors.length > 0)
        throw new ApiError("VALIDATION_ERROR", `${errors.length} opt-out field(s) are invalid; nothing was stored.`, { errors: errors.slice(0, 50) });
      const out = await applyOptOutChanges(this.sequelize, changes);
      return { changed: out.filter((o) => o.changed).length };
    },
  }),
};
