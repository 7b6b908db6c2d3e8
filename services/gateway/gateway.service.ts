/**
 * gateway: the partner HTTP API (moleculer-web) under /api/partner-gateway/v1, plus /healthz,
 * /metrics and /docs. Routes come from the `rest` declarations of every service in the cluster;
 * here live the mechanisms that exist once: request ids, problem bodies, API-key authentication
 * (cached, cleared by `auth.keyDeleted`), per-key rate limits, Idempotency-Key, query coercion,
 * metrics and the OpenAPI document.
 */
import { createReadStream, mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import type { IncomingMessage, ServerResponse } from "node:http";
import os from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import type { Context, Service, ServiceSchema } from "moleculer";
import ApiGateway from "moleculer-web";
import { API_KEY_RE, hashApiKey } from "../../lib/api-key";
import { API_PREFIX, apiAction, type ApiAction, type ApiServiceSettings, type AuthMeta, type Operation } from "../../lib/api";
import { CHANNELS } from "../../lib/channels";
import type { Deps } from "../../lib/deps";
import { ApiError } from "../../lib/errors";
import { withRequestId } from "../../lib/logger";
import { buildOpenApi, type ExposedAction } from "../../lib/openapi";
import { toProblem } from "../../lib/problem";
import { compileSchema, toFieldErrors } from "../../lib/validator";
import type { KeyDeletedEvent } from "../auth/auth.service";
import type { Principal } from "../auth/auth.schemas";
import { renderDocs } from "./gateway.docs";
import { answerClientError, parseJson, requestIdOf, requireJson, tagRequest, writeProblem } from "../../lib/http";
import { IDEMPOTENCY_KEY_RE, IdempotencyStore, requestHash, Sealer } from "./gateway.idempotency";
import { HttpMetrics } from "../../lib/http-metrics";
import { coerceStrings, mergeParams } from "./gateway.params";
import { receiveUpload, type ReceivedUpload } from "./gateway.upload";
import { TokenBuckets } from "./gateway.ratelimit";
import { decodeForClient } from "./gateway.encoding";
import { isRemoteFile, remoteFileStream } from "../../lib/remote-file";

/** Bytes of request line and headers the gateway accepts (1000 ids of 200 characters fit). */
export const MAX_REQUEST_HEAD = 256 * 1024;

type Middleware = (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;
const runMiddleware = (mw: Middleware, req: IncomingMessage, res: ServerResponse) =>
  new Promise<void>((resolve, reject) => mw(req, res, (err) => (err ? reject(err) : resolve())));
const mixin = ApiGateway as unknown as { methods: Record<string, (...args: unknown[]) => unknown> };

/** What moleculer-web hangs on a request, and what we add. */
interface GwRequest extends IncomingMessage {
  $requestId: string;
  $ctx: Context<unknown, AuthMeta>;
  $action?: ApiAction & { name: string };
  $alias?: { path: string; fullPath?: string; method: string; match(url: string): Record<string, string> | false };
  $endpoint?: unknown;
  $route?: { opts: { name?: string }; callOptions?: Record<string, unknown>; onAfterCall?: unknown };
  $params?: Record<string, unknown>;
  parsedUrl?: string;
  query?: Record<string, unknown>;
  body?: unknown;
}

interface CachedPrincipal {
  principal: Principal;
  expires: number;
}

type GatewayThis = Service<ApiServiceSettings> & GatewayVars;
interface GatewayVars {
  keyCache: Map<string, CachedPrincipal>;
  keyHashes: Map<string, string>;
  deletedKeys: Map<string, number>;
  buckets: TokenBuckets;
  idempotency: IdempotencyStore;
  metrics: HttpMetrics;
  openApiCache: Record<string, unknown> | null;
  aliases: Array<{ path: string; fullPath?: string; method: string; match(url: string): Record<string, string> | false }>;
  aliasesReady: boolean;
  purgeTimer?: NodeJS.Timeout;
  /** Where uploads are spooled until their action has answered. */
  spoolDir: string;
  server: import("node:http").Server;
  httpHandler(req: IncomingMessage, res: ServerResponse): void;
  principalOf(ctx: Context, hash: string): Promise<Principal | null>;
  cachedPrincipal(hash: string): Principal | null;
  rateLimit(res: ServerResponse, id: string, enforce: boolean): void;
  storeAnswer(companyId: string, key: string, status: number, body: unknown, headers: Record<string, string>, sealer: Sealer): Promise<void>;
  evictKey(keyId: string): void;
  sendProblem(req: GwRequest, res: ServerResponse, err: unknown): void;
  sendResponse(req: GwRequest, res: ServerResponse, data: unknown, action: unknown): void;
  exposedActions(): ExposedAction[];
  openApiDocument(): Record<string, unknown>;
  checkResponse(req: GwRequest, status: number, data: unknown): void;
  callIdempotent(route: NonNullable<GwRequest["$route"]>, req: GwRequest, res: ServerResponse, params: Record<string, unknown>, key: string): Promise<boolean>;
  readiness(): Promise<Record<string, string>>;
  allowedMethods(url: string): string[];
  answerOptions(req: GwRequest, res: ServerResponse): void;
}

export function createGatewayService(deps: Deps): ServiceSchema<ApiServiceSettings, Record<string, never>, GatewayVars> {
  const { config, db } = deps;

  /** Function aliases of the ops route answer directly; moleculer-web calls them with `this` = service. */
  const ops = {
    "GET /healthz/live"(this: GatewayThis, _req: GwRequest, res: ServerResponse) {
      res.setHeader("Content-Type", "application/json; charset=utf-8");
      res.end(JSON.stringify({ status: "live" }));
    },
    async "GET /healthz/ready"(this: GatewayThis, req: GwRequest, res: ServerResponse) {
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
    async "GET /metrics"(this: GatewayThis, _req: GwRequest, res: ServerResponse) {
      const text = await this.metrics.render();
      res.setHeader("Content-Type", this.metrics.contentType);
      res.end(text);
    },
    "GET /docs"(this: GatewayThis, _req: GwRequest, res: ServerResponse) {
      res.setHeader("Content-Type", "text/html; charset=utf-8");
      res.end(renderDocs(this.openApiDocument()));
    },
  };

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
      rootCallOptions(options: Record<string, unknown>, req: GwRequest) {
        options.requestID = req.$requestId;
      },
      routes: [
        {
          name: "partner",
          path: API_PREFIX,
          autoAliases: true,
          mappingPolicy: "restrict",
          bodyParsers: false, // the body is read in callAction, once the key has been checked
          authentication: true,
          mergeParams: true,
          callOptions: { timeout: config.requestTimeoutMs },
          onAfterCall(this: GatewayThis, ctx: Context<unknown, AuthMeta>, _route: unknown, req: GwRequest, res: ServerResponse, data: unknown) {
            // A file answered by reference is pulled from its node as the client reads it.
            if (isRemoteFile(data)) {
              // Each range is a call of its own (not a child of this request's context, whose time-out would cut a long download).
              const ranges = {
                call: (action: string, params: unknown, opts: { nodeID: string }) =>
                  this.broker.call(action, params, { ...opts, requestID: ctx.requestID ?? undefined, timeout: config.requestTimeoutMs }),
              };
              data = remoteFileStream(ranges, data.$remoteFile);
            }
            this.checkResponse(req, ctx.meta.$statusCode ?? 200, data);
            // moleculer-web sends $location with 201 and redirects only; a 202 names its job too.
            const location = (ctx.meta as { $location?: string }).$location;
            if (location && ctx.meta.$statusCode === 202) res.setHeader("Location", location);
            return data instanceof Readable ? decodeForClient(req, ctx.meta, data) : data;
          },
        },
        { name: "ops", path: "/", mappingPolicy: "restrict", bodyParsers: false, aliases: ops },
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
        this.evictKey(ctx.params.keyId);
      },
      "$services.changed"(this: GatewayThis) {
        this.openApiCache = null;
      },
      // Broadcast by every moleculer-web of the cluster (the other gateways, the tracking ingress):
      // not a sign that this gateway's routes are built (see regenerateAutoAliases).
      "$api.aliases.regenerated"(this: GatewayThis) {
        this.openApiCache = null;
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

      /** This gateway's partner routes are built from the registry: from then on it is ready. */
      regenerateAutoAliases(this: GatewayThis, route: { opts: { name?: string } }) {
        const out = mixin.methods.regenerateAutoAliases!.call(this, route);
        if (route.opts.name === "partner") {
          this.aliasesReady = true;
          this.openApiCache = null;
        }
        return out;
      },

      /** Every request: its id (kept or generated), the log scope, the access log and metrics. */
      httpHandler(this: GatewayThis, req: GwRequest, res: ServerResponse, next?: unknown) {
        const requestId = tagRequest(req, res);
        if (req.method === "OPTIONS") return withRequestId(requestId, () => this.answerOptions(req, res));
        const started = process.hrtime.bigint();
        res.once("finish", () => {
          const seconds = Number(process.hrtime.bigint() - started) / 1e9;
          const route = req.$alias ? (req.$alias.fullPath ?? req.$alias.path) : "unmatched";
          this.metrics.observe(req.method ?? "GET", route, res.statusCode, seconds);
          // The access log line names its request id itself (no log scope needed after the answer).
          const url = (req as { originalUrl?: string }).originalUrl ?? req.url ?? "";
          this.logger.info(
            { requestId, method: req.method, path: url.split("?")[0], route, status: res.statusCode, ms: Math.round(seconds * 1e6) / 1000 },
            "request",
          );
        });
        return withRequestId(requestId, () => mixin.methods.httpHandler!.call(this, req, res, next));
      },

      /** X-API-Key -> the key's account and operations; the per-key rate limit; the operation check. */
      async authenticate(this: GatewayThis, ctx: Context<unknown, AuthMeta>, _route: unknown, req: GwRequest, res: ServerResponse) {
        const action = req.$action;
        if (!action) return null;
        const ip = `ip:${req.socket.remoteAddress}`;
        if (action.operation === null) {
          this.rateLimit(res, ip, true); // public: limited per client address
          return null;
        }
        // Fail closed: an exposed action must say which operation it needs (null for public).
        if (action.operation === undefined) throw new Error(`${action.name} is exposed without declaring its operation`);
        const raw = req.headers["x-api-key"];
        const hash = typeof raw === "string" && API_KEY_RE.test(raw) ? hashApiKey(raw).toString("hex") : null;
        let principal = hash ? this.cachedPrincipal(hash) : null;
        if (!principal && hash) {
          // A key not in the cache costs a lookup: charge the client address first.
          this.rateLimit(res, ip, true);
          principal = await this.principalOf(ctx, hash);
        }
        this.rateLimit(res, principal ? `key:${principal.keyId}` : ip, true);
        if (!principal) {
          throw new ApiError("UNAUTHORIZED", raw === undefined ? "The X-API-Key header is missing." : "The API key is unknown, malformed or deleted.");
        }
        if (action.operation === "CHANNEL") {
          // The channel operation named by `channel` (when it names one; a bad value is the action's 400),
          // and at least one channel in any case.
          const requested = req.query?.channel;
          if (typeof requested === "string" && (CHANNELS as readonly string[]).includes(requested) && !principal.operations.includes(requested as Operation)) {
            throw new ApiError("UNAUTHORIZED", `The API key is not authorized for ${requested}.`);
          }
          if (!CHANNELS.some((c) => principal.operations.includes(c))) {
            throw new ApiError("UNAUTHORIZED", "The API key is not authorized for any channel (SMS, RCS, WHATSAPP).");
          }
        } else if (!principal.operations.includes(action.operation)) {
          throw new ApiError("UNAUTHORIZED", `The API key is not authorized for ${action.operation}.`);
        }
        Object.assign(ctx.meta, {
          companyId: principal.companyId,
          userId: principal.userId,
          username: principal.username,
          keyId: principal.keyId,
          keyCreatedAt: principal.keyCreatedAt,
          operations: principal.operations,
          trafficType: principal.trafficType,
        } satisfies Omit<AuthMeta, "$statusCode" | "$responseHeaders">);
        return principal;
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

      /** The principal of a key (by the hex SHA-256 of its value) while it is cached. */
      cachedPrincipal(this: GatewayThis, hash: string): Principal | null {
        const hit = this.keyCache.get(hash);
        return hit && hit.expires > Date.now() ? hit.principal : null;
      },

      /** Asks `auth` who the key with this hex SHA-256 is, and caches the answer. */
      async principalOf(this: GatewayThis, ctx: Context, hash: string): Promise<Principal | null> {
        const principal = (await ctx.call("auth.verify", { keyHash: hash })) as Principal | null;
        // Deleted while the lookup was on its way: the answer is already out of date.
        if (principal && this.deletedKeys.has(principal.keyId)) return null;
        if (principal && config.authCacheTtlMs > 0) {
          if (this.keyCache.size >= 10000) {
            const oldest = this.keyCache.keys().next().value!;
            this.keyCache.delete(oldest);
          }
          this.keyCache.set(hash, { principal, expires: Date.now() + config.authCacheTtlMs });
          this.keyHashes.set(principal.keyId, hash);
        }
        return principal;
      },

      evictKey(this: GatewayThis, keyId: string) {
        const hash = this.keyHashes.get(keyId);
        if (hash) this.keyCache.delete(hash);
        this.keyHashes.delete(keyId);
        // Remembered for as long as a lookup started before the deletion could still answer.
        const now = Date.now();
        this.deletedKeys.set(keyId, now + 60_000);
        if (this.deletedKeys.size > 1000) for (const [id, until] of this.deletedKeys) if (until < now) this.deletedKeys.delete(id);
      },

      /**
       * Partner calls, after authentication: the body (JSON only, 1 MiB), params from query, body and
       * path (coerced by the action's schema), then Idempotency-Key or the plain call.
       */
      async callAction(
        this: GatewayThis,
        route: NonNullable<GwRequest["$route"]>,
        actionName: string,
        req: GwRequest,
        res: ServerResponse,
        params: Record<string, unknown>,
        isStream: boolean,
      ) {
        if (route.opts.name !== "partner" || !req.$action) return mixin.methods.callAction!.call(this, route, actionName, req, res, params, isStream);
        const action = req.$action;
        const schema = action.params as Record<string, unknown> | undefined;
        let upload: ReceivedUpload | null = null;
        let body: unknown = undefined;
        if (action.upload) {
          try {
            upload = await receiveUpload(req, action.upload, this.spoolDir);
          } catch (err) {
            // The rest of the body is not read: the connection cannot carry another request.
            if (!req.complete) res.setHeader("Connection", "close");
            throw err;
          }
          body = coerceStrings(upload.fields, schema);
        } else if (req.method !== "GET" && req.method !== "HEAD") {
          await runMiddleware(requireJson, req, res);
          await runMiddleware(parseJson, req, res);
          body = req.body;
        }
        let spooled: ReturnType<typeof createReadStream> | null = null;
        try {
          const pathParams = (req.$alias?.match(req.parsedUrl ?? "") || {}) as Record<string, string>;
          const merged = mergeParams(req.query ?? {}, body, pathParams, schema);
          if (upload?.file) merged[action.upload!.field] = upload.file;
          req.$params = merged;
          // An action may declare a longer (or shorter) timeout than the route's default; an upload's bytes go as the call's stream.
          const callOptions: Record<string, unknown> = { ...route.callOptions };
          if (action.timeout) callOptions.timeout = action.timeout;
          if (upload?.path) callOptions.stream = spooled = createReadStream(upload.path);
          const call = { ...route, callOptions };
          const key = req.headers["idempotency-key"];
          const idempotent = req.method === "POST" && action.idempotent !== false && req.$ctx.meta.companyId;
          if (idempotent && key !== undefined) {
            if (typeof key !== "string" || !IDEMPOTENCY_KEY_RE.test(key)) {
              throw new ApiError("INVALID_HEADER", "Idempotency-Key must be 1-255 printable ASCII characters.", {
                errors: [{ path: "Idempotency-Key", message: "must be 1-255 printable characters" }],
              });
            }
            return await this.callIdempotent(call, req, res, merged, key);
          }
          return await mixin.methods.callAction!.call(this, call, actionName, req, res, merged, isStream);
        } finally {
          spooled?.destroy();
          if (upload) await upload.discard();
        }
      },

      async callIdempotent(
        this: GatewayThis,
        route: NonNullable<GwRequest["$route"]>,
        req: GwRequest,
        res: ServerResponse,
        params: Record<string, unknown>,
        key: string,
      ) {
        const ctx = req.$ctx;
        const companyId = ctx.meta.companyId;
        const sealer = new Sealer(req.headers["x-api-key"] as string, companyId, key);
        const timeout = (route.callOptions?.timeout as number | undefined) ?? config.requestTimeoutMs;
        const claim = await this.idempotency.claim(
          companyId,
          key,
          requestHash(ctx.meta.keyId, req.method!, req.parsedUrl ?? "", params),
          sealer,
          timeout / 1000,
        );
        if (claim.kind === "mismatch")
          throw new ApiError("IDEMPOTENCY_KEY_REUSED", "This Idempotency-Key was used for a different request (or by another key) in the last 24 hours.");
        if (claim.kind === "running")
          throw new ApiError("IDEMPOTENCY_IN_PROGRESS", "A request with this Idempotency-Key is still being processed; retry shortly.");
        if (claim.kind === "replay") {
          res.setHeader("Idempotent-Replayed", "true");
          for (const [k, v] of Object.entries(claim.headers)) res.setHeader(k, v);
          if (claim.status >= 400) {
            writeProblem(res, { ...(claim.body as object), requestId: req.$requestId } as never);
          } else {
            res.statusCode = claim.status;
            if (claim.status === 204 || claim.body == null) res.end();
            else {
              res.setHeader("Content-Type", "application/json; charset=utf-8");
              res.end(JSON.stringify(claim.body));
            }
          }
          return true; // answered: moleculer-web must not go on to a 404
        }
        let data: unknown;
        try {
          data = await ctx.call(req.$endpoint as string, params, { ...route.callOptions });
        } catch (err) {
          const problem = toProblem(err, req.$requestId);
          const type = (err as { type?: string }).type ?? "";
          if (problem.status < 500) {
            const { requestId: _drop, ...stored } = problem;
            await this.storeAnswer(companyId, key, problem.status, stored, {}, sealer);
          } else if (type !== "REQUEST_TIMEOUT") {
            // Nothing ran (no service), or the action ended with an error: it is over, retry freely.
            await this.idempotency.release(companyId, key).catch(() => undefined);
          }
          // A timeout leaves the claim RUNNING: the handler may still be at work, so repeats get 409
          // until the claim is abandoned (IdempotencyStore.abandonAfterS) rather than acting twice.
          throw err;
        }
        const status = ctx.meta.$statusCode ?? 200;
        this.checkResponse(req, status, data);
        const location = (ctx.meta as { $location?: string }).$location;
        await this.storeAnswer(companyId, key, status, data, location ? { Location: location } : {}, sealer);
        if (location && status === 202) res.setHeader("Location", location);
        this.sendResponse(req, res, data, (req.$endpoint as { action: unknown }).action);
        return true;
      },

      /** Stores an answer; if that fails the caller still gets the answer, and the claim stays until abandoned. */
      async storeAnswer(this: GatewayThis, companyId: string, key: string, status: number, body: unknown, headers: Record<string, string>, sealer: Sealer) {
        try {
          await this.idempotency.complete(companyId, key, status, body, headers, sealer);
        } catch (err) {
          this.logger.error({ err: { name: (err as Error).name, message: (err as Error).message } }, "could not store an idempotent answer");
        }
      },

      /** The methods routed on a path (empty: no such path). */
      allowedMethods(this: GatewayThis, url: string): string[] {
        const path = url.length > 1 && url.endsWith("/") ? url.slice(0, -1) : url;
        const order = ["GET", "POST", "PUT", "PATCH", "DELETE"];
        return [...new Set(this.aliases.filter((a) => a.match(path)).map((a) => a.method))]
          .filter((m) => m !== "*")
          .sort((a, b) => order.indexOf(a) - order.indexOf(b));
      },

      /** OPTIONS: 204 with Allow on a known path, 404 otherwise (no CORS: this API is server to server). */
      answerOptions(this: GatewayThis, req: GwRequest, res: ServerResponse) {
        const allowed = this.allowedMethods(req.url?.split("?")[0] ?? "");
        if (allowed.length === 0) return this.sendProblem(req, res, new ApiError("ROUTE_NOT_FOUND", `No route ${req.url?.split("?")[0]}.`));
        res.setHeader("Allow", [...allowed, "OPTIONS"].join(", "));
        res.statusCode = 204;
        res.end();
      },

      /** Unknown path: 404; known path with another method: 405 with Allow. */
      send404(this: GatewayThis, req: GwRequest, res: ServerResponse) {
        const url = req.parsedUrl ?? req.url?.split("?")[0] ?? "";
        const allowed = this.allowedMethods(url);
        if (allowed.length > 0) {
          res.setHeader("Allow", allowed.join(", "));
          return this.sendProblem(req, res, new ApiError("METHOD_NOT_ALLOWED", `${req.method} is not allowed on ${url}; allowed: ${allowed.join(", ")}.`));
        }
        this.sendProblem(req, res, new ApiError("ROUTE_NOT_FOUND", `No route ${req.method} ${url}.`));
      },

      sendProblem(this: GatewayThis, req: GwRequest, res: ServerResponse, err: unknown) {
        const requestId = req.$requestId ?? requestIdOf(undefined);
        const problem = toProblem(err, requestId);
        if (problem.status === 500) {
          withRequestId(requestId, () => this.logger.error({ err, method: req.method, path: req.url }, "request failed"));
        } else if (problem.status > 500) {
          withRequestId(requestId, () =>
            this.logger.warn({ method: req.method, path: req.url, status: problem.status, detail: problem.detail }, "request not served"),
          );
        }
        // Every partner answer carries RateLimit-*: those refused before authentication count per address.
        const url = (req as { originalUrl?: string }).originalUrl ?? req.url ?? "";
        if (url.startsWith(API_PREFIX) && !res.headersSent && !res.hasHeader("RateLimit-Limit")) {
          this.rateLimit(res, `ip:${req.socket.remoteAddress}`, false);
        }
        writeProblem(res, problem, { "X-Request-Id": requestId });
      },

      /** With VALIDATE_RESPONSES (tests): an answer that does not match its declared schema is a 500. */
      checkResponse(this: GatewayThis, req: GwRequest, status: number, data: unknown) {
        if (!config.validateResponses || !req.$action) return;
        const schema = req.$action.responses?.[status];
        if (schema === undefined) throw new Error(`${req.$action.name} answered ${status}, which it does not declare`);
        if (schema === null) {
          if (data != null) throw new Error(`${req.$action.name} answered a body with ${status}, declared without one`);
          return;
        }
        if (data instanceof Readable) {
          if (schema.format !== "binary") throw new Error(`${req.$action.name} answered a stream where its schema declares JSON`);
          return;
        }
        const validate = compileSchema(schema);
        if (!validate(data)) throw new Error(`${req.$action.name} answer does not match its schema: ${JSON.stringify(toFieldErrors(validate.errors))}`);
      },

      exposedActions(this: GatewayThis): ExposedAction[] {
        const seen = new Set<string>();
        const out: ExposedAction[] = [];
        for (const svc of this.broker.registry.getServiceList({ withActions: true }) as Array<{ actions?: Record<string, ExposedAction> }>) {
          for (const action of Object.values(svc.actions ?? {})) {
            const a = action as ExposedAction & { visibility?: string };
            if (!a.rest || seen.has(a.name) || (a.visibility && a.visibility !== "published")) continue;
            seen.add(a.name);
            out.push(a);
          }
        }
        return out;
      },

      openApiDocument(this: GatewayThis) {
        this.openApiCache ??= buildOpenApi(this.exposedActions(), { serverUrl: config.publicBaseUrl });
        return this.openApiCache;
      },

      async readiness(this: GatewayThis) {
        const checks: Record<string, string> = {};
        try {
          await db.ping(1000);
          checks.database = "ok";
        } catch {
          checks.database = "unreachable";
        }
        if (config.transporter) checks.transporter = this.broker.transit?.connected ? "ok" : "disconnected";
        checks.routes = this.aliasesReady ? "ok" : "loading";
        return checks;
      },
    },

    created(this: GatewayThis) {
      this.keyCache = new Map();
      this.keyHashes = new Map();
      this.deletedKeys = new Map();
      this.buckets = new TokenBuckets(config.rateLimitRps, 2);
      this.idempotency = new IdempotencyStore(db.sequelize);
      this.metrics = new HttpMetrics(this.broker);
      this.openApiCache = null;
      this.aliasesReady = false;
      this.server.on("clientError", answerClientError);
      this.spoolDir = mkdtempSync(path.join(os.tmpdir(), "pgw-spool-"));
    },

    started(this: GatewayThis) {
      this.purgeTimer = setInterval(() => {
        this.idempotency.purgeExpired().catch((err) => this.logger.warn({ err }, "idempotency purge failed"));
      }, 3600_000);
      this.purgeTimer.unref();
    },

    stopped(this: GatewayThis) {
      clearInterval(this.purgeTimer);
      rmSync(this.spoolDir, { recursive: true, force: true });
    },
  };
}
