/**
 * gateway: the partner HTTP API (moleculer-web) under /api/partner-gateway/v1, plus /healthz,
 * /metrics and /docs. Routes come from the `rest` declarations of every service in the cluster;
 * here live the mechanisms that exist once: request ids, problem bodies, API-key authentication
 * (cached, cleared by `auth.keyDeleted`: gateway.keys.ts), per-key rate limits, Idempotency-Key
 * (gateway.idempotency.ts), query coercion, metrics and the OpenAPI document. What the gateway
 * answers besides an action's result (problems, 404/405, the ops route) is in gateway.answers.ts.
 */
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import os from "node:os";
import path from "node:path";
import type { Context, Service, ServiceSchema } from "moleculer";
import ApiGateway from "moleculer-web";
import { API_PREFIX, apiAction, type ApiServiceSettings, type AuthMeta } from "../../lib/api";
import type { Deps } from "../../lib/deps";
import { ApiError } from "../../lib/errors";
import { answerClientError, parseJson, requireJson, tagRequest, type ClientErrorAnswer } from "../../lib/http";
import { addNodeRegistry, HttpMetrics } from "../../lib/http-metrics";
import { Loops } from "../../lib/jobs";
import { accessLogWriter, withRequestId, type AccessLog } from "../../lib/logger";
import { buildOpenApi } from "../../lib/openapi";
import type { UploadRef } from "../../lib/remote-file";
import type { KeyDeletedEvent, Principal } from "../auth/auth.contract";
import { INBOX_EVENTS_WRITTEN, type InboxEventsWritten } from "../inbox/inbox.contract";
import {
  answerNoRoute,
  answerOptions,
  checkAnswer,
  exposedActions,
  loggedPath,
  opsAliases,
  partnerAnswer,
  readinessChecks,
  sendProblem,
} from "./gateway.answers";
import { callIdempotent, checkIdempotencyKey, IdempotencyStore } from "./gateway.idempotency";
import { authMetaOf, keyHashOf, lookupInFlight, lookupPrincipal, PrincipalCache, requireOperation } from "./gateway.keys";
import { checkQueryNames, coerceStrings, mergeParams } from "./gateway.params";
import { clientBucket, TrustedProxies } from "./gateway.client";
import { TokenBuckets } from "./gateway.ratelimit";
import type { Alias, GwRequest, GwRoute } from "./gateway.request";
import { receiveUpload, SpoolTokens, uploadRangeIn, type ReceivedUpload, type UploadRangeIn } from "./gateway.upload";
import { DiskBudget } from "../../lib/disk-budget";
import { drainOf } from "../../lib/drain";
import { callOnRequestContext, resolveIndexed, routeDirect, serveWeb } from "../../lib/web-entry";
import { isEventStreamStart, LiveMetrics, LiveStreams } from "./gateway.live";
import { ownedAlias } from "./gateway.methods";

/** The request headers an action declares it reads (lower-case names; each value at most 1024 characters). */
function pickHeaders(req: IncomingMessage, names: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of names) {
    const value = req.headers[name.toLowerCase()];
    if (typeof value === "string") out[name.toLowerCase()] = value.slice(0, 1024);
  }
  return out;
}

const routesByTimeout = new WeakMap<GwRoute, Map<number, GwRoute & { callOptions: Record<string, unknown> }>>();

/** The route as an action's call sees it: its call options with the action's own timeout, if it declares one (made once per route and timeout). */
function routeWithTimeout(route: GwRoute, timeout: number | undefined): GwRoute & { callOptions: Record<string, unknown> } {
  let byTimeout = routesByTimeout.get(route);
  if (!byTimeout) routesByTimeout.set(route, (byTimeout = new Map()));
  const key = timeout ?? 0;
  let call = byTimeout.get(key);
  if (!call) {
    const callOptions: Record<string, unknown> = { ...route.callOptions };
    if (timeout) callOptions.timeout = timeout;
    byTimeout.set(key, (call = { ...route, callOptions }));
  }
  return call;
}

/** An answer's stream failed after it began (moleculer-web's routeHandler listened for this): the socket goes. */
function answerFailed(this: ServerResponse): void {
  this.destroy();
}

/** Methods a refused request's access line may name (anything else is "-": metrics labels stay few). */
const KNOWN_METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]);

/** Failed key lookups (a malformed, unknown or deleted key) a client address may make a second; twice as many at once. */
export const FAILED_KEY_RPS = 10;

