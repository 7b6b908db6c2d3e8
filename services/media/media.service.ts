/**
 * media: images and videos partners upload to reuse in campaigns and inbox replies (spec part 1,
 * contract section 4 "Media"). The gateway receives the upload (streamed to its spool, the kind
 * judged from the first bytes, each kind cut at its own limit) and keeps them while the call
 * runs; a media node pulls them range by range (uploadedBytes of lib/http/remote-file.ts), keeps them under its MEDIA_DIR (temp name, fsync, rename) and records
 * itself as the file's node. Content is answered by reference (lib/http/remote-file.ts): any gateway
 * pulls the bytes, or one range of them, from the node that holds the file.
 *
 * Other services check and hold media through `media.resolve`, `media.reference` and
 * `media.release` (media.refs.ts, typed in media.contract.ts); referenced media cannot be deleted.
 */
import { stat } from "node:fs/promises";
import type { Context, Service, ServiceSchema } from "moleculer";
import type { Sequelize } from "sequelize";
import { apiAction, type ApiServiceSettings, type AuthMeta } from "../../lib/http/api";
import type { Deps } from "../../lib/deps";
import { ApiError } from "../../lib/errors";
import { addNodeRegistry } from "../../lib/observability/http-metrics";
import { Loops } from "../../lib/jobs/jobs";
import type { Page } from "../../lib/http/paging";
import type { RemoteFile } from "../../lib/http/remote-file";
import { contentDisposition, etagOf, notModified, parseRange } from "./media.content";
import { toMediaOut, type MediaRow } from "./media.models";
import { deleteMedia, idsWithRows, mediaPage, mediaRow, ownersOf } from "./media.queries";
import { MediaMetrics } from "./media.metrics";
import { refActions } from "./media.refs";
import {
  contentOut,
  fileRangeIn,
  fileSizeIn,
  listMediaIn,
  mediaIdIn,
  mediaOut,
  mediaPage as mediaPageOut,
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
  loops: Loops;
  rowOf(companyId: string, id: string): Promise<MediaRow>;
  removeMedia(ctx: Context, id: string): Promise<void>;
  sweepOrphans(): Promise<number>;
  locate(ctx: Context, row: MediaRow): Promise<RemoteFile>;
  answerContent(ctx: Context<{ id: string }, AuthMeta & { $responseType?: string }>): Promise<RemoteFile | null>;
}
type MediaThis = Service<ApiServiceSettings> & MediaVars;
type Ctx<P> = Context<P, AuthMeta & { $location?: string; $responseType?: string }>;

/** A file younger than this may belong to an upload whose row is being written: the sweep leaves it. */
export const ORPHAN_GRACE_MS = 3600_000;
/** How often the sweep runs (besides at start). */
const SWEEP_EVERY_MS = 3600_000;
const notFound = (id: string) => new ApiError("MEDIA_NOT_FOUND", `No media ${id} in this account.`);
const fileGone = () => new ApiError("MEDIA_FILE_GONE", "The media file is missing on the node that stored it.");
/** Seconds a client waits before asking again for a file whose node is away (a pod restart takes about this long). */
export const NODE_AWAY_RETRY_AFTER_S = 30;
const nodeAway = () =>
  new ApiError("SERVICE_UNAVAILABLE", "The node holding the media file is away (restarting, say); retry shortly.", { retryAfter: NODE_AWAY_RETRY_AFTER_S });
/** A call to the file's node failed because the node is not there (rather than answering that the file is missing). */
const isNodeAway = (err: unknown) =>
  ["SERVICE_NOT_AVAILABLE", "SERVICE_NOT_FOUND", "REQUEST_TIMEOUT", "REQUEST_REJECTED"].includes((err as { type?: string }).type ?? "");

