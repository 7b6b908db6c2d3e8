/**
 * Logging: pino as Moleculer's logger (JSON, or pretty on a terminal). The request id of the
 * request being served is kept in an AsyncLocalStorage and added to every log line written while
 * serving it, whichever service or node writes it.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import type { LoggerConfig } from "moleculer";
import type { Config } from "./config";

export interface RequestScope {
  requestId: string;
}

export const requestScope = new AsyncLocalStorage<RequestScope>();

/** Runs `fn` with `requestId` attached to every log line it (and what it awaits) writes. */
export function withRequestId<T>(requestId: string | null | undefined, fn: () => T): T {
  if (!requestId) return fn();
  const current = requestScope.getStore();
  if (current?.requestId === requestId) return fn();
  return requestScope.run({ requestId }, fn);
}

/** Moleculer logger options: pino with the request-id mixin. */
export function loggerOptions(config: Pick<Config, "logLevel" | "logPretty">, destination?: NodeJS.WritableStream): LoggerConfig {
  const options: Record<string, unknown> = {
    level: config.logLevel,
    base: { pid: process.pid },
    mixin() {
      const scope = requestScope.getStore();
      return scope ? { requestId: scope.requestId } : {};
    },
    redact: { paths: ["apiKey", "*.apiKey", "headers['x-api-key']", "*.headers['x-api-key']"], censor: "[redacted]" },
  };
  if (config.logPretty && !destination) {
    options.transport = { target: "pino-pretty", options: { colorize: true, translateTime: "SYS:HH:MM:ss.l", ignore: "pid,hostname" } };
  }
  return {
    type: "Pino",
    options: { level: config.logLevel === "silent" ? false : config.logLevel, pino: { options, destination } },
  } as LoggerConfig;
}
