/**
 * What a campaign must be before anything is stored: the key holds the campaign's channel (401),
 * the text fits the channel and names only known placeholders, media only on RCS and WhatsApp and
 * known to the media service, the lists live lists of the account, scheduledAt in the future.
 * Every refusal is a 400 naming its field; media that cannot be checked (no media service) a 503.
 */
import type { Context } from "moleculer";
import { instantOf } from "../../lib/messaging/time";
import type { AuthMeta } from "../../lib/http/api";
import type { Channel } from "../../lib/messaging/channels";
import { ApiError, badRequest, type FieldError } from "../../lib/errors";
import { callContacts } from "../contacts/contacts.contract";
import { callMedia, type MediaActions } from "../media/media.contract";
import type { CampaignValues, Q } from "./campaigns.queries";
import { missingLists } from "./campaigns.queries";
import { characters, MAX_TEXT, parseText, TextError, type Parsed } from "./campaigns.text";

type Ctx = Context<unknown, AuthMeta>;

/** The key must hold the campaign's channel to create, change or confirm it (contract section 3). */
export function requireChannel(meta: AuthMeta, channel: Channel): void {
  if (!meta.operations.includes(channel))
    throw new ApiError("UNAUTHORIZED", `The API key is not authorized for ${channel}, the channel of this campaign (CAMPAIGNS and ${channel} are needed).`);
}

/** A Moleculer transport error: the service is not there (or not answering). */
const unavailable = (err: unknown) => {
  const type = (err as { type?: unknown })?.type;
  return type === "SERVICE_NOT_FOUND" || type === "SERVICE_NOT_AVAILABLE" || type === "REQUEST_TIMEOUT";
};

export const mediaUnavailable = () =>
  new ApiError("SERVICE_UNAVAILABLE", "The media service is not available, so the campaign's media cannot be checked or referenced; try again shortly.");

/** Calls the media service in the caller's account; its absence is a 503, never a 500. */
export async function callMediaOf<Name extends keyof MediaActions>(ctx: Ctx, name: Name, params: MediaActions[Name]["in"]): Promise<MediaActions[Name]["out"]> {
  try {
    return await callMedia(ctx, name, params, { meta: { companyId: ctx.meta.companyId } });
  } catch (err) {
    if (unavailable(err)) throw mediaUnavailable();
    throw err;
  }
}

/** The text: its length on the channel, its placeholders (custom fields the account declares). */
export async function checkText(ctx: Ctx, channel: Channel, text: string): Promise<Parsed> {
  const length = characters(text);
  if (length > MAX_TEXT[channel])
    throw badRequest(`The text has ${length} characters; ${channel} allows at most ${MAX_TEXT[channel]}.`, [
      { path: "message.text", message: `must have at most ${MAX_TEXT[channel]} characters on ${channel}` },
    ]);
  let parsed: Parsed;
  try {
    parsed = parseText(text);
  } catch (err) {
    if (err instanceof TextError) throw badRequest(`The text ${err.message}.`, err.errors);
    throw err;
  }
  if (parsed.customKeys.length) {
    const fields = await callContacts(ctx, "contacts.listCustomFields", {}, { meta: ctx.meta });
    const known = new Set(fields.data.map((f) => f.key));
    const unknown = parsed.customKeys.filter((k) => !known.has(k));
    if (unknown.length)
      throw badRequest(
        `The text names custom fields this account does not declare: ${unknown.join(", ")}.`,
        unknown.map((k) => ({ path: "message.text", message: `{{customFields.${k}}} is not a custom field of this account` })),
      );
  }
  return parsed;
}

/** mediaIds: none on SMS; otherwise every id known to the media service (400 naming the unknown). */
export async function checkMedia(ctx: Ctx, channel: Channel, mediaIds: string[]): Promise<void> {
  if (mediaIds.length === 0) return;
  if (channel === "SMS")
    throw badRequest("SMS campaigns carry no media; mediaIds is for RCS and WhatsApp.", [{ path: "message.mediaIds", message: "must be empty on SMS" }]);
  const { missing } = await callMediaOf(ctx, "media.resolve", { ids: [...new Set(mediaIds)] });
  if (missing.length)
    throw badRequest(
      `Unknown media: ${missing.join(", ")}.`,
      missing.map((id) => ({ path: "message.mediaIds", message: `${id} is not a media of this account` })),
    );
}

/** scheduledAt, when given, is a real instant in the future. */
export function checkSchedule(scheduledAt: string | null): void {
  if (scheduledAt === null) return;
  const t = instantOf(scheduledAt);
  const errors: FieldError[] = [];
  if (Number.isNaN(t)) errors.push({ path: "scheduledAt", message: "must be a date-time of a year from 1970 to 9999" });
  else if (t <= Date.now()) errors.push({ path: "scheduledAt", message: "must be in the future" });
  if (errors.length) throw badRequest("`scheduledAt` must be a future date-time.", errors);
}

/** The lists: live lists of the account (a deleted, foreign or unknown id is a 400 naming it). */
export async function checkLists(exec: Q, companyId: string, ids: number[], lock = false): Promise<void> {
  const missing = await missingLists(exec, companyId, ids, lock);
  if (missing.length)
    throw badRequest(
      `Unknown or deleted contact lists: ${missing.join(", ")}.`,
      missing.map((id) => ({ path: "contactListIds", message: `${id} is not a contact list of this account` })),
    );
}

/** Every check of a campaign's values, the cheap ones first. */
export async function checkCampaign(ctx: Ctx, exec: Q, v: CampaignValues): Promise<void> {
  requireChannel(ctx.meta, v.channel);
  checkSchedule(v.scheduledAt);
  await checkText(ctx, v.channel, v.text);
  await checkLists(exec, ctx.meta.companyId, v.contactListIds);
  await checkMedia(ctx, v.channel, v.mediaIds);
}
