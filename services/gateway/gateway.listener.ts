/**
 * The gateway's own HTTP listener (moleculer-web runs in middleware mode, `server: false`): room for
 * long query strings, every request's id, log scope, access log line and metrics, OPTIONS from the
 * routing table, then moleculer-web's documented `express()` handler; what it does not route comes
 * back through `next()` and is answered here (404, 405 with Allow, or 503 for a route no node serves).
 */
import type http from "node:http";
import type { ServerResponse } from "node:http";
import { createListener, type WebHandler } from "../../lib/http/moleculer-web";
import { tagRequest, type ClientErrorAnswer } from "../../lib/http/http";
import type { HttpMetrics } from "../../lib/observability/http-metrics";
import { withRequestId, type AccessLog } from "../../lib/observability/logger";
import { answerNoRoute, answerOptions, loggedPath, type ProblemHost } from "./gateway.answers";
import type { GwRequest } from "./gateway.request";
import type { RouteEntry } from "./gateway.routes";

/** Bytes of request line and headers the gateway accepts (1000 ids of 200 characters fit). */
export const MAX_REQUEST_HEAD = 256 * 1024;

/** Methods a refused request's access line may name (anything else is "-": metrics labels stay few). */
const KNOWN_METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]);

/** What the listener needs of the gateway service. */
export interface ListenerHost extends ProblemHost {
  metrics: HttpMetrics;
  /** The access log line, written straight to the logger's destination (null: through the logger). */
  accessLog: AccessLog | null;
  logger: ProblemHost["logger"] & { info(obj: unknown, msg?: string): void };
  /** The gateway's routing table (gateway.routes.ts): 404/405/OPTIONS are answered from it. */
  routeTable: RouteEntry[];
  sendProblem(req: GwRequest, res: ServerResponse, err: unknown): void;
}

/** An answer's stream failed after it began: the socket goes (the request ends, never the process). */
function answerFailed(this: ServerResponse): void {
  this.destroy();
}

/** The gateway's server: every request goes through `serve` (below) to moleculer-web's handler `web`. */
export function gatewayListener(host: ListenerHost, web: WebHandler, requestTimeoutMs: number): http.Server {
  return createListener({ maxHeaderSize: MAX_REQUEST_HEAD }, requestTimeoutMs, (req, res) => serve(host, web, req as GwRequest, res));
}

function serve(host: ListenerHost, web: WebHandler, req: GwRequest, res: ServerResponse): void {
  const requestId = tagRequest(req, res);
  if (req.method === "OPTIONS") return withRequestId(requestId, () => answerOptions(host, host.routeTable, req, res));
  const started = process.hrtime.bigint();
  // Once per request: when the answer is finished, or when an event stream starts (its status and
  // time to open; a stream's own end is logged by gateway.live.ts, never as a request hours long).
  let logged = false;
  req.$logAccess = () => {
    if (logged) return;
    logged = true;
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    const route = req.$apiRoute ?? "unmatched";
    host.metrics.observe(req.method ?? "GET", route, res.statusCode, seconds);
    // The access log line names its request id itself (no log scope needed after the answer).
    const url = (req as { originalUrl?: string }).originalUrl ?? req.url ?? "";
    const ms = Math.round(seconds * 1e6) / 1000;
    if (host.accessLog) host.accessLog(requestId, req.method ?? "GET", loggedPath(url), route, res.statusCode, ms);
    else host.logger.info({ requestId, method: req.method, path: loggedPath(url), route, status: res.statusCode, ms }, "request");
  };
  res.on("error", answerFailed);
  res.on("finish", req.$logAccess); // once per answer; `on` spares the once-wrapper
  // moleculer-web calls next() for what it does not route (and next(err) only without an onError, which it has);
  // what it routes is answered by the route's own function alias (gateway.routes.ts).
  const next = (err?: unknown) => (err ? host.sendProblem(req, res, err) : answerNoRoute(host, host.routeTable, req, res));
  withRequestId(requestId, () => web(req, res, next));
}

/** The access log line and metrics of a request Node's HTTP parser refused (lib/http/http.ts answerClientError). */
export function logRefused(host: ListenerHost, a: ClientErrorAnswer): void {
  const method = KNOWN_METHODS.has(a.method) ? a.method : "-";
  host.metrics.observe(method, "unmatched", a.status, 0);
  if (host.accessLog) host.accessLog(a.requestId, method, loggedPath(a.path), "unmatched", a.status, 0);
  else host.logger.info({ requestId: a.requestId, method, path: loggedPath(a.path), route: "unmatched", status: a.status, ms: 0 }, "request");
}
