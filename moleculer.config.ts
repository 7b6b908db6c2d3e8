/**
 * Broker options for every process of the project (service nodes, the REPL, tests): the transporter
 * from TRANSPORTER (NATS) or none (in-process), pino as the logger, ajv as the validator, and the
 * middleware that carries the request id into every log line.
 */
import type { BrokerOptions, Middleware, ServiceBroker } from "moleculer";
import type { Config } from "./lib/config";
import { ApiError, databaseUnavailable, isDatabaseUnavailable, isStatementTimedOut, statementTimedOut, UNAVAILABLE_RETRY_AFTER_S } from "./lib/errors";
import { inRequestScope, loggerOptions } from "./lib/observability/logger";
import { natsTransporter, transporterUp } from "./lib/bus/nats-transporter";
import { RequestMetrics } from "./lib/observability/request-metrics";
import { LargeAnswers } from "./lib/bus/large-answers";
import { SchemaValidator } from "./lib/http/validator";

type Handler = (ctx: { requestID?: string | null }) => unknown;

/** Every local action and event handler runs in its request's log scope. */
const RequestScope = {
  name: "RequestScope",
  localAction(handler: Handler) {
    return (ctx: { requestID?: string | null }) => inRequestScope(ctx.requestID, handler, ctx);
  },
  localEvent(handler: Handler) {
    return (ctx: { requestID?: string | null }) => inRequestScope(ctx.requestID, handler, ctx);
  },
} as unknown as Middleware;

/**
 * A local action that met a database it cannot reach (stopped, restarting, the link cut) answers a
 * 503 SERVICE_UNAVAILABLE with retryAfter, not the driver's error: errors cross nodes as code and
 * type, and the caller's gateway maps those, never Sequelize's class names. So does a statement its
 * time limit stopped (a heavy read's, the pool's DB_STATEMENT_TIMEOUT_MS): until now a 500.
 */
const DatabaseOutage = {
  name: "DatabaseOutage",
  localAction(handler: Handler) {
    const mapped = (err: unknown) => (isDatabaseUnavailable(err) ? databaseUnavailable() : isStatementTimedOut(err) ? statementTimedOut() : err);
    const rethrowMapped = (err: unknown): never => {
      throw mapped(err);
    };
    return (ctx: { requestID?: string | null }) => {
      try {
        return Promise.resolve(handler(ctx)).catch(rethrowMapped);
      } catch (err) {
        throw mapped(err);
      }
    };
  },
} as unknown as Middleware;

/**
 * Moleculer's tracer, off unless TRACING_EXPORTER names where spans go: a span per call, the trace id
 * being the request id (X-Request-Id), so a trace is found from any log line or problem answer.
 * Zipkin's format is what OpenTelemetry collectors take on their Zipkin receiver; "event" emits
 * `$tracing.spans` locally (tests, or a service of your own that forwards them).
 */
function tracingOptions(config: Config): BrokerOptions["tracing"] {
  switch (config.tracingExporter) {
    case "none":
      return { enabled: false };
    case "console":
      return { enabled: true, exporter: [{ type: "Console" }] };
    case "zipkin":
      return { enabled: true, exporter: [{ type: "Zipkin", options: { baseURL: config.tracingZipkinUrl } }] };
    case "event":
      return { enabled: true, exporter: [{ type: "Event", options: { eventName: "$tracing.spans", interval: 1, broadcast: false } }] };
  }
}

/**
 * A call for another node while NATS is away answers a 503 SERVICE_UNAVAILABLE with retryAfter at
 * once, instead of waiting for the request time-out (the NATS client would hold the request until
 * it reconnects). Calls to this node's own services go on.
 */
const TransporterOutage = {
  name: "TransporterOutage",
  remoteAction(handler: Handler) {
    return (ctx: { broker: ServiceBroker; requestID?: string | null }) => {
      if (!transporterUp(ctx.broker)) {
        throw new ApiError("SERVICE_UNAVAILABLE", "The message bus between the nodes is not reachable right now; try again shortly.", {
          retryAfter: UNAVAILABLE_RETRY_AFTER_S,
        });
      }
      return handler(ctx);
    };
  },
} as unknown as Middleware;

/** Nodes of one service a call tries when NATS says nobody listens for the node it picked. */
const NO_RESPONDERS_TRIES = 3;

type RemoteCtx = {
  options?: { nodeID?: string };
  params: unknown;
  broker: { call(action: string, params: unknown, opts: { ctx: unknown }): Promise<unknown> };
  copy(): RemoteCtx;
  noResponders?: number;
};

