/**
 * Images and videos told by their first bytes (magic numbers), never by name or declared type, and
 * what anything else is, in words a partner reads in a 415.
 *
 * Hand-written rather than `file-type`: file-type v21 is ESM-only and cannot be loaded under jest's
 * CommonJS runtime (the tests), and the gateway must judge the head synchronously while the upload
 * streams (to cut an image at its own limit). Five formats have fixed signatures; these are they.
 */

export const MAGIC_KINDS = ["jpeg", "png", "gif", "webp", "mp4"] as const;
export type MagicKind = (typeof MAGIC_KINDS)[number];

export const MAGIC_CONTENT_TYPES: Record<MagicKind, string> = {
  jpeg: "image/jpeg",
  png: "image/png",
  gif: "image/gif",
  webp: "image/webp",
  mp4: "video/mp4",
};

/** Bytes that decide a magic kind (the longest signature: RIFF....WEBP, ....ftypBRND). */
export const MAGIC_DECIDING_BYTES = 12;
/** Bytes looked at to name what a refused file is (text, SVG, HTML...). */
export const DESCRIBE_BYTES = 1024;

/** MP4 major brands (ISO base media with MP4 video); QuickTime, 3GPP, audio-only and HEIF/AVIF images are other formats. */
const MP4_BRANDS = /^(isom|iso[2-9a-z]|mp4[12v]|mp71|avc1|avc[2-4]|M4V |M4VH|M4VP|mmp4|dash|MSNV|NDAS|NDSC|NDSH|NDSM|NDSP|NDSS|NDXC|NDXH|NDXM|NDXP|NDXS|f4v )$/;

const startsWith = (b: Buffer, bytes: number[], at = 0) => b.length >= at + bytes.length && bytes.every((x, i) => b[at + i] === x);
const ascii = (b: Buffer, from: number, to: number) => (b.length >= to ? b.toString("latin1", from, to) : "");

/** The magic kind of a file from its head (at least MAGIC_DECIDING_BYTES bytes, or the whole file), or null. */
export function sniffMagic(head: Buffer): MagicKind | null {
  if (startsWith(head, [0xff, 0xd8, 0xff])) return "jpeg";
  if (startsWith(head, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) return "png";
  if (ascii(head, 0, 6) === "GIF87a" || ascii(head, 0, 6) === "GIF89a") return "gif";
  if (ascii(head, 0, 4) === "RIFF" && ascii(head, 8, 12) === "WEBP") return "webp";
  if (ascii(head, 4, 8) === "ftyp" && MP4_BRANDS.test(ascii(head, 8, 12))) return "mp4";
  return null;
}

/** Text a person could have written: no NUL and no control characters other than tab, line breaks and form feed. */
const BINARY_BYTE = /[\x00-\x08\x0e-\x1a\x1c-\x1f]/;

/** What a file that is none of the magic kinds is, from its head: "a PDF document (application/pdf)", "SVG/HTML text (text/html)", "text"... */
export function describeContent(head: Buffer): string {
  const magic = sniffMagic(head);
  if (magic) return `a ${magic.toUpperCase()} file (${MAGIC_CONTENT_TYPES[magic]})`;
  if (ascii(head, 0, 5) === "%PDF-") return "a PDF document (application/pdf)";
  if (startsWith(head, [0x50, 0x4b, 0x03, 0x04])) return "a ZIP archive (application/zip)";
  if (ascii(head, 0, 2) === "BM") return "a BMP image (image/bmp)";
  if (startsWith(head, [0x49, 0x49, 0x2a, 0x00]) || startsWith(head, [0x4d, 0x4d, 0x00, 0x2a])) return "a TIFF image (image/tiff)";
  if (startsWith(head, [0x1a, 0x45, 0xdf, 0xa3])) return "a WebM/Matroska video (video/webm)";
  if (ascii(head, 0, 4) === "RIFF" && ascii(head, 8, 11) === "AVI") return "an AVI video (video/x-msvideo)";
  if (ascii(head, 0, 4) === "RIFF" && ascii(head, 8, 12) === "WAVE") return "a WAV sound (audio/wav)";
  if (ascii(head, 0, 3) === "ID3" || startsWith(head, [0xff, 0xfb])) return "an MP3 sound (audio/mpeg)";
  if (ascii(head, 4, 8) === "ftyp") {
    const brand = ascii(head, 8, 12);
    if (brand === "qt  ") return "a QuickTime movie (video/quicktime)";
    if (/^(heic|heix|mif1|msf1|hevc)$/.test(brand)) return "a HEIF image (image/heif)";
    if (/^avi[fs]$/.test(brand)) return "an AVIF image (image/avif)";
    if (/^3g/.test(brand)) return "a 3GPP video (video/3gpp)";
    if (/^M4[AB] $/.test(brand)) return "an MPEG-4 sound (audio/mp4)";
    return `an ISO media file of brand "${brand.replace(/[^\x20-\x7e]/g, "?")}" that is not MP4`;
  }
  const text = head.toString("latin1");
  if (BINARY_BYTE.test(text)) return "binary data of an unknown kind";
  if (/<svg[\s>]/i.test(text)) return "SVG/HTML text (image/svg+xml)";
  if (/<!doctype\s+html|<html[\s>]|<head[\s>]|<body[\s>]|<script[\s>]/i.test(text)) return "SVG/HTML text (text/html)";
  if (/^(\xef\xbb\xbf)?\s*<\?xml/.test(text)) return "XML text (application/xml)";
  return "text";
}
