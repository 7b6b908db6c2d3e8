/**
 * The HTTP side of a media's content, as pure functions: the ETag and If-None-Match (RFC 9110
 * 13.1.2, weak comparison), one byte range of a Range header (RFC 9110 14.1.2) and a
 * Content-Disposition whose file name cannot break the header or name a path.
 */

export const etagOf = (sha256: string) => `"${sha256}"`;

/** If-None-Match names this ETag (or `*`): the client's copy is current (304). */
export function notModified(ifNoneMatch: string | undefined, etag: string): boolean {
  if (!ifNoneMatch) return false;
  if (ifNoneMatch.trim() === "*") return true;
  return ifNoneMatch.split(",").some((tag) => tag.trim().replace(/^W\//, "") === etag);
}

export type RangeAnswer =
  /** No Range, one that is not a byte range, or several ranges: the whole file (200). */
  | { kind: "whole" }
  /** One satisfiable range: 206 with bytes [start, start + length). */
  | { kind: "part"; start: number; length: number }
  /** A byte range wholly past the end (or `bytes=-0`): 416. */
  | { kind: "unsatisfiable" };

/**
 * One range of `bytes=a-b`, `bytes=a-` or `bytes=-n` against a file of `size` bytes. Several
 * ranges are answered with the whole file (allowed by RFC 9110), a syntactically invalid header is
 * ignored (also as the RFC says).
 */
export function parseRange(header: string | undefined, size: number): RangeAnswer {
  if (!header) return { kind: "whole" };
  const m = /^\s*bytes\s*=\s*(.+)$/i.exec(header);
  if (!m) return { kind: "whole" };
  const specs = m[1]!.split(",").map((s) => s.trim());
  if (specs.length !== 1) return { kind: "whole" };
  const one = /^(\d*)\s*-\s*(\d*)$/.exec(specs[0]!);
  if (!one || (one[1] === "" && one[2] === "")) return { kind: "whole" };
  // Digits only from here: a number past 2^53 is past the end of any file we keep.
  if (one[1] === "") {
    const suffix = Number(one[2]);
    if (suffix === 0 || size === 0) return { kind: "unsatisfiable" };
    const length = Number.isSafeInteger(suffix) ? Math.min(suffix, size) : size;
    return { kind: "part", start: size - length, length };
  }
  const start = Number(one[1]);
  const lastGiven = one[2] === "" ? null : Number(one[2]);
  if (!Number.isSafeInteger(start)) return lastGiven !== null && Number.isSafeInteger(lastGiven) ? { kind: "whole" } : { kind: "unsatisfiable" };
  if (start >= size) return { kind: "unsatisfiable" };
  // A last byte past the end is the end (RFC 9110 14.1.2), however many digits it has.
  const last = lastGiven === null || !Number.isSafeInteger(lastGiven) ? size - 1 : lastGiven;
  if (last < start) return { kind: "whole" };
  return { kind: "part", start, length: Math.min(last, size - 1) - start + 1 };
}

/** `inline` with an ASCII file name (anything else becomes `_`) and the exact name in RFC 8187 `filename*`. */
export function contentDisposition(fileName: string): string {
  const base = fileName.split(/[/\\]/).pop() || "media";
  const ascii =
    base
      .replace(/[^A-Za-z0-9._ -]/g, "_")
      .replace(/^\.+/, "_")
      .slice(0, 150) || "media";
  const exact = encodeURIComponent(base).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return `inline; filename="${ascii}"; filename*=UTF-8''${exact}`;
}
