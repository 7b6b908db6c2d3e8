/**
 * Broker options for every process of the project (service nodes, the REPL, tests): the transporter
 * from TRANSPORTER (NATS) or none (in-process), pino as the logger, ajv as the validator, and the
 * middleware that carries the request id into every log line.
 */
import { Errors, METRIC, type BrokerOptions, type Middleware, type ServiceBroker } from "moleculer";
import { Stream } from "node:stream";
import type { Config } from "./lib/config";
import { ApiError, databaseUnavailable, isDatabaseUnavailable, UNAVAILABLE_RETRY_AFTER_S } from "./lib/errors";
import { inRequestScope, loggerOptions } from "./lib/logger";
import { natsTransporter, transporterUp } from "./lib/nats-transporter";
import { RequestMetrics } from "./lib/request-metrics";
import { BinaryAnswerSerializer } from "./lib/serializer";
import { SchemaValidator } from "./lib/validator";

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
 * type, and the caller's gateway maps those, never Sequelize's class names.
 */
const DatabaseOutage = {
  name: "DatabaseOutage",
  localAction(handler: Handler) {
    const mapped = (err: unknown) => (isDatabaseUnavailable(err) ? databaseUnavailable() : err);
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

type TimedCtx = {
  options: { timeout?: number | null };
  startHrTime?: [number, number] | null;
  nodeID?: string | null;
  requestID?: string | null;
  params: unknown;
};

/**
 * Moleculer's Timeout middleware, with one promise and one timer per call instead of its
 * `Promise.race` of a timer promise (five promises a call, measured among the largest allocations
 * per request in bench/gateway). The same behaviour: the time-out defaults to the action's, then the
 * broker's requestTimeout; the call's start is kept for the distributed time-out of nested calls; at
 * the time-out the caller gets a RequestTimeoutError (the handler itself runs on), a warning is
 * logged, a stream sent as params is told, and moleculer_request_timeout_total counts it.
 */
const CallTimeout = {
  name: "CallTimeout",
  created(broker: ServiceBroker) {
    if (broker.isMetricsEnabled()) {
      broker.metrics.register({
        name: METRIC.MOLECULER_REQUEST_TIMEOUT_TOTAL,
        type: METRIC.TYPE_COUNTER,
        labelNames: ["service", "action"],
        description: "Number of timed out requests",
        rate: true,
      });
    }
  },
  localAction: callTimeout,
  remoteAction: callTimeout,
} as unknown as Middleware;

function callTimeout(
  this: ServiceBroker,
  handler: (ctx: TimedCtx) => Promise<unknown>,
  action: { name: string; timeout?: number; service?: { fullName: string } },
) {
  const actionName = action.name;
  const service = action.service ? action.service.fullName : null;
  return (ctx: TimedCtx): Promise<unknown> => {
    if (ctx.options.timeout == null) ctx.options.timeout = action.timeout != null ? action.timeout : this.options.requestTimeout;
    const ms = ctx.options.timeout ?? 0;
    if (!(ms > 0)) return handler(ctx);
    if (!ctx.startHrTime) ctx.startHrTime = process.hrtime();
    const p = handler(ctx);
    if (typeof p?.then !== "function") return p;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.logger.warn(`Request '${actionName}' is timed out.`, { requestID: ctx.requestID, nodeID: ctx.nodeID, timeout: ms });
        if (ctx.params instanceof Stream) ctx.params.emit("moleculer-timeout-middleware", ms);
        this.metrics?.increment(METRIC.MOLECULER_REQUEST_TIMEOUT_TOTAL, { service, action: actionName });
        reject(new Errors.RequestTimeoutError({ action: actionName, nodeID: ctx.nodeID as string }));
      }, ms);
      p.then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (err: unknown) => {
          clearTimeout(timer);
          reject(err);
        },
      );
    });
  };
}

type RemoteCtx = {
  options?: { nodeID?: string };
  params: unknown;
  broker: { call(action: string, params: unknown, opts: { ctx: unknown }): Promise<unknown> };
  copy(): RemoteCtx;
  noResponders?: number;
};

/** Nodes of one service a call tries when NATS says nobody listens for the node it picked. */
const NO_RESPONDERS_TRIES = 3;

/**
 * A call that NATS could not deliver ("no responders": its node is gone or not subscribed again
 * yet, lib/nats-transporter.ts) never ran: it is sent again, to the next node of the service by the
 * balancer, up to NO_RESPONDERS_TRIES in all (each such answer takes a round trip to NATS, not a
 * time-out). A call aimed at one node stays failed.
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

export function brokerOptions(config: Config, overrides: Partial<BrokerOptions> = {}): BrokerOptions {
  return {
    namespace: config.namespace,
    nodeID: config.nodeId ?? undefined,
    // Built from our config, never from Moleculer's own env parsing.
    // Credentials and TLS from NATS_* (or the URL); a publish that fails fails its call, not the process.
    transporter: config.transporter ? natsTransporter(config) : null,
    logger: loggerOptions(config),
    // JSON, with byte ranges answered as raw bytes (lib/serializer.ts).
    serializer: new BinaryAnswerSerializer() as unknown as BrokerOptions["serializer"],
    validator: new SchemaValidator({}),
    requestTimeout: 30_000,
    retryPolicy: { enabled: false },
    circuitBreaker: { enabled: false },
    registry: { strategy: "RoundRobin", preferLocal: true },
    // Moleculer's registry stays on (process, OS, event loop, transporter metrics), but its per-call
    // Metrics middleware is replaced by RequestMetrics (see lib/request-metrics.ts for why).
    metrics: { enabled: true, reporter: [], collectProcessMetrics: true },
    tracing: tracingOptions(config),
    // A stopping node waits for the calls it is serving (lib/app.ts narrows the wait to what is
    // left of SHUTDOWN_TIMEOUT_MS once its HTTP listeners have drained).
    tracking: { enabled: true, shutdownTimeout: config.shutdownTimeoutMs },
    // Only the internal middlewares the project uses, in Moleculer's own order: every call passes
    // each one (twice for a partner request: the gateway's action, then the service's). Not used,
    // so left out: Bulkhead, Cacher (no cacher), CircuitBreaker and Retry (both off above), Fallback,
    // Debounce and Throttle (no handler declares them). Adding one of those features means adding
    // its middleware here.
    internalMiddlewares: false,
    middlewares: [
      RequestScope,
      DatabaseOutage,
      TransporterOutage,
      "ActionHook",
      "Validator",
      "ContextTracker",
      CallTimeout,
      NoRespondersRetry,
      "ErrorHandler",
      ...(config.tracingExporter === "none" ? [] : ["Tracing"]),
      RequestMetrics(),
    ],
    // Our scripts stop the broker and then close the database; Moleculer's own signal handler would
    // exit the process in between.
    skipProcessEventRegistration: true,
    heartbeatInterval: 5,
    heartbeatTimeout: 15,
    ...overrides,
  };
}
