/**
 * What other services may import from media: the internal actions through which campaigns and
 * inbox replies check the media they name and hold on to them while they need them. Every call
 * acts in the account of `ctx.meta.companyId`, as every action does:
 *
 *   await ctx.call<ResolveMediaOut, ResolveMediaIn>("media.resolve", { ids }, { meta: ctx.meta });
 *   await ctx.call<ReferenceMediaOut, ReferenceMediaIn>("media.reference", { owner: `campaign:${id}`, mediaIds });
 *   await ctx.call<ReleaseMediaOut, ReleaseMediaIn>("media.release", { owner: `campaign:${id}` });
 *
 * An owner refers to exactly the set it last registered; a media that any owner refers to cannot
 * be deleted (409 MEDIA_IN_USE naming the owners), so release an owner once it is final (a
 * campaign SENT, FAILED or CANCELLED, a reply sent or failed) or deleted.
 */
import { UUID_PATTERN } from "../../lib/http/validator";
import { callerOf, type Action } from "../../lib/bus/calls";

export type MediaKind = "image" | "video";

/** What an upstream or a partner uses to name a file: `media/<id>` (stable for the media's life, the same on every node). */
export const mediaKeyOf = (id: string) => `media/${id}`;

export const MEDIA_ID_RE = new RegExp(UUID_PATTERN);

/** `media.resolve`: which of these ids are media of the caller's account. */
export interface ResolveMediaIn {
  ids: string[];
}

export interface ResolvedMedia {
  id: string;
  mediaKey: string;
  contentType: string;
  kind: MediaKind;
  size: number;
}

/** `found` in the order given (each id once); `missing`: the ids given that are not media of the account (malformed ones too), in order. */
export interface ResolveMediaOut {
  found: ResolvedMedia[];
  missing: string[];
}

export const resolveMediaIn = {
  $id: "MediaResolveIn",
  type: "object",
  required: ["ids"],
  properties: { ids: { type: "array", minItems: 1, maxItems: 100, items: { type: "string", maxLength: 200 } } },
};

/** `owner`: who refers (`campaign:<uuid>`, `reply:<uuid>`, ...). */
export const MEDIA_OWNER_PATTERN = "^[a-z]+:[A-Za-z0-9_-]+$";
const owner = { type: "string", minLength: 1, maxLength: 200, pattern: MEDIA_OWNER_PATTERN };

/**
 * `media.reference`: the owner now refers to exactly these media (its previous set is replaced; an
 * empty list drops them all). Idempotent. An id that is not a media of the account is a 400
 * VALIDATION_ERROR naming it, and nothing changes. Safe against a concurrent DELETE.
 */
export interface ReferenceMediaIn {
  owner: string;
  mediaIds: string[];
}

/** The media the owner refers to now (each once, in the order given). */
export interface ReferenceMediaOut {
  referenced: string[];
}

export const referenceMediaIn = {
  $id: "MediaReferenceIn",
  type: "object",
  required: ["owner", "mediaIds"],
  properties: { owner, mediaIds: { type: "array", maxItems: 100, items: { type: "string", maxLength: 200 } } },
};

/** `media.release`: the owner refers to nothing any more. Idempotent. */
export interface ReleaseMediaIn {
  owner: string;
}

/** How many references were dropped (0 on a repeat). */
export interface ReleaseMediaOut {
  released: number;
}

export const releaseMediaIn = { $id: "MediaReleaseIn", type: "object", required: ["owner"], properties: { owner } };

/** What other services call of media (lib/bus/calls.ts). */
export interface MediaActions {
  "media.resolve": Action<ResolveMediaIn, ResolveMediaOut>;
  "media.reference": Action<ReferenceMediaIn, ReferenceMediaOut>;
  "media.release": Action<ReleaseMediaIn, ReleaseMediaOut>;
}
export const callMedia = callerOf<MediaActions>();
