/**
 * /docs: the API reference, rendered in the browser by Scalar's standalone bundle, served from
 * vendor/scalar (the one file of `@scalar/api-reference` it needs, gzipped, with its version:
 * scripts/vendor-scalar.ts; no CDN, no request leaves this origin): operations
 * grouped by tag, examples, the problem types, and "Test Request" with the `X-API-Key` header.
 *
 * Three answers: the page (`GET /docs`), the bundle (`GET /docs/scalar.js`) and the page's own
 * start-up script (`GET /docs/docs.js`). Scripts load only from this origin, and requests go only
 * to it. Styles may be inline: the bundle's components (Vue, Tailwind, the code editor) write
 * `<style>` elements and style attributes of their own that no nonce reaches (measured with
 * Chromium: under a nonce-only style-src it logs refused inline styles), and styles cannot run code.
 */
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import path from "node:path";
import { promisify } from "node:util";
import zlib from "node:zlib";
import { API_PREFIX } from "../../lib/http/api";

const gunzip = promisify(zlib.gunzip);

/** vendor/scalar of the project, from this file's folder in the sources or in dist/ (the image copies it beside dist). */
function scalarDir(): string {
  for (let dir = __dirname, i = 0; i < 5; i++, dir = path.dirname(dir)) {
    const candidate = path.join(dir, "vendor", "scalar");
    if (existsSync(path.join(candidate, "version.json"))) return candidate;
  }
  throw new Error("vendor/scalar/version.json not found (npm run vendor:scalar -- <version>)");
}

interface Bundle {
  version: string;
  gzipped: Buffer;
  /** Uncompressed, made only for a client that does not take gzip. */
  raw(): Promise<Buffer>;
  etag: string;
}
let bundle: Promise<Bundle> | null = null;

/** The standalone bundle, read once per process, on first use (1.2 MB gzipped; 4.3 MB only if a client asks without gzip). */
export function scalarBundle(): Promise<Bundle> {
  bundle ??= (async () => {
    const dir = scalarDir();
    const { version } = JSON.parse(await readFile(path.join(dir, "version.json"), "utf8")) as { version: string };
    const gzipped = await readFile(path.join(dir, "standalone.js.gz"));
    let raw: Promise<Buffer> | null = null;
    return { version, gzipped, raw: () => (raw ??= gunzip(gzipped)), etag: `"scalar-${version}"` };
  })();
  bundle.catch(() => (bundle = null));
  return bundle;
}

/**
 * The page's Content-Security-Policy: scripts from this origin only (the bundle and docs.js, no inline
 * script, no eval), requests ("Test Request", the document) to this origin only, no frames, no
 * forms, no plugins; inline styles allowed (see above).
 */
export const DOCS_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data: blob:",
  "font-src 'self' data:",
  "connect-src 'self'",
  "worker-src 'self' blob:",
  "manifest-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

/** Headers every /docs answer carries. */
function securityHeaders(res: ServerResponse) {
  res.setHeader("X-Content-Type-Options", "nosniff");
  res.setHeader("Referrer-Policy", "no-referrer");
  res.setHeader("X-Frame-Options", "DENY");
  res.setHeader("Cross-Origin-Opener-Policy", "same-origin");
  res.setHeader("Cross-Origin-Resource-Policy", "same-origin");
}

const esc = (s: string) => s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);

/**
 * The page: an empty mount point, the bundle and docs.js. URLs are relative, so a path prefix added
 * by a proxy still works. The mount point's id is not `api-reference`: the bundle mounts a second,
 * unconfigured reference on an element of that id by itself.
 */
export function docsPage(title: string): string {
  const api = API_PREFIX.slice(1);
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(title)}</title>
</head>
<body>
<noscript>The API reference needs JavaScript. The OpenAPI document itself: <a href="${api}/openapi.json">${api}/openapi.json</a>.</noscript>
<div id="docs" data-openapi="${api}/openapi.json" data-api="${api}"></div>
<script src="docs/scalar.js"></script>
<script src="docs/docs.js"></script>
</body>
</html>
`;
}

/**
 * Starts Scalar on the mount point. "Test Request" goes straight to this gateway (the page's own
 * origin, whatever PUBLIC_BASE_URL says), never through Scalar's proxy; no fonts, telemetry or
 * assistant calls leave the page. A problem's `type` (`/docs#problem-...`) lands on the Problem
 * types section.
 */
export const DOCS_SCRIPT = `"use strict";
(function () {
  var el = document.getElementById("docs");
  var api = new URL(el.dataset.api, document.baseURI).href.replace(/\\/$/, "");
  Scalar.createApiReference(el, {
    url: new URL(el.dataset.openapi, document.baseURI).href,
    servers: [{ url: api, description: "This gateway" }],
    authentication: { preferredSecurityScheme: "ApiKey" },
    persistAuth: false,
    withDefaultFonts: false,
    telemetry: false,
    showDeveloperTools: "never",
    agent: { disabled: true },
    mcp: { disabled: true },
    documentDownloadType: "json",
    redirect: function (hash) {
      return /^#problem-/.test(hash) ? "#description/problem-types" : null;
    },
  });
})();
`;

/** GET /docs */
export function answerDocsPage(res: ServerResponse, title: string) {
  securityHeaders(res);
  res.setHeader("Content-Security-Policy", DOCS_CSP);
  res.setHeader("Cache-Control", "no-store");
  res.setHeader("Content-Type", "text/html; charset=utf-8");
  res.end(docsPage(title));
}

/** GET /docs/docs.js */
export function answerDocsScript(res: ServerResponse) {
  securityHeaders(res);
  res.setHeader("Cache-Control", "no-cache");
  res.setHeader("Content-Type", "text/javascript; charset=utf-8");
  res.end(DOCS_SCRIPT);
}

/** GET /docs/scalar.js: gzipped when the client takes it; revalidated by ETag (the vendored version). */
export async function answerScalarBundle(req: IncomingMessage, res: ServerResponse) {
  const b = await scalarBundle();
  securityHeaders(res);
  res.setHeader("Content-Type", "text/javascript; charset=utf-8");
  res.setHeader("Cache-Control", "public, max-age=3600");
  res.setHeader("ETag", b.etag);
  res.setHeader("Vary", "Accept-Encoding");
  if (req.headers["if-none-match"] === b.etag) {
    res.statusCode = 304;
    res.end();
    return;
  }
  const gz = /\bgzip\b/.test(String(req.headers["accept-encoding"] ?? ""));
  if (gz) res.setHeader("Content-Encoding", "gzip");
  const body = gz ? b.gzipped : await b.raw();
  res.setHeader("Content-Length", body.length);
  res.end(body);
}
