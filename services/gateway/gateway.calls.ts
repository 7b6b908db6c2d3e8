/**
 * A partner request, as its route's function alias runs it (gateway.routes.ts): the URL's owner
 * (gateway.methods.ts), the API key (the gateway's checkKey), then the body (JSON only, 1 MiB, read
 * only once the key has been checked) or an upload, params from query, body and path (coerced by the
 * action's schema), the call with the action's own timeout, and the answer: an event stream, an
 * Idempotency-Key call or the action's result (lib/http/moleculer-web.ts writeAnswer). Every error
 * is answered here as a problem, so nothing goes back to moleculer-web.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Context } from "moleculer";
import type { AuthMeta } from "../../lib/http/api";
import { parseJson, requireJson } from "../../lib/http/http";
import { writeAnswer, type AnswerMeta } from "../../lib/http/moleculer-web";
import type { UploadRef } from "../../lib/http/remote-file";
import type { HttpMetrics } from "../../lib/observability/http-metrics";
import type { DiskBudget } from "../../lib/jobs/disk-budget";
import { answerNoRoute, partnerAnswer, type AnswerHost, type ProblemHost } from "./gateway.answers";
import { callIdempotent, checkIdempotencyKey, type IdempotentHost } from "./gateway.idempotency";
import { isEventStreamStart, type LiveStreams } from "./gateway.live";
import { checkQueryNames, coerceStrings, mergeParams } from "./gateway.params";
import { ownedAlias } from "./gateway.methods";
import type { GwRequest } from "./gateway.request";
import type { RouteEntry } from "./gateway.routes";
import { receiveUpload, type ReceivedUpload, type SpoolTokens } from "./gateway.upload";

type Middleware = (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;
const runMiddleware = (mw: Middleware, req: IncomingMessage, res: ServerResponse) =>
  new Promise<void>((resolve, reject) => mw(req, res, (err) => (err ? reject(err) : resolve())));

/** The request headers an action declares it reads (lower-case names; each value at most 1024 characters). */
function pickHeaders(req: IncomingMessage, names: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of names) {
    const value = req.headers[name.toLowerCase()];
    if (typeof value === "string") out[name.toLowerCase()] = value.slice(0, 1024);
  }
  return out;
}

/** What a partner call needs of the gateway service. */
export interface CallHost extends IdempotentHost, AnswerHost, ProblemHost {
  logger: IdempotentHost["logger"] & ProblemHost["logger"];
  /** The routing table (gateway.routes.ts). */
  routeTable: RouteEntry[];
  metrics: HttpMetrics;
  spoolDir: string;
  spoolBudget: DiskBudget;
  spoolTokens: SpoolTokens;
  live: LiveStreams;
  /** The API key's check (authentication, rate limits, the operation); sets the key's account in `ctx.meta`. */
  checkKey(ctx: Context<unknown, AuthMeta>, req: GwRequest, res: ServerResponse): Promise<unknown>;
  sendProblem(req: GwRequest, res: ServerResponse, err: unknown): void;
}

export interface CallLimits {
  requestTimeoutMs: number;
  uploadMinBytes: number;
  uploadMinWindowMs: number;
}

/**
 * A partner route's request (its function alias's handler; see the head comment). The alias
 * moleculer-web matched stands unless a path that outranks it owns the URL: then the owner's route
 * of this method, or, when it has none, the answer of an unrouted request (405 with the owner's methods).
 */
export async function servePartner(host: CallHost, limits: CallLimits, entry: RouteEntry, req: GwRequest, res: ServerResponse): Promise<void> {
  try {
    const matched = { alias: entry, params: req.$params?.params ?? {} };
    const owned = ownedAlias(host.routeTable, req.parsedUrl ?? "", req.method ?? "GET", matched);
    if (!owned || !owned.alias.action) return answerNoRoute(host, host.routeTable, req, res);
    req.$action = owned.alias.action;
    req.$apiRoute = owned.alias.fullPath;
    await host.checkKey(req.$ctx, req, res);
    await partnerCall(host, limits, owned.alias, owned.params as Record<string, string>, req, res);
  } catch (err) {
    host.sendProblem(req, res, err);
  }
}

