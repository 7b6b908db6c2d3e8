/**
 * Broker options for every process of the project (service nodes, the REPL, tests): the transporter
 * from TRANSPORTER (NATS) or none (in-process), pino as the logger, ajv as the validator, and the
 * middleware that carries the request id into every log line.
 */
import type { BrokerOptions, Middleware } from "moleculer";
import type { Config } from "./lib/config";
import { loggerOptions, withRequestId } from "./lib/logger";
import { SchemaValidator } from "./lib/validator";

type Handler = (ctx: { requestID?: string | null }) => unknown;

/** Every local action and event handler runs in its request's log scope. */
const RequestScope = {
  name: "RequestScope",
  localAction(handler: Handler) {
    return (ctx: { requestID?: string | null }) => withRequestId(ctx.requestID, () => handler(ctx));
  },
  localEvent(handler: Handler) {
    return (ctx: { requestID?: string | null }) => withRequestId(ctx.requestID, () => handler(ctx));
  },
} as unknown as Middleware;

export function brokerOptions(config: Config, overrides: Partial<BrokerOptions> = {}): BrokerOptions {
  return {
    namespace: "pgw",
    nodeID: config.nodeId ?? undefined,
    // Built from our config, never from Moleculer's own env parsing.
    transporter: config.transporter ? { type: "NATS", options: { url: config.transporter } } : null,
    logger: loggerOptions(config),
    validator: new SchemaValidator({}),
    requestTimeout: 30_000,
    retryPolicy: { enabled: false },
    circuitBreaker: { enabled: false },
    registry: { strategy: "RoundRobin", preferLocal: true },
    metrics: { enabled: true, reporter: [] },
    tracing: { enabled: false },
    middlewares: [RequestScope],
    heartbeatInterval: 5,
    heartbeatTimeout: 15,
    ...overrides,
  };
}
