/**
 * Stored-compressed answers: an action may answer a stream that is already gzip (an export file,
 * with `Content-Encoding: gzip` in $responseHeaders). It goes out as it is to clients that accept
 * gzip, and is decoded here, as it streams, for those that do not.
 */
import type { IncomingMessage } from "node:http";
import { pipeline, type Readable } from "node:stream";
import { createGunzip } from "node:zlib";
import Negotiator from "negotiator";

export function acceptsGzip(req: IncomingMessage): boolean {
  return new Negotiator(req).encodings(["gzip"]).includes("gzip");
}

export function decodeForClient(req: IncomingMessage, meta: { $responseHeaders?: Record<string, string> }, data: Readable): Readable {
  const headers = meta.$responseHeaders;
  if (!headers || headers["Content-Encoding"] !== "gzip") return data;
  headers.Vary = "Accept-Encoding";
  if (acceptsGzip(req)) return data;
  delete headers["Content-Encoding"];
  delete headers["Content-Length"];
  // pipeline: an error or an early close on either side ends both (moleculer-web logs what reaches it).
  return pipeline(data, createGunzip(), () => undefined);
}
