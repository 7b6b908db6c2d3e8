/** Media rows as SQL returns them, the columns to select and the one mapper to MediaOut. */
import { iso } from "../../lib/messaging/time";
import { mediaKeyOf, type MediaKind } from "./media.contract";
import type { MediaOut } from "./media.schemas";

export interface MediaRow {
  id: string;
  company_id: string;
  file_name: string;
  content_type: string;
  size: string | number;
  sha256: string;
  width: number | null;
  height: number | null;
  duration_ms: string | number | null;
  node_id: string;
  created_at: Date | string;
}

export const MEDIA_COLUMNS = "id, company_id, file_name, content_type, size, sha256, width, height, duration_ms, node_id, created_at";

/** A media's kind follows from its content type (video/mp4 is the one video type): stored once, as the type. */
export const mediaKindOf = (contentType: string): MediaKind => (contentType.startsWith("video/") ? "video" : "image");

export const toMediaOut = (r: MediaRow): MediaOut => ({
  id: r.id,
  mediaKey: mediaKeyOf(r.id),
  fileName: r.file_name,
  contentType: r.content_type,
  kind: mediaKindOf(r.content_type),
  size: Number(r.size),
  sha256: r.sha256,
  width: r.width,
  height: r.height,
  durationMs: r.duration_ms === null ? null : Number(r.duration_ms),
  createdAt: iso(r.created_at as Date)!,
});