/**
 * A call that NATS could not deliver ("no responders": its node is gone or not subscribed again
 * yet, lib/bus/nats-transporter.ts) never ran: it is sent again, to the next node of the service by
 * the balancer, up to NO_RESPONDERS_TRIES in all and at once (each such answer takes a round trip to
 * NATS, not a time-out). A call aimed at one node stays failed. This is Moleculer's Retry middleware
 * reduced to remote calls and that one error, through its public hooks only (`remoteAction`,
 * `ctx.copy()`, `broker.call` with `ctx`): the built-in one with `retryPolicy: { enabled, check }`
 * was tried and made uploads pulled across nodes fail (ECONNRESET in test/integration/cluster.spec.ts
 * and test/e2e/media.spec.ts, every time with it, never without), and it also wraps every local
 * action, which this does not need.
 */
const NoRespondersRetry = {
  name: "NoRespondersRetry",
  remoteAction(handler: (ctx: RemoteCtx) => Promise<unknown>, action: { name: string }) {
    return (ctx: RemoteCtx) =>
      handler(ctx).catch((err: { type?: unknown }) => {
        const tries = (ctx.noResponders ?? 0) + 1;
        if (err?.type !== "NO_RESPONDERS" || ctx.options?.nodeID || tries >= NO_RESPONDERS_TRIES) throw err;
        const again = ctx.copy();
        again.noResponders = tries;
        return ctx.broker.call(action.name, ctx.params, { ctx: again });
      });
  },
} as unknown as Middleware;

/**
 * moleculer-web's `rest` action (private: the entry of every HTTP request into a gateway's routes)
 * needs none of our per-call middlewares: the listener has already opened the request's log scope,
 * the HTTP metrics time the request, it touches no database and never crosses nodes; the partner
 * call it leads to passes them all. Skipping them there is two promises, an AsyncLocalStorage
 * check and three metric updates fewer per request (bench/gateway).
 */
const isWebEntry = (action: { rawName?: string; visibility?: string }) => action.rawName === "rest" && action.visibility === "private";

function exceptWebEntry(mw: Middleware): Middleware {
  const m = mw as { localAction?: (this: unknown, handler: unknown, action: { rawName?: string; visibility?: string }) => unknown };
  const local = m.localAction;
  if (!local) return mw;
  return {
    ...m,
    localAction(this: unknown, handler: unknown, action: { rawName?: string; visibility?: string }) {
      return isWebEntry(action) ? handler : local.call(this, handler, action);
    },
  } as unknown as Middleware;
}

export function brokerOptions(config: Config, overrides: Partial<BrokerOptions> = {}): BrokerOptions {
  return {
    namespace: config.namespace,
    nodeID: config.nodeId ?? undefined,
    // Built from our config, never from Moleculer's own env parsing.
    // Credentials and TLS from NATS_* (or the URL); a publish that fails fails its call, not the
    // process; a call to a node that is gone fails at once (lib/bus/nats-transporter.ts).
    transporter: config.transporter ? natsTransporter(config) : null,
    logger: loggerOptions(config),
    // Moleculer's CBOR serializer (cbor-x): Buffers (the byte ranges of uploads and downloads) cross
    // as they are, not as base64 in JSON. Every node of a cluster, the REPL too, uses these options.
    serializer: "CBOR",
    validator: new SchemaValidator({}),
    requestTimeout: 30_000,
    retryPolicy: { enabled: false },
    circuitBreaker: { enabled: false },
    registry: { strategy: "RoundRobin", preferLocal: true },
    // Moleculer's registry stays on (process, OS, event loop, transporter metrics), but its per-call
    // Metrics middleware is replaced by RequestMetrics (see lib/observability/request-metrics.ts for why).
    metrics: { enabled: true, reporter: [], collectProcessMetrics: true },
    tracing: tracingOptions(config),
    // A stopping node waits for the calls it is serving (app/start-app.ts narrows the wait to what is
    // left of SHUTDOWN_TIMEOUT_MS once its HTTP listeners have drained).
    tracking: { enabled: true, shutdownTimeout: config.shutdownTimeoutMs },
    // Only the internal middlewares the project uses, in Moleculer's own order: every call passes
    // each one (twice for a partner request: the gateway's action, then the service's). Not used,
    // so left out: Bulkhead, Cacher (no cacher), CircuitBreaker and Retry (both off above), Fallback,
    // Debounce and Throttle (no handler declares them). Adding one of those features means adding
    // its middleware here.
    internalMiddlewares: false,
    middlewares: [
      exceptWebEntry(RequestScope),
      exceptWebEntry(DatabaseOutage),
      TransporterOutage,
      "ActionHook",
      "Validator",
      "ContextTracker",
      exceptWebEntry(LargeAnswers),
      "Timeout",
      NoRespondersRetry,
      "ErrorHandler",
      ...(config.tracingExporter === "none" ? [] : ["Tracing"]),
      exceptWebEntry(RequestMetrics()),
    ],
    // Our scripts stop the broker and then close the database; Moleculer's own signal handler would
    // exit the process in between.
    skipProcessEventRegistration: true,
    heartbeatInterval: 5,
    heartbeatTimeout: 15,
    ...overrides,
  };
}
