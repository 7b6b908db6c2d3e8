/**
 * media: images and videos partners upload to reuse in campaigns and inbox replies (spec part 1,
 * contract section 4 "Media"). The gateway receives the upload (streamed to its spool, the kind
 * judged from the first bytes, each kind cut at its own limit) and keeps them while the call
 * runs; a media node pulls them range by range (uploadedBytes of lib/remote-file.ts), keeps them under its MEDIA_DIR (temp name, fsync, rename) and records
 * itself as the file's node. Content is answered by reference (lib/remote-file.ts): any gateway
 * pulls the bytes, or one range of them, from the node that holds the file.
 *
 * Other services check and hold media through `media.resolve`, `media.reference` and
 * `media.release` (media.refs.ts, typed in media.contract.ts); referenced media cannot be deleted.
 */
import { stat } from "node:fs/promises";
import type { Context, Service, ServiceSchema } from "moleculer";
import { QueryTypes, type Sequelize } from "sequelize";
import { apiAction, type ApiServiceSettings, type AuthMeta } from "../../lib/api";
import type { Deps } from "../../lib/deps";
import { ApiError } from "../../lib/errors";
import { addNodeRegistry } from "../../lib/http-metrics";
import { queryPage, type Page } from "../../lib/paging";
import type { RemoteFile } from "../../lib/remote-file";
import { contentDisposition, etagOf, notModified, parseRange } from "./media.content";
import { MEDIA_COLUMNS, toMediaOut, type MediaRow } from "./media.models";
import { MediaMetrics } from "./media.metrics";
import { refActions } from "./media.refs";
import {
  contentOut,
  fileRangeIn,
  fileSizeIn,
  listMediaIn,
  mediaIdIn,
  mediaOut,
  mediaPage,
  partialContentOut,
  type FileRangeIn,
  type MediaOut,
} from "./media.schemas";
import { MediaFiles } from "./media.storage";
import { uploadAction } from "./media.upload";

interface MediaVars {
  sequelize: Sequelize;
  files: MediaFiles;
  metrics: MediaMetrics;
  rowOf(companyId: string, id: string): Promise<MediaRow>;
  locate(ctx: Context, row: MediaRow): Promise<RemoteFile>;
}
type MediaThis = Service<ApiServiceSettings> & MediaVars;
type Ctx<P> = Context<P, AuthMeta & { $location?: string; $responseType?: string }>;

/** A file younger than this may belong to an upload whose row is being written: the startup sweep leaves it. */
const ORPHAN_GRACE_MS = 3600_000;
const notFound = (id: string) => new ApiError("MEDIA_NOT_FOUND", `No media ${id} in this account.`);
const fileGone = () => new ApiError("MEDIA_FILE_GONE", "The media file is not reachable now (its node is away); retry later.");