export function createMediaService(deps: Deps): ServiceSchema<ApiServiceSettings, Record<string, never>, MediaVars> {
  const { config, db } = deps;

  return {
    name: "media",
    settings: { rest: "/" },

    actions: {
      /** Stores an uploaded image or video (kind judged by content): 201 with the media. */
      upload: uploadAction(config),

      /** The account's media, newest first. */
      list: apiAction({
        rest: "GET /media",
        operation: "MEDIA",
        summary: "List media",
        description: "The account's media, newest first (page envelope).",
        params: listMediaIn,
        responses: { 200: mediaPageOut },
        errors: [400],
        handler(this: MediaThis, ctx: Ctx<{ page: number; limit: number }>): Promise<Page<MediaOut>> {
          return mediaPage(this.sequelize, ctx.meta.companyId, ctx.params.page, ctx.params.limit);
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
          await this.removeMedia(ctx, ctx.params.id);
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
        errors: [404, 416, 503],
        handler(this: MediaThis, ctx: Ctx<{ id: string }>): Promise<RemoteFile | null> {
          return this.answerContent(ctx);
        },
      }),

      /** The file's headers without its bytes (HEAD): what GET /media/{id}/content would answer, Range ignored. */
      contentHead: apiAction({
        rest: "HEAD /media/:id/content",
        operation: "MEDIA",
        summary: "Check a media's file (headers only)",
        description:
          "The headers `GET /media/{id}/content` answers (Content-Type, Content-Length, `ETag`, `Accept-Ranges`, `Cache-Control`, `X-Content-Type-Options`, `Content-Disposition`), without the body; " +
          "`If-None-Match` with the ETag answers 304. A `Range` is ignored (RFC 9110: ranges are for GET).",
        params: mediaIdIn,
        requestHeaders: { "if-none-match": "The ETag of a copy the client holds: 304 when it is current." },
        responses: { 200: contentOut, 304: null },
        errors: [404, 503],
        handler(this: MediaThis, ctx: Ctx<{ id: string }>): Promise<RemoteFile | null> {
          // The file answered by reference: moleculer-web sends a HEAD's headers and never reads its bytes.
          return this.answerContent(ctx);
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

      /**
       * A range of a media file this node holds, raw bytes (Moleculer's CBOR serializer carries a
       * Buffer as it is, no base64): what a gateway pulls as its client reads (lib/http/remote-file.ts).
       * A range is at most RANGE_BYTES (512 KiB), one message well under the bus's payload limit.
       */
      range: {
        visibility: "public",
        params: fileRangeIn,
        async handler(this: MediaThis, ctx: Context<FileRangeIn>): Promise<Buffer> {
          return this.files.read(ctx.params.id, ctx.params.offset, ctx.params.length);
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
      async rowOf(this: MediaThis, companyId: string, id: string): Promise<MediaRow> {
        const row = await mediaRow(this.sequelize, companyId, id);
        if (!row) throw notFound(id);
        return row;
      },

      /** Deletes the media (409 while anything refers to it), then its file, here or on its node. */
      async removeMedia(this: MediaThis, ctx: Context, rawId: string): Promise<void> {
        const companyId = (ctx.meta as AuthMeta).companyId;
        const id = rawId.toLowerCase();
        const row = await this.sequelize.transaction(async (transaction) => {
          const found = await mediaRow(this.sequelize, companyId, id, { transaction, lock: true });
          if (!found) throw notFound(rawId);
          const referencedBy = await ownersOf(this.sequelize, companyId, id, transaction);
          if (referencedBy.length) {
            throw new ApiError("MEDIA_IN_USE", `The media is in use by ${referencedBy.join(", ")}; it can be deleted once they no longer refer to it.`, {
              referencedBy,
            });
          }
          await deleteMedia(this.sequelize, companyId, id, transaction);
          return found;
        });
        // The row is gone: the file goes too, here or on its node (a node away keeps an orphan its sweep removes).
        if (row.node_id === this.broker.nodeID) await this.files.remove(row.id);
        else
          await ctx
            .call("media.removeFile", { id: row.id }, { nodeID: row.node_id })
            .catch((err: Error) => this.logger.warn({ err, id: row.id }, "media file not removed"));
      },

      /** Files no row names, older than ORPHAN_GRACE_MS by their mtime (deleted while this node was away, or uploads cut short): removed. */
      async sweepOrphans(this: MediaThis): Promise<number> {
        const removed = await this.files.sweep((ids) => idsWithRows(this.sequelize, ids), ORPHAN_GRACE_MS);
        if (removed) this.logger.info({ removed }, "media files without a row removed");
        return removed;
      },

      /**
       * A media's content (GET and HEAD /media/{id}/content): headers, 304 for a current If-None-Match,
       * one byte range (206, 416) when the request's headers carry one, the file by reference.
       */
      async answerContent(this: MediaThis, ctx: Ctx<{ id: string }>): Promise<RemoteFile | null> {
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

      /** Where the file is: here (this node stored it), else on the node that stored it. */
      async locate(this: MediaThis, ctx: Context, row: MediaRow): Promise<RemoteFile> {
        const here = await stat(this.files.fileOf(row.id)).catch(() => null);
        if (here) return { $remoteFile: { action: "media.range", nodeID: this.broker.nodeID, params: { id: row.id }, size: here.size } };
        // Missing here although this node stored it: gone for good (404). Its node away: it may come back (503 with Retry-After).
        if (row.node_id === this.broker.nodeID) throw fileGone();
        if (!this.broker.registry.nodes.get(row.node_id)?.available) throw nodeAway();
        const size = (await ctx.call("media.fileSize", { id: row.id }, { nodeID: row.node_id }).catch((err: unknown) => {
          throw isNodeAway(err) ? nodeAway() : err;
        })) as number;
        return { $remoteFile: { action: "media.range", nodeID: row.node_id, params: { id: row.id }, size } };
      },
    },

    created(this: MediaThis) {
      this.sequelize = db.sequelize;
      this.files = new MediaFiles(config.mediaDir);
      this.metrics = new MediaMetrics(db.sequelize);
      this.loops = new Loops(this.logger);
      addNodeRegistry(this.broker, this.metrics.registry);
    },

    /**
     * Files left behind while this node was away (their media deleted) or by uploads cut short are
     * removed at start and then every hour: a file is judged by its age on disk, so one whose media
     * was deleted while this node was away goes at its return, and one younger then within the hour.
     */
    started(this: MediaThis) {
      this.loops.every(SWEEP_EVERY_MS, "media sweep", () => this.sweepOrphans(), { runNow: true });
    },

    stopped(this: MediaThis) {
      this.loops.stop();
    },
  };
}
