/**
 * The internal actions other services call (their types: media.contract.ts): which ids are media
 * of the account (`resolve`), and who refers to them (`reference`, `release`), which keeps a media
 * from being deleted while a campaign or a reply not yet final needs it.
 *
 * Race with DELETE: `reference` locks the media rows it names (FOR SHARE) in the transaction that
 * writes the references; DELETE locks its row FOR UPDATE and then reads the references. Whichever
 * comes second waits for the first to commit: a DELETE then sees the references (409), a reference
 * then finds the media gone (400 naming it).
 */
import type { Context } from "moleculer";
import type { Sequelize } from "sequelize";
import { apiAction, type AuthMeta } from "../../lib/http/api";
import { ApiError } from "../../lib/errors";
import {
  MEDIA_ID_RE,
  mediaKeyOf,
  referenceMediaIn,
  releaseMediaIn,
  resolveMediaIn,
  type ReferenceMediaIn,
  type ReferenceMediaOut,
  type ReleaseMediaIn,
  type ReleaseMediaOut,
  type ResolveMediaIn,
  type ResolveMediaOut,
} from "./media.contract";
import { mediaKindOf } from "./media.models";
import { releaseReferences, replaceReferences, resolvedRows, shareLockMedia } from "./media.queries";

export interface RefsThis {
  sequelize: Sequelize;
}

type Ctx<P> = Context<P, AuthMeta>;

/** Each id once, in the order given; the well-formed ones lower-cased for the lookup. */
const distinct = (ids: string[]) => [...new Set(ids)];
const wellFormed = (ids: string[]) => ids.filter((id) => MEDIA_ID_RE.test(id)).map((id) => id.toLowerCase());

export const refActions = {
  /** For campaigns and replies: which of these ids are media of the caller's account, with type and size. */
  resolve: apiAction({
    visibility: "public",
    params: resolveMediaIn,
    async handler(this: RefsThis, ctx: Ctx<ResolveMediaIn>): Promise<ResolveMediaOut> {
      const ids = distinct(ctx.params.ids);
      const lookup = wellFormed(ids);
      const rows = await resolvedRows(this.sequelize, ctx.meta.companyId, lookup);
      const byId = new Map(rows.map((r) => [r.id, r]));
      const out: ResolveMediaOut = { found: [], missing: [] };
      for (const id of ids) {
        const row = MEDIA_ID_RE.test(id) ? byId.get(id.toLowerCase()) : undefined;
        if (row)
          out.found.push({
            id: row.id,
            mediaKey: mediaKeyOf(row.id),
            contentType: row.content_type,
            kind: mediaKindOf(row.content_type),
            size: Number(row.size),
          });
        else out.missing.push(id);
      }
      return out;
    },
  }),

  /** The owner now refers to exactly these media of the account (its previous set replaced); an unknown id is a 400 and nothing changes. */
  reference: apiAction({
    visibility: "public",
    params: referenceMediaIn,
    async handler(this: RefsThis, ctx: Ctx<ReferenceMediaIn>): Promise<ReferenceMediaOut> {
      const { companyId } = ctx.meta;
      const ids = distinct(ctx.params.mediaIds.map((id) => (MEDIA_ID_RE.test(id) ? id.toLowerCase() : id)));
      return this.sequelize.transaction(async (transaction) => {
        const found = await shareLockMedia(this.sequelize, companyId, wellFormed(ids), transaction);
        const unknown = ids.filter((id) => !found.has(id));
        if (unknown.length) {
          throw new ApiError("VALIDATION_ERROR", `No media ${unknown.slice(0, 10).join(", ")} in this account.`, {
            errors: unknown.map((id) => ({
              path: `mediaIds[${ctx.params.mediaIds.findIndex((x) => x.toLowerCase() === id.toLowerCase())}]`,
              message: `media ${id} does not exist in this account`,
            })),
          });
        }
        await replaceReferences(this.sequelize, companyId, ctx.params.owner, ids, transaction);
        return { referenced: ids };
      });
    },
  }),

  /** The owner refers to no media any more (idempotent). */
  release: apiAction({
    visibility: "public",
    params: releaseMediaIn,
    async handler(this: RefsThis, ctx: Ctx<ReleaseMediaIn>): Promise<ReleaseMediaOut> {
      return { released: await releaseReferences(this.sequelize, ctx.meta.companyId, ctx.params.owner) };
    },
  }),
};
