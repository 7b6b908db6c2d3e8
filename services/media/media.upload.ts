/**
 * POST /media: the gateway has received the upload (its kind judged from the first bytes, each kind
 * cut at its own limit) and keeps it in its spool; this node pulls the bytes range by range
 * (uploadedBytes of lib/http/remote-file.ts), keeps them under its MEDIA_DIR (temp name, fsync,
 * rename), reads the header for dimensions or duration, and writes the
 * row naming itself as the file's node, within the account's MEDIA_ACCOUNT_MAX_BYTES. No row
 * without a file, no file without a row.
 */
import { randomUUID } from "node:crypto";
import type { Context, ServiceBroker } from "moleculer";
import type { Readable } from "node:stream";
import type { Sequelize } from "sequelize";
import { API_PREFIX, apiAction, type ApiAction, type AuthMeta } from "../../lib/http/api";
import type { Config } from "../../lib/config";
import { diskFull } from "../../lib/jobs/disk-budget";
import { ApiError } from "../../lib/errors";
import { MAGIC_CONTENT_TYPES, type MagicKind } from "../../lib/messaging/magic";
import { uploadedBytes } from "../../lib/http/remote-file";
import { mib, type UploadedFile } from "../../lib/http/upload";
import { toMediaOut, type MediaRow } from "./media.models";
import { insertMedia, lockAccountUploads, usedBytes } from "./media.queries";
import type { MediaMetrics, UploadOutcome } from "./media.metrics";
import { probeFile } from "./media.probe";
import { MAX_IMAGE_BYTES, MAX_VIDEO_BYTES, MEDIA_KINDS, mediaOut, uploadMediaIn, type MediaOut, type UploadMediaIn } from "./media.schemas";
import type { MediaFiles } from "./media.storage";

export interface UploadThis {
  broker: ServiceBroker;
  sequelize: Sequelize;
  files: MediaFiles;
  metrics: MediaMetrics;
}
type Ctx<P> = Context<P, AuthMeta & { $location?: string }>;

const UPLOAD_TIMEOUT_MS = 120_000;

function outcomeOf(err: unknown): UploadOutcome {
  const code = (err as { code?: unknown }).code;
  return typeof code === "number" && code >= 400 && code < 500 ? "rejected" : "failed";
}

const quota = (config: Config, used: number) =>
  new ApiError(
    "PAYLOAD_TOO_LARGE",
    `This account's media take ${mib(used)} of the ${mib(config.mediaAccountMaxBytes)} it may keep; delete media it no longer needs first.`,
  );

/** Keeps the bytes as the file of a new id, probes it and writes its row within the account's room; no row without a file, no file without a row. */
async function storeUpload(this: UploadThis, config: Config, companyId: string, stream: Readable, file: UploadedFile): Promise<MediaRow> {
  const kind = file.kind as MagicKind;
  const { sequelize } = this;
  // A first look at the account's room (checked again, under a lock, with the row).
  const used = await usedBytes(sequelize, companyId);
  if (used + file.size > config.mediaAccountMaxBytes) throw quota(config, used);
  const id = randomUUID();
  try {
    await this.files.keep(id, stream, file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOSPC") throw diskFull("No room for the file on this media node now; retry in a few minutes.");
    throw err;
  }
  try {
    const probe = await probeFile(this.files.fileOf(id), kind, file.size);
    return await sequelize.transaction(async (transaction) => {
      await lockAccountUploads(sequelize, companyId, transaction); // the sum and the insert agree
      const now = await usedBytes(sequelize, companyId, transaction);
      if (now + file.size > config.mediaAccountMaxBytes) throw quota(config, now);
      const media = { id, companyId, fileName: file.name, contentType: MAGIC_CONTENT_TYPES[kind], size: file.size, sha256: file.sha256 };
      return insertMedia(sequelize, { ...media, ...probe, nodeId: this.broker.nodeID }, transaction);
    });
  } catch (err) {
    await this.files.remove(id); // no row, no file
    throw err;
  }
}

/** The upload action of a media service with `config`. */
export function uploadAction(config: Config): ApiAction {
  /** Stores an uploaded image or video (kind judged by content): 201 with the media. */
  return apiAction({
    rest: "POST /media",
    operation: "MEDIA",
    summary: "Upload an image or a video",
    description:
      "multipart/form-data with one file in `file` and no other field. JPEG, PNG, GIF and WEBP images up to 5 MiB, MP4 videos up to 16 MiB, judged by the file's " +
      "content (magic numbers), never by its name or declared type: anything else is a 415 naming what was found. An image is cut off with a 413 the moment it " +
      `passes 5 MiB. An account keeps at most MEDIA_ACCOUNT_MAX_BYTES (${mib(config.mediaAccountMaxBytes)}) of media; an upload past it is a 413. ` +
      "Answers 201 with the media: width and height for images, durationMs for MP4 where its `mvhd` box gives it.",
    timeout: UPLOAD_TIMEOUT_MS,
    upload: {
      field: "file",
      maxBytes: MAX_VIDEO_BYTES,
      accept: MEDIA_KINDS,
      kindMaxBytes: { jpeg: MAX_IMAGE_BYTES, png: MAX_IMAGE_BYTES, gif: MAX_IMAGE_BYTES, webp: MAX_IMAGE_BYTES, mp4: MAX_VIDEO_BYTES },
      description: "The image or video",
    },
    params: uploadMediaIn,
    responses: { 201: mediaOut },
    errors: [400, 413, 415],
    async handler(this: UploadThis, ctx: Ctx<UploadMediaIn>): Promise<MediaOut> {
      const { companyId } = ctx.meta;
      const { file } = ctx.params;
      const stream = uploadedBytes(ctx);
      try {
        if (!stream) throw new ApiError("VALIDATION_ERROR", "The upload carries no file.", { errors: [{ path: "file", message: "is required" }] });
        if (!(MEDIA_KINDS as readonly string[]).includes(file.kind))
          throw new ApiError("UNSUPPORTED_MEDIA_TYPE", "The file is not an image or a video this API keeps.");
        const stored = await storeUpload.call(this, config, companyId, stream, file);
        this.metrics.upload("stored");
        ctx.meta.$statusCode = 201;
        ctx.meta.$location = `${API_PREFIX}/media/${stored.id}`;
        return toMediaOut(stored);
      } catch (err) {
        this.metrics.upload((err as ApiError).type === "PAYLOAD_TOO_LARGE" ? "quota" : outcomeOf(err));
        throw err;
      } finally {
        // Nothing more is pulled from the gateway once the action has its answer.
        stream?.destroy();
      }
    },
  });
}
