/**
 * Media on the wire (spec part 1, contract section 4 "Media"): the upload, the media, its page and
 * its content, and the internal actions' file reads.
 */
import { pageSchema, pagingProperties, type Page } from "../../lib/http/paging";
import type { SchemaOf } from "../../lib/http/schema-type";
import { RANGE_BYTES } from "../../lib/http/remote-file";
import { uploadedFileSchema, type UploadedFile } from "../../lib/http/upload";
import { MAGIC_CONTENT_TYPES } from "../../lib/messaging/magic";
import type { MediaKind } from "./media.contract";
import { UUID_PATTERN } from "../../lib/http/validator";

export const MIB = 1024 * 1024;
/** Largest image (JPEG, PNG, GIF, WEBP) and video (MP4). */
export const MAX_IMAGE_BYTES = 5 * MIB;
export const MAX_VIDEO_BYTES = 16 * MIB;
export const MEDIA_KINDS = ["jpeg", "png", "gif", "webp", "mp4"] as const;
export const CONTENT_TYPES = MEDIA_KINDS.map((k) => MAGIC_CONTENT_TYPES[k]);

const UUID = UUID_PATTERN;
const mediaId = { type: "string", pattern: UUID, examples: ["3c9d8e7f-1a2b-4c5d-8e9f-0a1b2c3d4e5f"] } satisfies SchemaOf<string>;

export interface UploadMediaIn {
  file: UploadedFile;
}

export const uploadMediaIn = {
  $id: "MediaUploadIn",
  type: "object",
  additionalProperties: false,
  required: ["file"],
  properties: { file: uploadedFileSchema },
} satisfies SchemaOf<UploadMediaIn>;

export interface MediaOut {
  id: string;
  mediaKey: string;
  fileName: string;
  contentType: string;
  kind: MediaKind;
  size: number;
  sha256: string;
  width: number | null;
  height: number | null;
  durationMs: number | null;
  createdAt: string;
}

const nullableInt = { type: "integer", minimum: 0, nullable: true } satisfies SchemaOf<number | null>;

export const mediaOut = {
  $id: "Media",
  type: "object",
  additionalProperties: false,
  required: ["id", "mediaKey", "fileName", "contentType", "kind", "size", "sha256", "width", "height", "durationMs", "createdAt"],
  properties: {
    id: mediaId,
    mediaKey: {
      type: "string",
      description: "How upstreams and messages name the file: `media/<id>`, stable for the media's life.",
      examples: ["media/3c9d8e7f-1a2b-4c5d-8e9f-0a1b2c3d4e5f"],
    },
    fileName: { type: "string", maxLength: 255, description: "The name the file was uploaded with (control characters removed).", examples: ["banner.png"] },
    contentType: { type: "string", enum: CONTENT_TYPES, description: "Judged by the file's content, never by its name or declared type." },
    kind: { type: "string", enum: ["image", "video"] },
    size: { type: "integer", minimum: 1, description: "Bytes." },
    sha256: {
      type: "string",
      pattern: "^[0-9a-f]{64}$",
      description: "SHA-256 of the file, hex; the content's ETag.",
      examples: ["9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"],
    },
    width: { ...nullableInt, description: "Pixels, images only, from the file's header." },
    height: { ...nullableInt, description: "Pixels, images only, from the file's header." },
    durationMs: { ...nullableInt, description: "MP4 only, from its `mvhd` box (null when the file does not say)." },
    createdAt: { type: "string", format: "date-time" },
  },
} satisfies SchemaOf<MediaOut>;

export const mediaPage = pageSchema("MediaPage", mediaOut) satisfies SchemaOf<Page<MediaOut>>;

export type ListMediaIn = { page: number; limit: number };
/** One media by id (also `media.fileSize`, a media node's own file). */
export type MediaIdIn = { id: string };

export const listMediaIn = {
  $id: "MediaListIn",
  type: "object",
  additionalProperties: false,
  properties: { page: pagingProperties([], "").page, limit: pagingProperties([], "").limit },
} satisfies SchemaOf<ListMediaIn>;

export const mediaIdIn = {
  $id: "MediaIdIn",
  type: "object",
  additionalProperties: false,
  required: ["id"],
  properties: { id: mediaId },
} satisfies SchemaOf<MediaIdIn>;

export const contentOut = {
  type: "string",
  format: "binary",
  contentTypes: CONTENT_TYPES,
  description: "The file as stored, streamed, with its detected Content-Type, ETag (its quoted sha256), Accept-Ranges and Content-Disposition.",
  examples: ["(the file's bytes)"],
} satisfies SchemaOf<string>;

export const partialContentOut = {
  ...contentOut,
  description: "The bytes of the requested range (`Range: bytes=a-b`, `bytes=a-` or `bytes=-n`), with Content-Range.",
} satisfies SchemaOf<string>;

// Internal actions (a media node reading its own files for a gateway): one id, an offset, a length.

export interface FileRangeIn {
  id: string;
  offset: number;
  length: number;
}

export const fileSizeIn = {
  $id: "MediaFileSizeIn",
  type: "object",
  required: ["id"],
  properties: { id: { type: "string", pattern: UUID } },
} satisfies SchemaOf<MediaIdIn>;

export const fileRangeIn = {
  $id: "MediaFileRangeIn",
  type: "object",
  required: ["id", "offset", "length"],
  properties: { id: { type: "string", pattern: UUID }, offset: { type: "integer", minimum: 0 }, length: { type: "integer", minimum: 1, maximum: RANGE_BYTES } },
} satisfies SchemaOf<FileRangeIn>;
