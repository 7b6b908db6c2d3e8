/**
 * TEST DOUBLE of a sibling service: the `media` service (issue 16) is built in another change; this
 * stands in for it with the three actions campaigns call, over an in-memory map, with exactly the
 * interface agreed between the two changes:
 *   media.resolve   { ids }              -> { found: [{ id, mediaKey, contentType, kind, size }], missing }
 *   media.reference { owner, mediaIds }  -> replaces the owner's references (unknown id: 400)
 *   media.release   { owner }            -> drops them
 * all scoped by meta.companyId. Tests add media with `add` and read the references with `refs`.
 * Never part of the product.
 */
import { randomUUID } from "node:crypto";
import type { Context, ServiceSchema } from "moleculer";
import { ApiError } from "../../lib/errors";

export interface MediaDouble {
  schema: ServiceSchema;
  /** A media of `companyId`; answers its id. */
  add(companyId: string, kind?: "image" | "video"): string;
  /** The media ids `owner` references now (empty when none). */
  refs(companyId: string, owner: string): string[];
  /** The owners that reference any media of `companyId` now. */
  owners(companyId: string): string[];
  calls: string[];
}

type Meta = { companyId: string };

export function mediaDouble(): MediaDouble {
  const media = new Map<string, { companyId: string; kind: "image" | "video" }>();
  const refs = new Map<string, string[]>();
  const calls: string[] = [];
  const own = (companyId: string, id: string) => media.get(id)?.companyId === companyId;
  return {
    calls,
    add(companyId, kind = "image") {
      const id = randomUUID();
      media.set(id, { companyId, kind });
      return id;
    },
    refs: (companyId, owner) => refs.get(`${companyId}|${owner}`) ?? [],
    owners: (companyId) => [...refs.keys()].filter((k) => k.startsWith(`${companyId}|`)).map((k) => k.slice(companyId.length + 1)),
    schema: {
      name: "media",
      actions: {
        resolve(ctx: Context<{ ids: string[] }, Meta>) {
          calls.push("resolve");
          const found = ctx.params.ids.filter((id) => own(ctx.meta.companyId, id));
          return {
            found: found.map((id) => ({ id, mediaKey: `media/${id}`, contentType: "image/png", kind: media.get(id)!.kind, size: 1234 })),
            missing: ctx.params.ids.filter((id) => !own(ctx.meta.companyId, id)),
          };
        },
        reference(ctx: Context<{ owner: string; mediaIds: string[] }, Meta>) {
          calls.push("reference");
          const unknown = ctx.params.mediaIds.filter((id) => !own(ctx.meta.companyId, id));
          if (unknown.length) throw new ApiError("VALIDATION_ERROR", `Unknown media ${unknown.join(", ")}`);
          refs.set(`${ctx.meta.companyId}|${ctx.params.owner}`, [...ctx.params.mediaIds]);
          return { owner: ctx.params.owner, mediaIds: ctx.params.mediaIds };
        },
        release(ctx: Context<{ owner: string }, Meta>) {
          calls.push("release");
          refs.delete(`${ctx.meta.companyId}|${ctx.params.owner}`);
          return { owner: ctx.params.owner };
        },
      },
    },
  };
}
