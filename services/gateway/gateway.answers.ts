/**
 * What the gateway answers besides an action's own result: problems for every error (with the
 * request id, RateLimit-* on partner paths and the log line), 404/405/OPTIONS from the routing
 * table (gateway.routes.ts), the ops route (/healthz, /metrics, /docs), the action's answer on its way out, and, with
 * VALIDATE_RESPONSES, the check of answers against their declared schemas.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { Readable } from "node:stream";
import type { Context, Service, ServiceBroker } from "moleculer";
import { API_PREFIX, type AuthMeta } from "../../lib/http/api";
import type { Database } from "../../lib/db/db";
import { transporterUp } from "../../lib/bus/nats-transporter";
import { ApiError, UNAVAILABLE_RETRY_AFTER_S } from "../../lib/errors";
import { requestIdOf, writeProblem } from "../../lib/http/http";
import type { HttpMetrics } from "../../lib/observability/http-metrics";
import { withRequestId } from "../../lib/observability/logger";
import type { ExposedAction } from "../../lib/http/openapi";
import { toProblem } from "../../lib/http/problem";
import { isRemoteFile, remoteFileStream } from "../../lib/http/remote-file";
import { compileSchema, toFieldErrors } from "../../lib/http/validator";
import { answerDocsPage, answerDocsScript, answerScalarBundle } from "./gateway.docs";
import { decodeForClient } from "./gateway.encoding";
import { pathMethods, type OwnedAlias } from "./gateway.methods";
import type { GwRequest } from "./gateway.request";

/** The signed download path's last segment: the signature, a bearer credential for the file. */
const DOWNLOAD_SIGNATURE = /(\/exports\/[^/?#]*\/download\/[^/?#]*\/)[^/?#]+/g;

/** A request path as the logs name it: without its query, and a download's signature redacted. */
export function loggedPath(url: string | undefined): string {
  if (!url) return "";
  const q = url.indexOf("?");
  const path = q < 0 ? url : url.slice(0, q);
  return path.includes("/download/") ? path.replace(DOWNLOAD_SIGNATURE, "$1[redacted]") : path;
}

/** What writing a problem needs of the gateway service. */
export interface ProblemHost {
  logger: Pick<Service["logger"], "error" | "warn">;
  rateLimit(res: ServerResponse, id: string, enforce: boolean): void;
  /** The rate-limit bucket of the request's client address. */
  clientBucket(req: IncomingMessage): string;
}

/** Any error as an application/problem+json answer; a 500 is logged with its stack, other 5xx as a warning. */
export function sendProblem(host: ProblemHost, req: GwRequest, res: ServerResponse, err: unknown): void {
  const requestId = req.$requestId ?? requestIdOf(undefined);
  const problem = toProblem(err, requestId);
  if (problem.status === 500) {
    withRequestId(requestId, () => host.logger.error({ err, method: req.method, path: loggedPath(req.url) }, "request failed"));
  } else if (problem.status > 500) {
    withRequestId(requestId, () =>
      host.logger.warn({ method: req.method, path: loggedPath(req.url), status: problem.status, detail: problem.detail }, "request not served"),
    );
  }
  // Every partner answer carries RateLimit-*: those refused before authentication count per address.
  const url = (req as { originalUrl?: string }).originalUrl ?? req.url ?? "";
  if (url.startsWith(API_PREFIX) && !res.headersSent && !res.hasHeader("RateLimit-Limit")) {
    host.rateLimit(res, host.clientBucket(req), false);
  }
  // A 503 or 429 that knows when to come back (a full upload budget, an account's heavy operations) says so.
  if ((problem.status === 503 || problem.status === 429) && typeof problem.retryAfter === "number" && !res.headersSent && !res.hasHeader("Retry-After")) {
    res.setHeader("Retry-After", problem.retryAfter);
  }
  // A 416 says the size of what the range missed (RFC 9110: Content-Range: bytes */size).
  if (problem.status === 416 && typeof problem.size === "number" && !res.headersSent) res.setHeader("Content-Range", `bytes */${problem.size}`);
  writeProblem(res, problem, { "X-Request-Id": requestId });
}

/** OPTIONS: 204 with Allow on a known path, 404 otherwise (no CORS: this API is server to server). */
export function answerOptions(host: ProblemHost, aliases: readonly OwnedAlias[], req: GwRequest, res: ServerResponse): void {
  const url = req.url?.split("?")[0] ?? "";
  const allowed = pathMethods(aliases, url);
  if (allowed.length === 0) return sendProblem(host, req, res, new ApiError("ROUTE_NOT_FOUND", `No route ${req.url?.split("?")[0]}.`));
  res.setHeader("Allow", [...allowed, "OPTIONS"].join(", "));
  res.statusCode = 204;
  res.end();
}

/**
 * Unknown path: 404; known path with another method: 405 with Allow. A route of the API that no node
 * serves right now (its service's nodes all gone, or not yet known to this gateway) is a 503 with
 * Retry-After: the API's routes are fixed, whatever node serves them, and a partner must read
 * "down, try again", not "gone".
 */
export function answerNoRoute(host: ProblemHost, aliases: readonly OwnedAlias[], req: GwRequest, res: ServerResponse): void {
  const url = req.parsedUrl ?? req.url?.split("?")[0] ?? "";
  const allowed = pathMethods(aliases, url);
  if (req.method && allowed.includes(req.method)) {
    return sendProblem(
      host,
      req,
      res,
      new ApiError("SERVICE_UNAVAILABLE", `No node serves ${req.method} ${url} right now; try again shortly.`, { retryAfter: UNAVAILABLE_RETRY_AFTER_S }),
    );
  }
  if (allowed.length > 0) {
    res.setHeader("Allow", allowed.join(", "));
    return sendProblem(host, req, res, new ApiError("METHOD_NOT_ALLOWED", `${req.method} is not allowed on ${url}; allowed: ${allowed.join(", ")}.`));
  }
  sendProblem(host, req, res, new ApiError("ROUTE_NOT_FOUND", `No route ${req.method} ${url}.`));
}

/** An answer that does not match the schema its action declares for `status` throws (a 500). */
export function checkAnswer(action: NonNullable<GwRequest["$action"]>, status: number, data: unknown): void {
  const schema = action.responses?.[status];
  if (schema === undefined) throw new Error(`${action.name} answered ${status}, which it does not declare`);
  if (schema === null) {
    if (data != null) throw new Error(`${action.name} answered a body with ${status}, declared without one`);
    return;
  }
  if (data instanceof Readable) {
    if (schema.format !== "binary") throw new Error(`${action.name} answered a stream where its schema declares JSON`);
    return;
  }
  const validate = compileSchema(schema);
  if (!validate(data)) throw new Error(`${action.name} answer does not match its schema: ${JSON.stringify(toFieldErrors(validate.errors))}`);
}

/** What the partner route's answer needs of the gateway service. */
export interface AnswerHost {
  broker: ServiceBroker;
  checkResponse(req: GwRequest, status: number, data: unknown): void;
}

/**
 * A partner action's result on its way to the client: a file answered by reference is pulled from
 * its node as the client reads it, the answer is checked, a 202 names its job in Location, and a
 * stream is decoded when the client does not take its encoding.
 */
export function partnerAnswer(
  host: AnswerHost,
  ctx: Context<unknown, AuthMeta>,
  req: GwRequest,
  res: ServerResponse,
  data: unknown,
  timeoutMs: number,
): unknown {
  if (isRemoteFile(data)) {
    // Each range is a call of its own (not a child of this request's context, whose time-out would cut a long download).
    const ranges = {
      call: (action: string, params: unknown, opts: { nodeID: string }) =>
        host.broker.call(action, params, { ...opts, requestID: ctx.requestID ?? undefined, timeout: timeoutMs }),
    };
    data = remoteFileStream(ranges, data.$remoteFile);
  }
  host.checkResponse(req, ctx.meta.$statusCode ?? 200, data);
  // moleculer-web sends $location with 201 and redirects only; a 202 names its job too.
  const location = (ctx.meta as { $location?: string }).$location;
  if (location && ctx.meta.$statusCode === 202) res.setHeader("Location", location);
  return data instanceof Readable ? decodeForClient(req, ctx.meta, data) : data;
}

/** Every published action with a `rest` declaration in the cluster right now, once each. */
export function exposedActions(broker: ServiceBroker): ExposedAction[] {
  const seen = new Set<string>();
  const out: ExposedAction[] = [];
  for (const svc of broker.registry.getServiceList({ withActions: true }) as Array<{ actions?: Record<string, ExposedAction> }>) {
    for (const action of Object.values(svc.actions ?? {})) {
      const a = action as ExposedAction & { visibility?: string };
      if (!a.rest || seen.has(a.name) || (a.visibility && a.visibility !== "published")) continue;
      seen.add(a.name);
      out.push(a);
    }
  }
  return out;
}

/** Readiness: the database answers, the transporter (if any) is connected, the partner routes are built. */
export async function readinessChecks(
  db: Database,
  broker: ServiceBroker,
  withTransporter: boolean,
  routesReady: boolean,
  stopping = false,
): Promise<Record<string, string>> {
  const checks: Record<string, string> = {};
  // A node that began to stop takes no new traffic, whatever else holds.
  if (stopping) checks.node = "stopping";
  try {
    await db.ping(1000);
    checks.database = "ok";
  } catch {
    checks.database = "unreachable";
  }
  if (withTransporter) checks.transporter = transporterUp(broker) ? "ok" : "disconnected";
  checks.routes = routesReady ? "ok" : "loading";
  return checks;
}

/** What the ops route needs of the gateway service. */
export interface OpsHost {
  metrics: HttpMetrics;
  readiness(): Promise<Record<string, string>>;
  openApiDocument(): Record<string, unknown>;
}

/** Function aliases of the ops route answer directly; moleculer-web calls them with `this` = service. */
export const opsAliases = {
  "GET /healthz/live"(this: OpsHost, _req: GwRequest, res: ServerResponse) {
    res.setHeader("Content-Type", "application/json; charset=utf-8");
    res.end(JSON.stringify({ status: "live" }));
  },
  async "GET /healthz/ready"(this: OpsHost, req: GwRequest, res: ServerResponse) {
    const checks = await this.readiness();
    if (Object.values(checks).every((v) => v === "ok")) {
      res.setHeader("Content-Type", "application/json; charset=utf-8");
      res.end(JSON.stringify({ status: "ready", checks }));
    } else {
      const why = Object.entries(checks)
        .filter(([, v]) => v !== "ok")
        .map(([k, v]) => `${k} ${v}`)
        .join(", ");
      // Not ready is a normal state (starting, or a dependency down), not a failed request: no error log.
      writeProblem(res, toProblem(new ApiError("SERVICE_UNAVAILABLE", `Not ready: ${why}`, { checks }), req.$requestId));
    }
  },
  async "GET /metrics"(this: OpsHost, _req: GwRequest, res: ServerResponse) {
    const text = await this.metrics.render();
    res.setHeader("Content-Type", this.metrics.contentType);
    res.end(text);
  },
  "GET /docs"(this: OpsHost, _req: GwRequest, res: ServerResponse) {
    answerDocsPage(res, String((this.openApiDocument().info as { title?: unknown } | undefined)?.title ?? "API reference"));
  },
  "GET /docs/docs.js"(this: OpsHost, _req: GwRequest, res: ServerResponse) {
    answerDocsScript(res);
  },
  async "GET /docs/scalar.js"(this: OpsHost, req: GwRequest, res: ServerResponse) {
    await answerScalarBundle(req, res);
  },
};
