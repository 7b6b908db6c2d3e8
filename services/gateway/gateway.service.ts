/**
 * gateway: the partner HTTP API (moleculer-web) under /api/partner-gateway/v1, plus /healthz,
 * /metrics and /docs. Routes come from the `rest` declarations of every service in the cluster;
 * here live the mechanisms that exist once: request ids, problem bodies, API-key authentication
 * (cached, cleared by `auth.keyDeleted`: gateway.keys.ts), per-key rate limits, Idempotency-Key
 * (gateway.idempotency.ts), query coercion, metrics and the OpenAPI document. What the gateway
 * answers besides an action's result (problems, 404/405, the ops route) is in gateway.answers.ts.
 * moleculer-web is used through its documented API only (lib/http/moleculer-web.ts): the partner
 * route is made of function aliases built here from the actions' `rest` (gateway.routes.ts), each of
 * which runs its request to the answer itself (gateway.calls.ts).
 */
import { mkdtempSync, rmSync } from "node:fs";
import type http from "node:http";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import os from "node:os";
import path from "node:path";
import type { Context, Service, ServiceSchema } from "moleculer";
import ApiGateway from "moleculer-web";
import { API_PREFIX, apiAction, type ApiServiceSettings, type AuthMeta } from "../../lib/http/api";
import type { Deps } from "../../lib/deps";
import { ApiError } from "../../lib/errors";
import { answerClientError } from "../../lib/http/http";
import { addNodeRegistry, HttpMetrics } from "../../lib/observability/http-metrics";
import { Loops } from "../../lib/jobs/jobs";
import { accessLogWriter, type AccessLog } from "../../lib/observability/logger";
import { buildOpenApi } from "../../lib/http/openapi";
import type { KeyDeletedEvent, Principal } from "../auth/auth.contract";
import { INBOX_EVENTS_WRITTEN, type InboxEventsWritten } from "../inbox/inbox.contract";
import { checkAnswer, exposedActions, opsAliases, readinessChecks, sendProblem } from "./gateway.answers";
import { IdempotencyStore } from "./gateway.idempotency";
import { authMetaOf, keyHashOf, lookupInFlight, lookupPrincipal, PrincipalCache, requireOperation } from "./gateway.keys";
import { clientBucket, TrustedProxies } from "./gateway.client";
import { TokenBuckets } from "./gateway.ratelimit";
import type { GwRequest } from "./gateway.request";
import { SpoolTokens, uploadRangeIn, type UploadRangeIn } from "./gateway.upload";
import { DiskBudget } from "../../lib/jobs/disk-budget";
import { drainOf } from "../../lib/http/drain";
import { closeListener, listen, requestIdCallOptions, type WebHandler, type WebService } from "../../lib/http/moleculer-web";
import { servePartner } from "./gateway.calls";
import { gatewayListener, logRefused } from "./gateway.listener";
export { MAX_REQUEST_HEAD } from "./gateway.listener";
import { LiveMetrics, LiveStreams } from "./gateway.live";
import { labelledOps, opsEntries, partnerRoutes, type AliasHandler, type RouteEntry } from "./gateway.routes";

/** Failed key lookups (a malformed, unknown or deleted key) a client address may make a second; twice as many at once. */
export const FAILED_KEY_RPS = 10;

/** moleculer-web's debounce of route builds, which ours keeps: a burst of registry changes is one rebuild. */
const ROUTES_DEBOUNCE_MS = 100;

/** The partner route's settings (moleculer-web's documented route options); its aliases come from routeTable. */
const PARTNER_ROUTE = {
  name: "partner",
  logging: false, // the access log is ours (gateway.listener.ts); moleculer-web's would format a line per request even when not written
  path: API_PREFIX,
  mappingPolicy: "restrict",
  bodyParsers: false, // the body is read by the alias (gateway.calls.ts), once the key has been checked
  mergeParams: false, // the path's params apart (req.$params.params): the action's schema merges them (gateway.params.ts)
};

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
  /** Every route this gateway serves (partner and ops), built from the actions' `rest` (gateway.routes.ts). */
  routeTable: RouteEntry[];
  /** The ops route's entries (fixed). */
  opsTable: RouteEntry[];
  /** A pending rebuild of the partner route (debounced registry changes). */
  routesTimer: NodeJS.Timeout | null;
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
  /** moleculer-web's documented middleware-mode handler (`express()`), which the listener calls. */
  web: WebHandler;
  rateLimit(res: ServerResponse, id: string, enforce: boolean): void;
  clientBucket(req: IncomingMessage): string;
  checkKey(ctx: Context<unknown, AuthMeta>, req: GwRequest, res: ServerResponse): Promise<Principal | null>;
  sendProblem(req: GwRequest, res: ServerResponse, err: unknown): void;
  openApiDocument(): Record<string, unknown>;
  checkResponse(req: GwRequest, status: number, data: unknown): void;
  readiness(): Promise<Record<string, string>>;
  rebuildRoutes(): void;
}