/** Bytes of request line and headers the gateway accepts (1000 ids of 200 characters fit). */
export const MAX_REQUEST_HEAD = 256 * 1024;

type Middleware = (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;
const runMiddleware = (mw: Middleware, req: IncomingMessage, res: ServerResponse) =>
  new Promise<void>((resolve, reject) => mw(req, res, (err) => (err ? reject(err) : resolve())));
const mixin = ApiGateway as unknown as { methods: Record<string, (...args: unknown[]) => unknown> };

type GatewayThis = Service<ApiServiceSettings> & GatewayVars;
interface GatewayVars {
  keys: PrincipalCache;
  buckets: TokenBuckets;
  /** Per client address: failed key lookups, refused before they reach auth.verify. */
  failedKeys: TokenBuckets;
  trustedProxies: TrustedProxies;
  idempotency: IdempotencyStore;
  metrics: HttpMetrics;
  /** The access log line, written straight to the logger's destination (null: through the logger). */
  accessLog: AccessLog | null;
  openApiCache: Record<string, unknown> | null;
  aliases: Alias[];
  aliasesReady: boolean;
  /** Every service of this node has started (Moleculer's $broker.started): routes built before then may lack some. */
  localServicesStarted: boolean;
  loops: Loops;
  /** Where uploads are spooled until their action has answered. */
  spoolDir: string;
  /** The spool's room (SPOOL_MAX_BYTES, an account's share of it), reserved before an upload is written. */
  spoolBudget: DiskBudget;
  /** The spool files of uploads whose actions run now, under the tokens their actions pull them by. */
  spoolTokens: SpoolTokens;
  /** The inbox's live streams (Server-Sent Events) held open here. */
  live: LiveStreams;
  server: http.Server;
  httpHandler(req: IncomingMessage, res: ServerResponse): void;
  logRefused(answered: ClientErrorAnswer): void;
  rateLimit(res: ServerResponse, id: string, enforce: boolean): void;
  clientBucket(req: IncomingMessage): string;
  sendProblem(req: GwRequest, res: ServerResponse, err: unknown): void;
  sendResponse(req: GwRequest, res: ServerResponse, data: unknown, action: unknown): void;
  openApiDocument(): Record<string, unknown>;
  checkResponse(req: GwRequest, status: number, data: unknown): void;
  readiness(): Promise<Record<string, string>>;
  openEventStream(
    route: GwRoute & { callOptions: Record<string, unknown> },
    req: GwRequest,
    res: ServerResponse,
    params: Record<string, unknown>,
  ): Promise<boolean>;
}

export function createGatewayService(deps: Deps): ServiceSchema<ApiServiceSettings, Record<string, never>, GatewayVars> {
  const { config, db } = deps;

  return {
    name: "gateway",
    mixins: [ApiGateway as unknown as ServiceSchema],

    settings: {
      rest: "/",
      port: config.port,
      ip: config.host,
      logRequest: null,
      logResponse: null,
      logRequestParams: null,
      logRouteRegistration: "debug",
      debounceTime: 100,
      routes: [
        {
          name: "partner",
          logging: false, // the access log is ours (httpHandler); moleculer-web's would format a line per request even when not written
          path: API_PREFIX,
          autoAliases: true,
          mappingPolicy: "restrict",
          bodyParsers: false, // the body is read in callAction, once the key has been checked
          authentication: true,
          mergeParams: true,
          callOptions: { timeout: config.requestTimeoutMs },
          onAfterCall(this: GatewayThis, ctx: Context<unknown, AuthMeta>, _route: unknown, req: GwRequest, res: ServerResponse, data: unknown) {
            return partnerAnswer(this, ctx, req, res, data, config.requestTimeoutMs);
          },
        },
        { name: "ops", path: "/", logging: false, mappingPolicy: "restrict", bodyParsers: false, aliases: { ...opsAliases } },
      ],
      onError(this: GatewayThis, req: GwRequest, res: ServerResponse, err: unknown) {
        this.sendProblem(req, res, err);
      },
    },

    actions: {
      listAliases: false,
      addRoute: false,
      removeRoute: false,

      /** The OpenAPI 3.1 document of every operation the cluster exposes right now. */
      /** A range of an upload's spool file, raw bytes (lib/serializer.ts), while its action runs: what the action pulls (uploadedBytes of lib/remote-file.ts). */
      /** The REPL's `keys`: the keys this gateway holds in its cache. */
      opsKeyCache: {
        visibility: "public",
        handler(this: GatewayThis): { nodeID: string; size: number } {
          return { nodeID: this.broker.nodeID, size: this.keys.size };
        },
      },

      uploadRange: {
        visibility: "public",
        params: uploadRangeIn,
        async handler(this: GatewayThis, ctx: Context<UploadRangeIn>): Promise<Buffer> {
          return await this.spoolTokens.read(ctx.params);
        },
      },

      openapi: apiAction({
        rest: "GET /openapi.json",
        operation: null,
        summary: "The OpenAPI 3.1 document",
        tag: "meta",
        responses: { 200: { type: "object", description: "An OpenAPI 3.1 document", examples: [{ openapi: "3.1.0" }] } },
        handler(this: GatewayThis) {
          return this.openApiDocument();
        },
      }),
    },

    events: {
      /** A deleted key is forgotten at once, on every replica. */
      "auth.keyDeleted"(this: GatewayThis, ctx: Context<KeyDeletedEvent>) {
        this.keys.evict(ctx.params.keyId);
        this.live.endKey(ctx.params.keyId);
      },
      /** Inbox events were committed (any node): the live streams of those accounts read them. */
      [INBOX_EVENTS_WRITTEN](this: GatewayThis, ctx: Context<InboxEventsWritten>) {
        if (Array.isArray(ctx.params?.companyIds)) this.live.wake(ctx.params.companyIds);
      },
      "$services.changed"(this: GatewayThis) {
        this.openApiCache = null;
      },
      // Broadcast by every moleculer-web of the cluster (the other gateways, the tracking ingress):
      // not a sign that this gateway's routes are built (see regenerateAutoAliases).
      "$api.aliases.regenerated"(this: GatewayThis) {
        this.openApiCache = null;
      },
      // Services of one node start side by side, and one slow to start (a worker pool, a sweep) may join
      // the registry after the first (debounced) route build: the node is ready only once its routes are
      // built with every local service in them.
      "$broker.started"(this: GatewayThis) {
        this.localServicesStarted = true;
        type Route = { opts: { name?: string; autoAliases?: boolean } };
        const web = this as unknown as { routes: Route[]; regenerateAutoAliases(route: Route): void };
        for (const route of web.routes) if (route.opts.autoAliases) web.regenerateAutoAliases(route);
      },
    },

    methods: {
      /**
       * moleculer-web's server, with room for long query strings: a bulk status poll names up to
       * 1000 message ids in its URL, more than Node's default 16 KiB of request head.
       */
      createServer(this: GatewayThis) {
        if (this.server) return;
        this.server = http.createServer({ maxHeaderSize: MAX_REQUEST_HEAD }, this.httpHandler);
        this.server.requestTimeout = (this.settings as { requestTimeout?: number }).requestTimeout ?? 300_000;
      },

      /**
       * The matching alias, trying only those the URL's leading segments allow (lib/web-entry.ts), and
       * only when its path owns the URL: `/authentication/me` is not `/authentication/{id}` (gateway.methods.ts).
       */
      resolveAlias(this: GatewayThis, url: string, method = "GET") {
        const found = resolveIndexed(this.aliases as never, url, method) as { alias: Alias; params: Record<string, unknown> } | false;
        return ownedAlias(this.aliases, url, method, found);
      },

      /** Routes without middlewares go straight to the alias (lib/web-entry.ts routeDirect). */
      routeHandler(
        this: GatewayThis,
        ctx: Context,
        route: { middlewares: unknown[]; opts: { mergeParams?: boolean } },
        req: GwRequest,
        res: ServerResponse,
        found?: { alias: unknown; params: Record<string, unknown> },
      ) {
        if (!found || route.middlewares.length > 0) return mixin.methods.routeHandler!.call(this, ctx, route, req, res, found);
        return routeDirect(this as never, route, req as never, res as never, found);
      },

      /** This gateway's partner routes are built from the registry: from then on it is ready. */
      regenerateAutoAliases(this: GatewayThis, route: { opts: { name?: string } }) {
        const out = mixin.methods.regenerateAutoAliases!.call(this, route);
        if (route.opts.name === "partner" && this.localServicesStarted) {
          this.aliasesReady = true;
          this.openApiCache = null;
        }
        return out;
      },

      /** Every request: its id (kept or generated), the log scope, the access log (no query, no download signature) and metrics. */
      httpHandler(this: GatewayThis, req: GwRequest, res: ServerResponse) {
        const requestId = tagRequest(req, res);
        if (req.method === "OPTIONS") return withRequestId(requestId, () => answerOptions(this, this.aliases, req, res));
        const started = process.hrtime.bigint();
        // Once per request: when the answer is finished, or when an event stream starts (its status and
        // time to open; a stream's own end is logged by gateway.live.ts, never as a request hours long).
        let logged = false;
        req.$logAccess = () => {
          if (logged) return;
          logged = true;
          const seconds = Number(process.hrtime.bigint() - started) / 1e9;
          const route = req.$alias ? (req.$alias.fullPath ?? req.$alias.path) : "unmatched";
          this.metrics.observe(req.method ?? "GET", route, res.statusCode, seconds);
          // The access log line names its request id itself (no log scope needed after the answer).
          const url = (req as { originalUrl?: string }).originalUrl ?? req.url ?? "";
          const ms = Math.round(seconds * 1e6) / 1000;
          if (this.accessLog) this.accessLog(requestId, req.method ?? "GET", loggedPath(url), route, res.statusCode, ms);
          else this.logger.info({ requestId, method: req.method, path: loggedPath(url), route, status: res.statusCode, ms }, "request");
        };
        res.on("error", answerFailed); // a failed answer (a download's stream) ends this request, never the process
        res.on("finish", req.$logAccess); // once per answer; `on` spares the once-wrapper
        return withRequestId(requestId, () => serveWeb(this as never, req, res, requestId));
      },

      /** The access log line and metrics of a request Node's HTTP parser refused (lib/http.ts answerClientError). */
      logRefused(this: GatewayThis, a: ClientErrorAnswer) {
        const method = KNOWN_METHODS.has(a.method) ? a.method : "-";
        this.metrics.observe(method, "unmatched", a.status, 0);
        if (this.accessLog) this.accessLog(a.requestId, method, loggedPath(a.path), "unmatched", a.status, 0);
        else this.logger.info({ requestId: a.requestId, method, path: loggedPath(a.path), route: "unmatched", status: a.status, ms: 0 }, "request");
      },

      /** X-API-Key -> the key's account and operations; the per-key rate limit; the operation check. */
      async authenticate(this: GatewayThis, ctx: Context<unknown, AuthMeta>, _route: unknown, req: GwRequest, res: ServerResponse) {
        const action = req.$action;
        if (!action) return null;
        if (action.operation === null) {
          this.rateLimit(res, this.clientBucket(req), true); // public: limited per client address
          return null;
        }
        // Fail closed: an exposed action must say which operation it needs (null for public).
        if (action.operation === undefined) throw new Error(`${action.name} is exposed without declaring its operation`);
        const raw = req.headers["x-api-key"];
        const hash = keyHashOf(raw);
        let principal: Principal | null = hash ? this.keys.get(hash) : null;
        // The client address's bucket, only when the key is not a cached one (parsing the address costs).
        const ip = principal ? "" : this.clientBucket(req);
        // The same key's lookup already on its way (a partner's first requests at once): wait for it, uncharged.
        const pending = !principal && hash ? lookupInFlight(this.keys, hash) : undefined;
        if (pending) principal = await pending;
        else if (!principal && raw !== undefined) {
          // A client whose keys keep failing is refused before any lookup reaches the database. The
          // token is taken before the lookup (so concurrent guesses count too) and given back on success.
          if (hash) this.rateLimit(res, ip, true); // a key not in the cache costs a lookup: charge the client address first
          const failed = this.failedKeys.take(ip);
          if (!failed.allowed) {
            this.rateLimit(res, ip, false); // the RateLimit-* headers every answer carries
            res.setHeader("RateLimit-Remaining", 0);
            res.setHeader("Retry-After", failed.retryAfterS);
            throw new ApiError(
              "RATE_LIMITED",
              `Too many requests with a malformed, unknown or deleted API key from this address; retry after ${failed.retryAfterS} s.`,
            );
          }
          if (hash) principal = await lookupPrincipal(ctx, this.keys, hash);
          if (principal) this.failedKeys.giveBack(ip);
        }
        this.rateLimit(res, principal ? `key:${principal.keyId}` : ip, true);
        if (!principal) {
          throw new ApiError("UNAUTHORIZED", raw === undefined ? "The X-API-Key header is missing." : "The API key is unknown, malformed or deleted.");
        }
        requireOperation(action.operation, principal, req.query?.channel);
        Object.assign(ctx.meta, authMetaOf(principal));
        return principal;
      },

      /** The rate-limit bucket of the request's client address (TRUSTED_PROXIES, IPv6 /64: gateway.client.ts). */
      clientBucket(this: GatewayThis, req: IncomingMessage) {
        return clientBucket(req.socket.remoteAddress, req.headers["x-forwarded-for"], this.trustedProxies);
      },

      /** Takes a token from bucket `id` and announces the state in RateLimit-*; past it, 429 (when `enforce`). */
      rateLimit(this: GatewayThis, res: ServerResponse, id: string, enforce: boolean) {
        const decision = this.buckets.take(id);
        if (!res.headersSent) {
          res.setHeader("RateLimit-Limit", decision.limit);
          res.setHeader("RateLimit-Remaining", decision.remaining);
          res.setHeader("RateLimit-Reset", decision.resetS);
        }
        if (!decision.allowed && enforce) {
          res.setHeader("Retry-After", decision.retryAfterS);
          throw new ApiError("RATE_LIMITED", `Rate limit of ${config.rateLimitRps} requests per second exceeded; retry after ${decision.retryAfterS} s.`);
        }
      },

      /**
       * Partner calls, after authentication: the body (JSON only, 1 MiB), params from query, body and
       * path (coerced by the action's schema), then Idempotency-Key or the plain call.
       */
      async callAction(
        this: GatewayThis,
        route: GwRoute,
        actionName: string,
        req: GwRequest,
        res: ServerResponse,
        params: Record<string, unknown>,
        isStream: boolean,
      ) {
        if (route.opts.name !== "partner" || !req.$action) return mixin.methods.callAction!.call(this, route, actionName, req, res, params, isStream);
        const action = req.$action;
        const schema = action.params as Record<string, unknown> | undefined;
        checkQueryNames((req as { originalUrl?: string }).originalUrl ?? req.url, req.query ?? {}, schema);
        let upload: ReceivedUpload | null = null;
        let body: unknown = undefined;
        if (action.upload) {
          try {
            const spool = { ledger: this.spoolBudget, account: String(req.$ctx.meta.companyId) };
            upload = await receiveUpload(req, action.upload, this.spoolDir, spool, { minBytes: config.uploadMinBytes, windowMs: config.uploadMinWindowMs });
          } catch (err) {
            // The rest of the body is not read: the connection cannot carry another request.
            if (!req.complete) res.setHeader("Connection", "close");
            this.metrics.uploadRejected(action.name, typeof (err as { code?: unknown }).code === "number" ? (err as { code: number }).code : 500);
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
          const pathParams = (req.$alias?.match(req.parsedUrl ?? "") || {}) as Record<string, string>;
          const merged = mergeParams(req.query ?? {}, body, pathParams, schema);
          if (upload?.file) merged[action.upload!.field] = upload.file;
          req.$params = merged;
          if (action.requestHeaders) req.$ctx.meta.$requestHeaders = pickHeaders(req, Object.keys(action.requestHeaders));
          // An action may declare a longer (or shorter) timeout than the route's default.
          const call = routeWithTimeout(route, action.timeout);
          // An upload's bytes stay here: the action pulls them range by range (uploadedBytes of lib/remote-file.ts) while its token lives.
          if (upload?.path && upload.file) {
            token = this.spoolTokens.add(upload.path, upload.file.size);
            const ref: UploadRef = { action: "gateway.uploadRange", nodeID: this.broker.nodeID, params: { token }, size: upload.file.size };
            req.$ctx.meta.$upload = ref;
          }
          if (action.eventStream) return await this.openEventStream(call, req, res, merged);
          const key = req.headers["idempotency-key"];
          const idempotent = req.method === "POST" && action.idempotent !== false && req.$ctx.meta.companyId;
          if (idempotent && key !== undefined) {
            return await callIdempotent(this, call, req, res, merged, checkIdempotencyKey(key), config.requestTimeoutMs);
          }
          if (await callOnRequestContext(this as never, call as never, req, res, merged, isStream)) return true;
          return await mixin.methods.callAction!.call(this, call, actionName, req, res, merged, isStream);
        } finally {
          if (token) this.spoolTokens.drop(token);
          if (upload) await upload.discard();
        }
      },

      /**
       * A Server-Sent Events route: a place is reserved (503/429 past the limits), the action checks the
       * request and says where the stream starts (its errors are problems, as usual, before any byte of
       * the stream), then the stream is held here until the client leaves or the gateway stops.
       */
      async openEventStream(this: GatewayThis, route, req, res, params) {
        const release = this.live.reserve(String(req.$ctx.meta.companyId));
        let start: unknown;
        try {
          start = await req.$ctx.call(req.$endpoint as never, params, route.callOptions);
          if (!isEventStreamStart(start)) throw new Error(`${req.$action?.name} did not answer where its event stream starts`);
        } catch (err) {
          release();
          throw err;
        }
        if (req.socket.destroyed) {
          release(); // the client left while the stream was being opened
          return true;
        }
        this.live.open(req, res, start.$eventStream, String(req.$ctx.meta.keyId), release);
        req.$logAccess?.();
        return true;
      },

      /** Unknown path: 404; known path with another method: 405 with Allow. */
      send404(this: GatewayThis, req: GwRequest, res: ServerResponse) {
        answerNoRoute(this, this.aliases, req, res);
      },

      /**
       * An error out of a request's handling: sent as a problem, which logs it once by its status (a
       * 500 with its stack, a 503 of an outage as a warning). moleculer-web's own handler would log
       * every 5xx, an outage's 503 included, as an error with a stack first.
       */
      errorHandler(this: GatewayThis, req: GwRequest, res: ServerResponse, err: unknown) {
        mixin.methods.sendError!.call(this, req, res, err);
      },

      /** Every error, as application/problem+json (moleculer-web's onError and ours). */
      sendProblem(this: GatewayThis, req: GwRequest, res: ServerResponse, err: unknown) {
        sendProblem(this, req, res, err);
      },

      /** With VALIDATE_RESPONSES (tests): an answer that does not match its declared schema is a 500. */
      checkResponse(this: GatewayThis, req: GwRequest, status: number, data: unknown) {
        if (config.validateResponses && req.$action) checkAnswer(req.$action, status, data);
      },

      openApiDocument(this: GatewayThis) {
        this.openApiCache ??= buildOpenApi(exposedActions(this.broker), { serverUrl: config.publicBaseUrl });
        return this.openApiCache;
      },

      readiness(this: GatewayThis) {
        return readinessChecks(db, this.broker, !!config.transporter, this.aliasesReady, drainOf(this.broker).draining);
      },
    },

    created(this: GatewayThis) {
      this.keys = new PrincipalCache(config.authCacheTtlMs);
      this.buckets = new TokenBuckets(config.rateLimitRps, 2);
      this.failedKeys = new TokenBuckets(FAILED_KEY_RPS, 2);
      this.trustedProxies = new TrustedProxies(config.trustedProxies);
      this.idempotency = new IdempotencyStore(db.sequelize);
      this.loops = new Loops(this.logger);
      this.metrics = new HttpMetrics(this.broker);
      this.accessLog = accessLogWriter(this.broker, {
        nodeID: this.broker.nodeID,
        ns: this.broker.namespace,
        mod: this.fullName,
        svc: this.name,
        ver: this.version,
      });
      this.openApiCache = null;
      this.aliasesReady = false;
      this.localServicesStarted = false;
      // A request Node's parser refuses (a 431, say) is answered as a problem and logged like any other answer.
      this.server.on("clientError", (err: Error, socket: Socket) => {
        const answered = answerClientError(err, socket);
        if (answered) this.logRefused(answered);
      });
      drainOf(this.broker).track(this.server);
      this.spoolDir = mkdtempSync(path.join(os.tmpdir(), "pgw-spool-"));
      this.spoolBudget = DiskBudget.withShare(config.spoolMaxBytes, config.uploadAccountShare);
      this.spoolTokens = new SpoolTokens();
      const liveMetrics = new LiveMetrics();
      addNodeRegistry(this.broker, liveMetrics.registry);
      this.live = new LiveStreams(
        this.broker,
        this.logger,
        {
          heartbeatMs: config.sseHeartbeatMs,
          maxStreams: config.sseMaxStreams,
          maxStreamsPerAccount: config.sseMaxStreamsPerAccount,
          callTimeoutMs: config.requestTimeoutMs,
        },
        liveMetrics,
      );
      // A stopping gateway ends its event streams first: they would hold the drain to its limit.
      drainOf(this.broker).onDrain(() => this.live.closeAll());
    },

    started(this: GatewayThis) {
      this.loops.every(3600_000, "idempotency purge", () => this.idempotency.purgeExpired());
      this.live.start();
    },

    stopped(this: GatewayThis) {
      // Before moleculer-web closes the server (its stopped runs after this one): open streams would hold it.
      this.live.closeAll();
      this.loops.stop();
      rmSync(this.spoolDir, { recursive: true, force: true });
    },
  };
}