export function createMediaService(deps: Deps): ServiceSchema<ApiServiceSettings, Record<string, never>, MediaVars> {
  const { config, db } = deps;
  const sequelize = db.sequelize;

  return {
    name: "media",
    settings: { rest: "/" },

    actions: {
      /** Stores an uploaded image or video (kind judged by content): 201 with the media. */
      upload: uploadAction(config, sequelize),

      /** The account's media, newest first. */
      list: apiAction({
        rest: "GET /media",
        operation: "MEDIA",
        summary: "List media",
        description: "The account's media, newest first (page envelope).",
        params: listMediaIn,
        responses: { 200: mediaPage },
        errors: [400],
        async handler(ctx: Ctx<{ page: number; limit: number }>): Promise<Page<MediaOut>> {
          return queryPage(sequelize, {
            select: `SELECT ${MEDIA_COLUMNS} FROM media WHERE company_id = :companyId ORDER BY created_at DESC, id DESC LIMIT :limit OFFSET :offset`,
            count: "SELECT count(*) AS total FROM media WHERE company_id = :companyId",
            replacements: { companyId: ctx.meta.companyId },
            page: ctx.params.page,
            limit: ctx.params.limit,
            map: toMediaOut,
          });
        },
      }),

      /** One media of the account. */
      get: apiAction({
        rest: "GET /media/:id",
        operation: "MEDIA",
        summary: "Get a media",
        params: mediaIdIn,
        responses: { 200: mediaOut },
        errors: [404],
        async handler(this: MediaThis, ctx: Ctx<{ id: string }>): Promise<MediaOut> {
          return toMediaOut(await this.rowOf(ctx.meta.companyId, ctx.params.id));
        },
      }),

      /** Deletes a media and its file; 409 naming the owners while anything refers to it. */
      remove: apiAction({
        rest: "DELETE /media/:id",
        operation: "MEDIA",
        summary: "Delete a media",
        description:
          "Deletes the media and its file. While a campaign or a reply not yet final refers to it, 409 MEDIA_IN_USE whose `referencedBy` names them (e.g. `campaign:<id>`).",
        params: mediaIdIn,
        responses: { 204: null },
        errors: [404, 409],
        async handler(this: MediaThis, ctx: Ctx<{ id: string }>): Promise<null> {
          const { companyId } = ctx.meta;
          const id = ctx.params.id.toLowerCase();
          const row = await sequelize.transaction(async (transaction) => {
            const [found] = await sequelize.query<MediaRow>(`SELECT ${MEDIA_COLUMNS} FROM media WHERE company_id = $1 AND id = $2 FOR UPDATE`, {
              bind: [companyId, id],
              type: QueryTypes.SELECT,
              transaction,
            });
            if (!found) throw notFound(ctx.params.id);
            const refs = await sequelize.query<{ owner: string }>(
              `SELECT owner FROM media_references WHERE company_id = $1 AND media_id = $2 ORDER BY owner LIMIT 100`,
              { bind: [companyId, id], type: QueryTypes.SELECT, transaction },
            );
            if (refs.length) {
              const referencedBy = refs.map((r) => r.owner);
              throw new ApiError("MEDIA_IN_USE", `The media is in use by ${referencedBy.join(", ")}; it can be deleted once they no longer refer to it.`, {
                referencedBy,
              });
            }
            await sequelize.query(`DELETE FROM media WHERE company_id = $1 AND id = $2`, { bind: [companyId, id], transaction });
            return found;
          });
          // The row is gone: the file goes too, here or on its node (a node away keeps an orphan its startup sweep removes).
          if (row.node_id === this.broker.nodeID) await this.files.remove(row.id);
          else
            await ctx
              .call("media.removeFile", { id: row.id }, { nodeID: row.node_id })
              .catch((err: Error) => this.logger.warn({ err, id: row.id }, "media file not removed"));
          ctx.meta.$statusCode = 204;
          return null;
        },
      }),

      /** The file: streamed from its node, with ETag/If-None-Match (304) and one byte range (206, 416). */
      content: apiAction({
        rest: "GET /media/:id/content",
        operation: "MEDIA",
        summary: "Download a media's file",
        description:
          "The file as uploaded, with its detected Content-Type, `ETag` (its quoted sha256), `Accept-Ranges: bytes`, `Cache-Control: private`, `X-Content-Type-Options: nosniff` " +
          "and `Content-Disposition: inline` with a safe file name. `If-None-Match` with the ETag answers 304 without a body. One `Range` (`bytes=a-b`, `bytes=a-`, `bytes=-n`) " +
          "answers 206 with `Content-Range`; a range wholly past the end answers 416 with `Content-Range: bytes */<size>`; several ranges answer the whole file (200).",
        params: mediaIdIn,
        requestHeaders: {
          range: "One byte range: `bytes=0-1023`, `bytes=1024-` or `bytes=-500` (the last 500 bytes).",
          "if-none-match": "The ETag of a copy the client holds: 304 when it is current.",
        },
        responses: { 200: contentOut, 206: partialContentOut, 304: null },
        errors: [404, 416],
        async handler(this: MediaThis, ctx: Ctx<{ id: string }>): Promise<RemoteFile | null> {
          const row = await this.rowOf(ctx.meta.companyId, ctx.params.id);
          const size = Number(row.size);
          const etag = etagOf(row.sha256);
          const headers: Record<string, string> = {
            ETag: etag,
            "Cache-Control": "private",
            "Accept-Ranges": "bytes",
            "X-Content-Type-Options": "nosniff",
            "Content-Disposition": contentDisposition(row.file_name),
          };
          const asked = ctx.meta.$requestHeaders ?? {};
          // Answered here, before the file is located: moleculer-web ends a null answer at once (no body, our headers),
          // whereas its own freshness check would turn a matching ETag into a 304 only after the stream was pulled.
          if (notModified(asked["if-none-match"], etag)) {
            ctx.meta.$statusCode = 304;
            ctx.meta.$responseHeaders = headers;
            return null;
          }
          const range = parseRange(asked.range, size);
          if (range.kind === "unsatisfiable") throw new ApiError("RANGE_NOT_SATISFIABLE", `The range is past the end of the file (${size} bytes).`, { size });
          const file = await this.locate(ctx, row);
          ctx.meta.$responseType = row.content_type;
          if (range.kind === "part") {
            ctx.meta.$statusCode = 206;
            ctx.meta.$responseHeaders = {
              ...headers,
              "Content-Range": `bytes ${range.start}-${range.start + range.length - 1}/${size}`,
              "Content-Length": String(range.length),
            };
            return { $remoteFile: { ...file.$remoteFile, start: range.start, length: range.length } };
          }
          ctx.meta.$responseHeaders = { ...headers, "Content-Length": String(size) };
          return file;
        },
      }),

      /** The size of a media file this node holds (404 when it does not). */
      fileSize: {
        visibility: "public",
        params: fileSizeIn,
        async handler(this: MediaThis, ctx: Context<{ id: string }>): Promise<number> {
          const st = await stat(this.files.fileOf(ctx.params.id)).catch(() => null);
          if (!st) throw fileGone();
          return st.size;
        },
      },

      /** A range of a media file this node holds, base64: what a gateway pulls as its client reads (lib/remote-file.ts). */
      range: {
        visibility: "public",
        params: fileRangeIn,
        async handler(this: MediaThis, ctx: Context<FileRangeIn>): Promise<string> {
          return (await this.files.read(ctx.params.id, ctx.params.offset, ctx.params.length)).toString("base64");
        },
      },

      /** Removes a media file this node holds (its row is already gone). */
      removeFile: {
        visibility: "public",
        params: fileSizeIn,
        async handler(this: MediaThis, ctx: Context<{ id: string }>): Promise<{ removed: true }> {
          await this.files.remove(ctx.params.id);
          return { removed: true };
        },
      },

      ...refActions,
    },

    methods: {
      async rowOf(companyId: string, id: string): Promise<MediaRow> {
        const [row] = await sequelize.query<MediaRow>(`SELECT ${MEDIA_COLUMNS} FROM media WHERE company_id = $1 AND id = $2`, {
          bind: [companyId, id.toLowerCase()],
          type: QueryTypes.SELECT,
        });
        if (!row) throw notFound(id);
        return row;
      },

      /** Where the file is: here (this node stored it), else on the node that stored it. */
      async locate(this: MediaThis, ctx: Context, row: MediaRow): Promise<RemoteFile> {
        const here = await stat(this.files.fileOf(row.id)).catch(() => null);
        if (here) return { $remoteFile: { action: "media.range", nodeID: this.broker.nodeID, params: { id: row.id }, size: here.size } };
        if (row.node_id === this.broker.nodeID || !this.broker.registry.nodes.get(row.node_id)?.available) throw fileGone();
        const size = (await ctx.call("media.fileSize", { id: row.id }, { nodeID: row.node_id })) as number;
        return { $remoteFile: { action: "media.range", nodeID: row.node_id, params: { id: row.id }, size } };
      },
    },

    /** Files left behind while this node was away (their media deleted) or by uploads cut short are removed at start. */
    async started(this: MediaThis) {
      const rowsOf = async (ids: string[]) =>
        new Set(
          ids.length
            ? (await sequelize.query<{ id: string }>(`SELECT id FROM media WHERE id = ANY($1::uuid[])`, { bind: [ids], type: QueryTypes.SELECT })).map(
                (r) => r.id,
              )
            : [],
        );
      const removed = await this.files.sweep(rowsOf, ORPHAN_GRACE_MS).catch((err: Error) => (this.logger.warn({ err }, "media sweep failed"), 0));
      if (removed) this.logger.info({ removed }, "media files without a row removed");
    },

    created(this: MediaThis) {
      this.sequelize = sequelize;
      this.files = new MediaFiles(config.mediaDir);
      this.metrics = new MediaMetrics(sequelize);
      addNodeRegistry(this.broker, this.metrics.registry);
    },
  };
}
