/**
 * Logging: pino as Moleculer's logger, through Moleculer's built-in Pino logger and the public
 * options of pino and sonic-boom (LOG_FORMAT: JSON lines, or pretty ones; by default pretty on a
 * terminal, JSON elsewhere). Every line, the gateway's access line included, goes through pino, so
 * its redaction censors credentials wherever they are logged. The request id of the request being served
 * is kept in an AsyncLocalStorage and added to every log line written while serving it, whichever
 * service or node writes it.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { Loggers, type ServiceBroker } from "moleculer";
import { writeSync } from "node:fs";
import pino from "pino";
import pinoPretty from "pino-pretty";
import type { Config } from "../config";

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

/** `fn(arg)` in the log scope of `requestId` (no closure: what runs per action call). */
export function inRequestScope<A, T>(requestId: string | null | undefined, fn: (arg: A) => T, arg: A): T {
  if (!requestId || requestScope.getStore()?.requestId === requestId) return fn(arg);
  return requestScope.run({ requestId }, fn, arg);
}

/** What a censored value reads as (the same word the gateway puts in place of a download's signature). */
export const CENSOR = "[redacted]";

/** Names a credential goes by, in our code and our libraries': censored wherever a line carries them. */
const SECRET_KEYS = [
  "apiKey",
  "api_key",
  "token",
  "accessToken",
  "refreshToken",
  "internalToken",
  "secret",
  "signingSecret",
  "previousSigningSecret",
  "password",
  "authorization",
  "cookie",
  '["x-api-key"]',
  '["x-internal-token"]',
];

/** Objects that carry credentials in a log call: request headers, action params and bodies, an error's data, ... */
const CARRIERS = ["headers", "req.headers", "params", "body", "data", "meta", "config", "webhook", "profile", "err.data", "err.headers"];

/**
 * Paths pino censors on every line (pino's `redact`): each credential name at the top level of a
 * log call's object and inside the objects that carry one. Every path starts with a literal key on
 * purpose: pino then checks only the lines that have that key, where a leading `*` would make it
 * walk every object of every line.
 */
export const REDACT_PATHS: readonly string[] = [
  ...SECRET_KEYS,
  ...CARRIERS.flatMap((carrier) => SECRET_KEYS.map((k) => (k.startsWith("[") ? `${carrier}${k}` : `${carrier}.${k}`))),
];

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
 * Log lines gathered into chunks of up to 64 KiB before they reach sonic-boom (pino's destination,
 * in its documented `contentMode: "buffer"`). In its default string mode sonic-boom appends each
 * line to its last pending string and measures that string's byte length on every write, which
 * flattens it: 2 to 4 us more CPU per line than here (bench/logger.ts), where a line is only pushed
 * to an array and sonic-boom gets one buffer per chunk and does the asynchronous writes, retries and
 * the final synchronous flush.
 */
export class ChunkedDestination {
  private lines: string[] = [];
  private chars = 0;
  /** Bytes handed to sonic-boom and bytes it reported written (its documented "write" event): equal when nothing is pending. */
  private handed = 0;
  private written = 0;
  private waiters: Array<() => void> = [];

