/**
 * moleculer-web as both listeners (the partner gateway and the internal ingress) use it: through its
 * documented API only. Each listener sets `server: false` (moleculer-web's middleware mode) and runs
 * its own node:http server, whose request handler gives the request its id, access log and metrics
 * and then hands it to the service's documented `express()` handler. moleculer-web calls `next()`
 * for a request it did not route, which is where each listener answers its own 404/405; the request
 * id reaches moleculer-web's Context through the documented `rootCallOptions` setting.
 *
 * Every route is made of documented custom-function aliases (`"GET /x"(req, res) {...}`): the
 * gateway builds its partner aliases itself from the actions' `rest` declarations and installs them
 * with the documented `addRoute` (services/gateway/gateway.routes.ts); each alias's handler calls its
 * action through `req.$ctx.call` and answers the request itself, success or problem. So no
 * moleculer-web method is overridden and none of its undocumented members is read: moleculer-web
 * matches the URL, makes the Context and parses the query; what it would do after that (endpoint,
 * authentication, call, answer, error log) is ours. `writeAnswer` below writes an action's result the
 * way moleculer-web documents it ("Response type & status code": `ctx.meta.$statusCode`,
 * `$statusMessage`, `$responseType`, `$responseHeaders`, `$location`), and
 * test/unit/moleculer-web-parity.spec.ts sends the same results through moleculer-web's own action
 * alias and through `writeAnswer` and fails if the answers differ (moleculer-web is pinned to 0.11.0).
 *
 * Nothing here reaches past moleculer-web's public API: no deep import of its `src/`, no prototype
 * patch, no override. (Up to issue 32 this file re-implemented moleculer-web's `httpHandler`,
 * `routeHandler` and `callAction` on its private `rest` action handler and memoised
 * `Alias.prototype.toString` through a deep require, and the gateway overrode its `resolveAlias`,
 * `callAction` and `errorHandler` and read its alias list; see the issue's closing note.)
 */
import http from "node:http";
import { pipeline, Readable } from "node:stream";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { ServiceBroker } from "moleculer";

export type Next = (err?: unknown) => void;
export type WebHandler = (req: IncomingMessage, res: ServerResponse, next: Next) => void;

/**
 * The documented methods of a service that mixes moleculer-web in (its typings declare the mixin as
 * a plain ServiceSchema): the middleware-mode handler and the dynamic route of "Middlewares" in its docs.
 */
export interface WebService {
  broker: ServiceBroker;
  express(): WebHandler;
  addRoute(opts: object, toBottom?: boolean): unknown;
}

/**
 * moleculer-web's `rootCallOptions` (a documented setting, called with the options of the Context
 * made for each request): the Context's requestID is the request's own id (lib/http/http.ts
 * tagRequest), not the raw X-Request-Id or X-Correlation-Id header moleculer-web would take.
 */
export function requestIdCallOptions(options: { requestID?: string }, req: IncomingMessage & { $requestId?: string }): void {
  if (req.$requestId) options.requestID = req.$requestId;
}

/**
 * How long an idle keep-alive connection stays open: longer than the idle time-outs of the load
 * balancers and proxies in front (60 s for most), so that one of them, or a client, is the side that
 * closes it. With Node's 5 s, a client that sends its next request just as the server closes the
 * connection gets a reset (a 502 behind a proxy; seen in the tests as ECONNRESET on a POST, which
 * clients do not retry). A stopping node still closes idle connections at once (lib/http/drain.ts).
 */
export const KEEP_ALIVE_TIMEOUT_MS = 65_000;

/** A listener of our own for a moleculer-web service in middleware mode (`server: false`). */
export function createListener(
  options: http.ServerOptions,
  requestTimeoutMs: number,
  onRequest: (req: IncomingMessage, res: ServerResponse) => void,
): http.Server {
  const server = http.createServer(options, onRequest);
  server.requestTimeout = requestTimeoutMs;
  server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;
  return server;
}

/** Listens on `port` and `host`; rejects (the service does not start) when the port is taken. */
export function listen(server: http.Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const failed = (err: Error) => reject(err);
    server.once("error", failed);
    server.listen(port, host, () => {
      server.off("error", failed);
      resolve();
    });
  });
}

/** Stops the listener (a no-op when the drain already closed it). */
export function closeListener(server: http.Server): Promise<void> {
  if (!server.listening) return Promise.resolve();
  return new Promise((resolve, reject) => server.close((err) => (err ? reject(err) : resolve())));
}

/** The documented `ctx.meta` fields by which an action shapes its HTTP answer. */
export interface AnswerMeta {
  $statusCode?: number;
  $statusMessage?: string;
  $responseType?: string;
  $responseHeaders?: Record<string, string>;
  $location?: string;
}