export function createGatewayService(deps: Deps): ServiceSchema<ApiServiceSettings, Record<string, never>, GatewayVars> {
  const { config, db } = deps;
  const callLimits = { requestTimeoutMs: config.requestTimeoutMs, uploadMinBytes: config.uploadMinBytes, uploadMinWindowMs: config.uploadMinWindowMs };

  return {
    name: "gateway",
    mixins: [ApiGateway as unknown as ServiceSchema],

    settings: {
      rest: "/",
      // Middleware mode: the listener is the gateway's own (gateway.listener.ts), calling moleculer-web's express() handler.
      server: false,
      rootCallOptions: requestIdCallOptions,
      port: config.port,
      ip: config.host,
      logRequest: null,
      logResponse: null,
      logRequestParams: null,
      logRouteRegistration: "debug",
      debounceTime: 100,
      routes: [
        // Its aliases are built from the registry (rebuildRoutes), through the documented addRoute.
        { ...PARTNER_ROUTE, aliases: {} },
        {
          name: "ops",
          path: "/",
          logging: false,
          mappingPolicy: "restrict",
          bodyParsers: false,
          aliases: labelledOps(opsAliases as Record<string, AliasHandler>, (self, req, res, err) => (self as GatewayThis).sendProblem(req, res, err)),
        },
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
      /** A range of an upload's spool file, raw bytes (lib/bus/serializer.ts), while its action runs: what the action pulls (uploadedBytes of lib/http/remote-file.ts). */
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
        // unref: a rebuild pending when the broker stops must not hold the process.
        this.routesTimer ??= setTimeout(() => this.rebuildRoutes(), ROUTES_DEBOUNCE_MS).unref();
      },
      // Broadcast by every moleculer-web of the cluster (the other gateways, the tracking ingress):
      // not a sign that this gateway's routes are built (see $broker.started).
      "$api.aliases.regenerated"(this: GatewayThis) {
        this.openApiCache = null;
      },
      // Services of one node start side by side, and one slow to start (a worker pool, a sweep) may join
      // the registry after the first (debounced) route build: the node is ready only once its routes are
      // built with every local service in them.
      "$broker.started"(this: GatewayThis) {
        this.localServicesStarted = true;
        this.rebuildRoutes(); // with every service of this node now started
        this.aliasesReady = true;
        this.openApiCache = null;
      },
    },

    methods: {
      /**
       * The partner route from the actions the cluster publishes now: the routing table (with the ops
       * route's entries) and one function alias per route, installed by moleculer-web's documented
       * `addRoute`, which replaces the route of the same name.
       */
      rebuildRoutes(this: GatewayThis) {
        if (this.routesTimer) clearTimeout(this.routesTimer);
        this.routesTimer = null;
        const { entries, aliases } = partnerRoutes(exposedActions(this.broker), config.requestTimeoutMs, (entry, req, res) => {
          void servePartner(this, callLimits, entry, req, res);
        });
        this.routeTable = [...entries, ...this.opsTable];
        (this as unknown as WebService).addRoute({ ...PARTNER_ROUTE, aliases });
      },

      /** X-API-Key -> the key's account and operations; the per-key rate limit; the operation check (gateway.calls.ts). */
      async checkKey(this: GatewayThis, ctx: Context<unknown, AuthMeta>, req: GwRequest, res: ServerResponse) {
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
          // A lookup that could not be answered (auth or its database out: 503) says nothing against the
          // key: its token is given back, so an outage never turns a partner's calls into 429s after it.
          if (hash) {
            try {
              principal = await lookupPrincipal(ctx, this.keys, hash);
            } catch (err) {
              this.failedKeys.giveBack(ip);
              throw err;
            }
          }
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

      /** Every error, as application/problem+json (moleculer-web's documented onError, the aliases' own, the listener's). */
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
      this.opsTable = opsEntries(opsAliases);
      this.routeTable = [...this.opsTable];
      this.routesTimer = null;
      this.aliasesReady = false;
      this.localServicesStarted = false;
      this.web = (this as unknown as WebService).express();
      this.server = gatewayListener(this, this.web, (this.settings as { requestTimeout?: number }).requestTimeout ?? 300_000);
      // A request Node's parser refuses (a 431, say) is answered as a problem and logged like any other answer.
      this.server.on("clientError", (err: Error, socket: Socket) => {
        const answered = answerClientError(err, socket);
        if (answered) logRefused(this, answered);
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

    async started(this: GatewayThis) {
      await listen(this.server, config.port, config.host);
      this.loops.every(3600_000, "idempotency purge", () => this.idempotency.purgeExpired());
      this.live.start();
    },

    stopped(this: GatewayThis) {
      if (this.routesTimer) clearTimeout(this.routesTimer);
      // Before the listener closes: open streams would hold it.
      this.live.closeAll();
      this.loops.stop();
      rmSync(this.spoolDir, { recursive: true, force: true });
      return closeListener(this.server);
    },
  };
}
