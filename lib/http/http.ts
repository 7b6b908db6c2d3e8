/**
 * HTTP plumbing shared by both listeners (the partner gateway and the internal ingress) that is not routing: request ids, the body guard and parser, the
 * problem writer, and the answer for requests Node's HTTP parser itself refuses.
 */
import bodyParser from "body-parser";
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { ApiError } from "../errors";
import { toProblem, type Problem } from "./problem";

export const REQUEST_ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;
export const MAX_JSON_BODY = 1024 * 1024;

/** A caller's well-formed X-Request-Id is kept; anything else is replaced by a fresh UUID. */
export function requestIdOf(header: string | string[] | undefined): string {
  return typeof header === "string" && REQUEST_ID_RE.test(header) ? header : randomUUID();
}

/** Gives a request its id (the caller's, when well-formed) as `req.$requestId` and the X-Request-Id header. */
export function tagRequest(req: IncomingMessage & { $requestId?: string }, res: ServerResponse): string {
  const requestId = requestIdOf(req.headers["x-request-id"]);
  req.$requestId = requestId;
  res.setHeader("X-Request-Id", requestId);
  return requestId;
}

type Next = (err?: unknown) => void;

function hasBody(req: IncomingMessage): boolean {
  const len = req.headers["content-length"];
  return req.headers["transfer-encoding"] !== undefined || (len !== undefined && len !== "0");
}

const JSON_TYPE_RE = /^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i;

/** A body must be JSON (UTF-8) unless the route takes something else; otherwise 415. */
export function requireJson(req: IncomingMessage, _res: ServerResponse, next: Next): void {
  if (!hasBody(req)) return next();
  const type = req.headers["content-type"] ?? "";
  if (!JSON_TYPE_RE.test(type)) {
    return next(
      new ApiError("UNSUPPORTED_MEDIA_TYPE", `Content-Type ${type ? `"${type.slice(0, 100)}"` : "(none)"} is not supported here; send application/json.`),
    );
  }
  const charset = /charset\s*=\s*"?([\w-]+)"?/i.exec(type)?.[1];
  if (charset && !/^utf-?8$/i.test(charset)) {
    return next(new ApiError("UNSUPPORTED_MEDIA_TYPE", `charset ${charset} is not supported; send UTF-8.`));
  }
  next();
}

/** JSON bodies up to `limit` bytes; objects and arrays only (anything else is malformed here). */
export const jsonParser = (limit: number) => bodyParser.json({ limit, strict: true, type: () => true });

/** The partner API's JSON bodies: up to 1 MiB. */
export const parseJson = jsonParser(MAX_JSON_BODY);

/** Writes a problem answer; `headers` adds to what the response already carries. */
export function writeProblem(res: ServerResponse, problem: Problem, headers: Record<string, string> = {}): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = JSON.stringify(problem);
  for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
  res.removeHeader("ETag");
  res.setHeader("Content-Type", "application/problem+json");
  res.setHeader("Content-Length", Buffer.byteLength(body));
  res.statusCode = problem.status;
  res.end(body);
}

/** What answerClientError answered: for the listener's access log and metrics. */
export interface ClientErrorAnswer {
  status: number;
  requestId: string;
  /** From the start of the refused request, when the parser's last chunk holds it ("-" otherwise). */
  method: string;
  /** The path, without its query (empty when unknown). */
  path: string;
}

/**
 * Node refuses some requests before any handler runs (bad header bytes, oversized headers: 431): answer them
 * as problems too, with an X-Request-Id. Returns what was answered (null when the socket was gone).
 */
export function answerClientError(err: NodeJS.ErrnoException & { code?: string; rawPacket?: Buffer }, socket: Socket): ClientErrorAnswer | null {
  if (!socket.writable) {
    socket.destroy();
    return null;
  }
  const status = err.code === "HPE_HEADER_OVERFLOW" ? 431 : err.code === "HPE_REQUEST_TIMEOUT" || err.code === "ERR_HTTP_REQUEST_TIMEOUT" ? 408 : 400;
  const requestId = randomUUID();
  const problem = toProblem(
    {
      code: status,
      type: status === 400 ? "BAD_REQUEST" : undefined,
      message: status === 431 ? "The request line or headers are too large." : "The HTTP request is malformed.",
    },
    requestId,
  );
  const body = JSON.stringify(problem);
  socket.end(
    `HTTP/1.1 ${status} ${problem.title}\r\nContent-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nX-Request-Id: ${requestId}\r\nConnection: close\r\n\r\n${body}`,
  );
  const start = err.rawPacket ? /^([A-Z]{3,7}) (\/[^ ?#\r\n]{0,2048})/.exec(err.rawPacket.toString("latin1", 0, 2100)) : null;
  return { status, requestId, method: start?.[1] ?? "-", path: start?.[2] ?? "" };
}