type Warn = { warn(...args: unknown[]): void };

/** RFC 9110 conditional GET, as moleculer-web (the `fresh` package) decides it: the client's copy is current. */
function isFresh(req: IncomingMessage, res: ServerResponse): boolean {
  const status = res.statusCode;
  if (!((status >= 200 && status < 300) || status === 304)) return false;
  const noneMatch = req.headers["if-none-match"];
  const modifiedSince = req.headers["if-modified-since"];
  if (!noneMatch && !modifiedSince) return false;
  const cacheControl = req.headers["cache-control"];
  if (cacheControl && /(?:^|,)\s*?no-cache\s*?(?:,|$)/.test(cacheControl)) return false;
  if (noneMatch && noneMatch !== "*") {
    const etag = res.getHeader("ETag");
    if (typeof etag !== "string") return false;
    const current = noneMatch.split(",").some((t) => {
      const tag = t.trim();
      return tag === etag || tag === `W/${etag}` || `W/${tag}` === etag;
    });
    if (!current) return false;
  }
  if (modifiedSince) {
    const lastModified = res.getHeader("Last-Modified");
    if (typeof lastModified !== "string" || !(Date.parse(lastModified) <= Date.parse(modifiedSince))) return false;
  }
  return true;
}

/**
 * An action's result as moleculer-web answers it (its "Response type & status code" section): the
 * status, message, Location (201 and redirects), Content-Type and headers from `meta`; a Buffer or a
 * stream as application/octet-stream, anything else as JSON unless `$responseType` says otherwise;
 * 304 for a client whose copy is current, no body for 204, 304 and HEAD. Our actions declare no
 * `responseType`/`responseHeaders` in their schemas and no route sets `etag`, so neither is read.
 */
export function writeAnswer(req: IncomingMessage, res: ServerResponse, meta: AnswerMeta, data: unknown, logger: Warn): void {
  if (res.headersSent) {
    logger.warn("Headers have already sent.", { url: req.url });
    return;
  }
  if (meta.$statusCode) res.statusCode = meta.$statusCode;
  if (meta.$statusMessage) res.statusMessage = meta.$statusMessage;
  const status = res.statusCode;
  if (status === 201 || (status >= 300 && status < 400 && status !== 304)) {
    if (meta.$location) res.setHeader("Location", meta.$location);
    else logger.warn(`The 'ctx.meta.$location' is missing for status code '${status}'!`);
  }
  let type = meta.$responseType;
  const headers = meta.$responseHeaders;
  if (headers) {
    for (const key of Object.keys(headers)) {
      if (key === "Content-Type" && !type) type = headers[key];
      else {
        try {
          res.setHeader(key, headers[key]!);
        } catch (error) {
          logger.warn("Invalid header value", req.url, error);
          res.setHeader(key, encodeURI(headers[key]!));
        }
      }
    }
  }
  if (data == null) {
    res.end();
    return;
  }
  let chunk: string | Buffer | Readable;
  if (Buffer.isBuffer(data)) {
    res.setHeader("Content-Type", type || "application/octet-stream");
    res.setHeader("Content-Length", data.length);
    chunk = data;
  } else if (typeof data === "object" && (data as { type?: unknown }).type === "Buffer") {
    // A Buffer that went through JSON on the bus.
    const buf = Buffer.from(data as never);
    res.setHeader("Content-Type", type || "application/octet-stream");
    res.setHeader("Content-Length", buf.length);
    chunk = buf;
  } else if (data instanceof Readable) {
    res.setHeader("Content-Type", type || "application/octet-stream");
    chunk = data;
  } else if (typeof data === "object" || !type) {
    res.setHeader("Content-Type", type || "application/json; charset=utf-8");
    chunk = JSON.stringify(data);
  } else {
    res.setHeader("Content-Type", type);
    chunk = typeof data === "string" ? data : String(data);
  }
  if (isFresh(req, res)) res.statusCode = 304;
  if (res.statusCode === 204 || res.statusCode === 304) {
    res.removeHeader("Content-Type");
    res.removeHeader("Content-Length");
    res.removeHeader("Transfer-Encoding");
    chunk = "";
  }
  if (req.method === "HEAD") res.end();
  else if (data instanceof Readable) {
    // Piped even for a 304 (Node drops the bytes of a bodiless answer), so that the stream is drained and ends.
    pipeline(data, res, (err) => {
      if (err) logger.warn("Stream got an error.", { err, url: req.url });
    });
  } else res.end(chunk);
}