  constructor(
    private readonly dest: {
      write(chunk: Buffer): boolean;
      flushSync(): void;
      on(event: "write", listener: (bytes: number) => void): unknown;
    },
    private readonly chunkChars = 64 * 1024,
    private readonly fd = 1,
  ) {
    dest.on("write", (bytes) => {
      this.written += bytes;
      if (this.written >= this.handed) for (const resolve of this.waiters.splice(0)) resolve();
    });
  }

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
    const buffer = Buffer.from(chunk, "utf8");
    this.handed += buffer.length;
    this.dest.write(buffer);
  }

  /** Everything gathered and pending, written out; resolves once sonic-boom has written it. */
  drain(): Promise<void> {
    this.flush();
    if (this.written >= this.handed) return Promise.resolve();
    // Bounded: a stdout that has gone away (a closed pipe) reports no more writes, and a stop must not hang on it.
    return new Promise((resolve) => {
      this.waiters.push(resolve);
      setTimeout(resolve, 5000).unref();
    });
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

let stdoutDest: ChunkedDestination | null = null;

/**
 * stdout, shared by every broker of the process (one writer, so lines never interleave), written in
 * chunks of up to 64 KiB and at least every 250 ms so that an idle service's lines still show. The
 * process's exit writes out what is left; so does a stopping broker (FlushingPinoLogger).
 */
function bufferedStdout(): ChunkedDestination {
  if (!stdoutDest) {
    // sonic-boom's typings name only strings; in "buffer" mode it takes Buffers.
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

/** Writes out what the buffered stdout holds; resolves once it is written (at once when there is none). */
export function flushLogs(): Promise<void> {
  return stdoutDest ? stdoutDest.drain() : Promise.resolve();
}

/**
 * Moleculer's built-in Pino logger (its documented "Pino" type, as a class the broker options take
 * in place of `{ type: "Pino" }`), which also empties the buffered stdout when its broker stops:
 * Moleculer stops its loggers last, after "ServiceBroker is stopped. Good bye.".
 */
class FlushingPinoLogger extends Loggers.Pino {
  override stop(): Promise<void> {
    return flushLogs();
  }
}

let prettyDest: pinoPretty.PrettyStream | null = null;

/**
 * stdout through pino-pretty, shared by every logger of the process: pino-pretty's documented stream
 * API (`PinoPretty(options)` as pino's destination) in this thread, written synchronously. As a
 * pino transport it ran a worker thread of its own (about 20 MB idle) for what is a terminal's
 * volume of lines; a log collector reads the JSON format, which never goes through here.
 */
function prettyStdout(): pinoPretty.PrettyStream {
  prettyDest ??= pinoPretty({ ...PRETTY_OPTIONS, colorize: Boolean(process.stdout.isTTY), destination: 1, sync: true });
  return prettyDest;
}

function pinoOptions(config: Pick<Config, "logLevel">): pino.LoggerOptions {
  return {
    level: config.logLevel,
    base: { pid: process.pid },
    redact: { paths: [...REDACT_PATHS], censor: CENSOR },
    mixin() {
      const scope = requestScope.getStore();
      return scope ? { requestId: scope.requestId } : {};
    },
  };
}

/**
 * Moleculer logger options: pino with the request-id mixin and the redaction. `pretty` writes through
 * pino-pretty in this thread (prettyStdout), coloured when stdout is a terminal; `json` writes one
 * JSON object per line, buffered. A `destination` (tests) always gets JSON.
 */
export function loggerOptions(config: Pick<Config, "logLevel" | "logFormat">, destination?: NodeJS.WritableStream): Loggers.Pino {
  const out = destination ?? (config.logFormat === "pretty" ? prettyStdout() : bufferedStdout());
  return new FlushingPinoLogger({
    // `false` turns every module's logger into a no-op (Moleculer's own switch; its typings name only levels).
    level: config.logLevel === "silent" ? (false as never) : config.logLevel,
    pino: { options: pinoOptions(config), destination: out as pino.DestinationStream },
  });
}

/**
 * The logger of `npm start` itself before a broker exists (the start's progress): the same format,
 * destination and redaction as the broker's lines, module `start`.
 */
export function startLogger(config: Pick<Config, "logLevel" | "logFormat">): pino.Logger {
  const out = config.logFormat === "pretty" ? prettyStdout() : bufferedStdout();
  return pino({ ...pinoOptions(config), level: config.logLevel === "silent" ? "silent" : config.logLevel }, out as pino.DestinationStream).child({
    mod: "start",
  });
}

/** Writes one access log line (one per HTTP request). */
export type AccessLog = (requestId: string, method: string, path: string, route: string, status: number, ms: number) => void;

/**
 * The access line through the broker's logger for `bindings` (the logger Moleculer gives the service
 * of that module: `broker.getLogger`), as `logger.info({ requestId, method, path, route, status, ms }, "request")`.
 * Kept for the gateway's call site; a service can as well call its own `this.logger.info` with those fields.
 */
export function accessLogWriter(broker: ServiceBroker, bindings: { nodeID?: string; ns?: string; mod: string; svc?: string; ver?: unknown }): AccessLog {
  const logger = broker.getLogger(bindings.mod, { svc: bindings.svc, ver: bindings.ver });
  return (requestId, method, path, route, status, ms) => logger.info({ requestId, method, path, route, status, ms }, "request");
}
