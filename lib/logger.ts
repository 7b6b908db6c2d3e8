/**
 * Logging: pino as Moleculer's logger (LOG_FORMAT: JSON lines, or pretty ones; by default pretty on
 * a terminal, JSON elsewhere). The request id of the request being served is kept in an
 * AsyncLocalStorage and added to every log line written while serving it, whichever service or
 * node writes it.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import type { LoggerConfig } from "moleculer";
import { writeSync } from "node:fs";
import pino from "pino";
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

/**
 * Log lines gathered into chunks of up to 64 KiB before they reach sonic-boom (pino's destination).
 * sonic-boom appends each line to its last pending string and measures that string's byte length
 * on every write, which flattens it: up to 16 KiB copied per line, the largest allocation per
 * request at load (bench/gateway). Here a line is only pushed to an array; sonic-boom gets one
 * buffer per chunk and does the asynchronous writes, retries and the final synchronous flush. Each
 * write is a thread-pool task and a syscall (about 15 us): at 25,000 lines a second, 64 KiB chunks
 * make that 130 writes a second instead of 1,300 with 8 KiB ones.
 */
export class ChunkedDestination {
  private lines: string[] = [];
  private chars = 0;

  constructor(
    private readonly dest: { write(chunk: Buffer): boolean; flushSync(): void; flush(cb?: (err?: Error) => void): void },
    private readonly chunkChars = 64 * 1024,
    private readonly fd = 1,
  ) {}

  write(line: string): boolean {
    this.lines.push(line);
    this.chars += line.length;
    if (this.chars >= this.chunkChars) this.flush();
    return true;
  }

  /** Hands what is gathered to sonic-boom, which writes it asynchronously. */
  flush(): void {
    if (this.lines.length === 0) return;
    const chunk = this.lines.length === 1 ? this.lines[0]! : this.lines.join("");
    this.lines = [];
    this.chars = 0;
    this.dest.write(Buffer.from(chunk, "utf8"));
  }

  /** Everything gathered and pending, written before returning (the process is exiting). */
  flushSync(): void {
    // sonic-boom's own pending bytes first, then what is gathered here, written synchronously
    // (handed to sonic-boom, it would start an asynchronous write the exiting process may not finish).
    this.dest.flushSync();
    if (this.lines.length === 0) return;
    const chunk = this.lines.join("");
    this.lines = [];
    this.chars = 0;
    writeSync(this.fd, chunk);
  }
}

/** `fn(arg)` in the log scope of `requestId` (no closure: what runs per action call). */
export function inRequestScope<A, T>(requestId: string | null | undefined, fn: (arg: A) => T, arg: A): T {
  if (!requestId || requestScope.getStore()?.requestId === requestId) return fn(arg);
  return requestScope.run({ requestId }, fn, arg);
}

let stdoutDest: ChunkedDestination | null = null;

/** stdout, written in chunks of up to 64 KiB and flushed at least every 250 ms so that an idle service's lines still show. */
function bufferedStdout() {
  if (!stdoutDest) {
    const dest = new ChunkedDestination(pino.destination({ dest: 1, sync: false, contentMode: "buffer", maxWrite: 64 * 1024 }) as never);
    setInterval(() => dest.flush(), 250).unref();
    process.on("exit", () => {
      try {
        dest.flushSync();
      } catch {
        /* stdout already gone */
      }
    });
    stdoutDest = dest;
  }
  return stdoutDest;
}

/**
 * How a pretty line reads: `12:00:01.234 INFO  gateway: request GET /api/... 200 3.1ms [requestId]`.
 * Moleculer's bindings (node, namespace, module, service) and the access log's fields are folded
 * into the line instead of being listed below it; any other field still is.
 */
export const PRETTY_OPTIONS = {
  translateTime: "SYS:HH:MM:ss.l",
  ignore: "pid,hostname,nodeID,ns,mod,svc,requestId,method,path,route,status,ms",
  messageFormat: "{if mod}{mod}: {end}{msg}{if method} {method} {path} {status} {ms}ms{end}{if requestId} [{requestId}]{end}",
  singleLine: false,
};

/**
 * Moleculer logger options: pino with the request-id mixin. `pretty` writes through pino-pretty as
 * a pino transport (its own thread), coloured when stdout is a terminal; `json` writes one JSON
 * object per line, buffered. A `destination` (tests) always gets JSON.
 */
export function loggerOptions(config: Pick<Config, "logLevel" | "logFormat">, destination?: NodeJS.WritableStream): LoggerConfig {
  const options: Record<string, unknown> = {
    level: config.logLevel,
    base: { pid: process.pid },
    mixin() {
      const scope = requestScope.getStore();
      return scope ? { requestId: scope.requestId } : {};
    },
  };
  const pretty = config.logFormat === "pretty" && !destination;
  if (pretty) {
    options.transport = { target: "pino-pretty", options: { ...PRETTY_OPTIONS, colorize: Boolean(process.stdout.isTTY), destination: 1 } };
  }
  // Buffered, asynchronous writes to stdout: one syscall per 64 KiB of log (or 250 ms) instead of one per line
  // (pino flushes the buffer when the process exits).
  const out = destination ?? (pretty ? undefined : (bufferedStdout() as unknown as NodeJS.WritableStream));
  return {
    type: "Pino",
    options: { level: config.logLevel === "silent" ? false : config.logLevel, pino: { options, destination: out } },
  } as LoggerConfig;
}

/** Writes one access log line (one per HTTP request). */
export type AccessLog = (requestId: string, method: string, path: string, route: string, status: number, ms: number) => void;

type PinoLike = pino.Logger & { [key: symbol]: unknown };

/**
 * An access-log writer for a service's logger: the line pino would write for
 * `logger.info({ requestId, method, path, route, status, ms }, "request")`, byte for byte, built
 * as one string and handed to the logger's own destination (the buffered stdout, the pretty
 * transport, a test's stream). Once per request this skips Moleculer's log wrapper, pino's merge of
 * the fields object and the request-scope mixin. Falls back to the logger when the broker's logger
 * is not the project's pino (null is returned and the caller logs as usual).
 */
export function accessLogWriter(broker: object, bindings: Record<string, unknown>): AccessLog | null {
  const appenders = (
    (broker as { loggerFactory?: unknown }).loggerFactory as { appenders?: Array<{ pino?: PinoLike; getLogLevel?(mod: unknown): string | null }> } | undefined
  )?.appenders;
  if (!appenders || appenders.length !== 1 || !appenders[0]!.pino) return null;
  const appender = appenders[0]!;
  const level = appender.getLogLevel?.(bindings.mod);
  if (!level) return () => undefined; // this module logs nothing
  const child = appender.pino!.child(bindings, { level }) as PinoLike;
  if (!child.isLevelEnabled("info")) return () => undefined;
  const stream = child[pino.symbols.streamSym] as { write(line: string): unknown };
  const chindings = child[pino.symbols.chindingsSym] as string;
  const infoLevel = child.levels.values.info;
  // A route is one of a few names: quoted once each.
  const routes = new Map<string, string>();
  const quotedRoute = (route: string) => {
    let q = routes.get(route);
    if (q === undefined) {
      q = JSON.stringify(route);
      if (routes.size < 10_000) routes.set(route, q);
    }
    return q;
  };
  return (requestId, method, path, route, status, ms) => {
    stream.write(
      `{"level":${infoLevel},"time":${Date.now()}${chindings},"requestId":${JSON.stringify(requestId)},"method":${JSON.stringify(method)},"path":${JSON.stringify(path)},"route":${quotedRoute(route)},"status":${status},"ms":${ms},"msg":"request"}\n`,
    );
  };
}