/** The call of `entry`'s action, once the key has been checked, and its answer. */
async function partnerCall(
  host: CallHost,
  limits: CallLimits,
  entry: RouteEntry,
  pathParams: Record<string, string>,
  req: GwRequest,
  res: ServerResponse,
): Promise<void> {
  const action = entry.action!;
  const schema = action.params as Record<string, unknown> | undefined;
  checkQueryNames((req as { originalUrl?: string }).originalUrl ?? req.url, req.query ?? {}, schema);
  let upload: ReceivedUpload | null = null;
  let body: unknown = undefined;
  if (action.upload) {
    try {
      const spool = { ledger: host.spoolBudget, account: String(req.$ctx.meta.companyId) };
      upload = await receiveUpload(req, action.upload, host.spoolDir, spool, { minBytes: limits.uploadMinBytes, windowMs: limits.uploadMinWindowMs });
    } catch (err) {
      // The rest of the body is not read: the connection cannot carry another request.
      if (!req.complete) res.setHeader("Connection", "close");
      host.metrics.uploadRejected(action.name, typeof (err as { code?: unknown }).code === "number" ? (err as { code: number }).code : 500);
      throw err;
    }
    body = coerceStrings(upload.fields, schema);
  } else if (req.method !== "GET" && req.method !== "HEAD") {
    await runMiddleware(requireJson, req, res);
    await runMiddleware(parseJson, req, res);
    body = req.body;
  }
  let token: string | null = null;
  try {
    const merged = mergeParams(req.query ?? {}, body, pathParams, schema);
    if (upload?.file) merged[action.upload!.field] = upload.file;
    req.$params = merged;
    if (action.requestHeaders) req.$ctx.meta.$requestHeaders = pickHeaders(req, Object.keys(action.requestHeaders));
    // An upload's bytes stay here: the action pulls them range by range (uploadedBytes of lib/http/remote-file.ts) while its token lives.
    if (upload?.path && upload.file) {
      token = host.spoolTokens.add(upload.path, upload.file.size);
      const ref: UploadRef = { action: "gateway.uploadRange", nodeID: host.broker.nodeID, params: { token }, size: upload.file.size };
      req.$ctx.meta.$upload = ref;
    }
    if (action.eventStream) return await openEventStream(host, entry, req, res, merged);
    const key = req.headers["idempotency-key"];
    const idempotent = req.method === "POST" && action.idempotent !== false && req.$ctx.meta.companyId;
    if (idempotent && key !== undefined) {
      await callIdempotent(host, entry.callOptions, action.name, req, res, merged, checkIdempotencyKey(key), limits.requestTimeoutMs);
      return;
    }
    const ctx = req.$ctx;
    // The action's own timeout, else the gateway's (RouteEntry.callOptions).
    const data = partnerAnswer(host, ctx, req, res, await ctx.call(action.name, merged, entry.callOptions), limits.requestTimeoutMs);
    writeAnswer(req, res, ctx.meta as AnswerMeta, data, host.logger);
  } finally {
    if (token) host.spoolTokens.drop(token);
    if (upload) await upload.discard();
  }
}

/**
 * A Server-Sent Events route: a place is reserved (503/429 past the limits), the action checks the
 * request and says where the stream starts (its errors are problems, as usual, before any byte of
 * the stream), then the stream is held here until the client leaves or the gateway stops.
 */
async function openEventStream(host: CallHost, entry: RouteEntry, req: GwRequest, res: ServerResponse, params: Record<string, unknown>): Promise<void> {
  const release = host.live.reserve(String(req.$ctx.meta.companyId));
  let start: unknown;
  try {
    start = await (req.$ctx as Context).call(entry.action!.name, params, entry.callOptions);
    if (!isEventStreamStart(start)) throw new Error(`${entry.action!.name} did not answer where its event stream starts`);
  } catch (err) {
    release();
    throw err;
  }
  if (req.socket.destroyed) {
    release(); // the client left while the stream was being opened
    return;
  }
  host.live.open(req, res, start.$eventStream, String(req.$ctx.meta.keyId), release);
  req.$logAccess?.();
}
