/**
 * The callback client (spec part 6 "Delivery to the callback", contract "Event delivery"): one
 * POST of an event body to a partner's endpoint, with undici.
 *
 * - The address rule is applied where the connection is made: the host is resolved here (A and
 *   AAAA, cached briefly), every address is checked again (unless WEBHOOK_ALLOW_PRIVATE_TARGETS),
 *   and the socket goes to the checked address through a pinned `lookup`, so DNS rebinding cannot
 *   send it elsewhere and the HTTP stack never looks the name up a second time. TLS still verifies
 *   the certificate against the host name (SNI).
 * - 3 s to connect (resolution included), 5 s for the answer's head; an overall deadline ends any
 *   attempt within 8.5 s, so the claim lease (NOTIFIER_LEASE_MS, at least 10 s) always outlasts it.
 * - Redirects are never followed (they count as failures); any 2xx is success.
 * - One undici Pool per (account, origin, address), `connections` sockets kept alive, closed after
 *   a minute unused.
 */
import { lookup as dnsLookup } from "node:dns/promises";
import { readFileSync } from "node:fs";
import { isIP, type LookupFunction } from "node:net";
import tls from "node:tls";
import { Pool, type Dispatcher } from "undici";
import { signatureHeaders, type Signing } from "./notifier.signing";
import { nonPublicReason } from "./notifier.url";

export const CONNECT_TIMEOUT_MS = 3000;
export const ANSWER_TIMEOUT_MS = 5000;
/** No attempt lasts longer than this, whatever the endpoint does. */
export const DEADLINE_MS = CONNECT_TIMEOUT_MS + ANSWER_TIMEOUT_MS + 500;
export const USER_AGENT = "partner-gateway-webhooks/1.0";
const DNS_TTL_MS = 30_000;
const DNS_FAILURE_TTL_MS = 5_000;
const POOL_IDLE_MS = 60_000;

export interface AttemptResult {
  ok: boolean;
  httpStatus: number | null;
  /** Why the attempt failed, in words a partner reads in the attempts log. */
  error: string | null;
  durationMs: number;
}

export interface ClientOptions {
  allowPrivate: boolean;
  /** NODE_EXTRA_CA_CERTS: PEM file trusted besides the system's roots. */
  extraCaFile: string | null;
  /** Sockets per endpoint (the endpoint's concurrency limit). */
  connections: number;
  resolve?: (host: string) => Promise<string[]>;
}

const systemResolve = async (host: string) => (await dnsLookup(host, { all: true, verbatim: true })).map((a) => a.address);

/** `p`, or a rejection after `ms` or when `signal` aborts. */
function withTimeout<T>(p: Promise<T>, ms: number, signal: AbortSignal): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error("timeout")), ms);
      onAbort = () => reject(new Error("aborted"));
      signal.addEventListener("abort", onAbort, { once: true });
    }),
  ]).finally(() => {
    clearTimeout(timer);
    if (onAbort) signal.removeEventListener("abort", onAbort);
  });
}

/** A lookup that answers only the one address that passed the check. */
function pinned(address: string): LookupFunction {
  const family = isIP(address);
  return ((_host: string, opts: { all?: boolean }, cb: (...args: unknown[]) => void) => {
    if (opts?.all) cb(null, [{ address, family }]);
    else cb(null, address, family);
  }) as unknown as LookupFunction;
}

function readExtraCa(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (e) {
    throw new Error(`NODE_EXTRA_CA_CERTS=${file} cannot be read (${(e as NodeJS.ErrnoException).code ?? e})`);
  }
}

/** A failure reason a partner understands, from undici's and Node's errors. */
export function describeFailure(err: unknown): string {
  const e = err as { code?: string; name?: string; message?: string; cause?: { code?: string; message?: string } };
  const code = e.code ?? e.cause?.code;
  switch (code) {
    case "UND_ERR_CONNECT_TIMEOUT":
      return `no connection within ${CONNECT_TIMEOUT_MS / 1000} s`;
    case "UND_ERR_HEADERS_TIMEOUT":
    case "UND_ERR_BODY_TIMEOUT":
      return `no answer within ${ANSWER_TIMEOUT_MS / 1000} s`;
    case "ECONNREFUSED":
      return "connection refused";
    case "ECONNRESET":
    case "EPIPE":
    case "UND_ERR_SOCKET":
    case "UND_ERR_CLOSED":
      return "connection closed before an answer";
    case "EHOSTUNREACH":
    case "ENETUNREACH":
      return "host unreachable";
    case "ENOTFOUND":
    case "EAI_AGAIN":
      return "host does not resolve";
  }
  if (e.name === "TimeoutError" || e.name === "AbortError") return `no answer within ${ANSWER_TIMEOUT_MS / 1000} s`;
  if (typeof code === "string" && /CERT|SSL|TLS|SELF_SIGNED|UNABLE_TO|HOSTNAME|ERR_TLS/.test(code)) return `TLS: ${e.message ?? code}`;
  return (e.message ?? String(err)).slice(0, 300);
}

const HEADERS = { "content-type": "application/json", "user-agent": USER_AGENT };
/** Answer bytes read at most: past them the attempt counts by its status and the connection is dropped. */
const ANSWER_READ_MAX = 64 * 1024;

/**
 * One POST through undici's dispatcher; `status` answers the final status. A handler of our own
 * rather than `pool.request`: the answer's body is only counted and dropped, so no Readable
 * stream, async resource or extra promise is made per answer, and the handler is one object with
 * its methods on the prototype, no closures per attempt (bench/notifier's profile).
 */
class Post implements Dispatcher.DispatchHandler {
  readonly status: Promise<number>;
  private resolve!: (status: number) => void;
  private reject!: (err: unknown) => void;
  private controller: Dispatcher.DispatchController | null = null;
  private code = 0;
  private read = 0;
  private settled = false;

  constructor(
    pool: Pool,
    path: string,
    body: string,
    headers: Record<string, string>,
    private readonly signal: AbortSignal,
  ) {
    this.status = new Promise<number>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    if (signal.aborted) {
      this.settle(new Error("aborted"));
      return;
    }
    signal.addEventListener("abort", this, { once: true });
    pool.dispatch({ path, method: "POST", headers, body }, this);
  }

  /**
   * The attempt's signal aborted (the deadline, or the notifier stopping). Before the request has
   * started (its connection still being made, or queued behind busy ones) there is nothing to
   * abort yet: the attempt ends now, and onRequestStart aborts the request if it ever starts.
   */
  handleEvent(): void {
    if (this.controller) this.controller.abort(new Error("aborted"));
    else this.settle(new Error("aborted"));
  }

  private settle(err: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.signal.removeEventListener("abort", this);
    if (err === null) this.resolve(this.code);
    else this.reject(err);
  }

  onRequestStart(c: Dispatcher.DispatchController): void {
    this.controller = c;
    if (this.signal.aborted) c.abort(new Error("aborted"));
  }

  onResponseStart(_c: Dispatcher.DispatchController, statusCode: number): void {
    // 1xx (informational) answers come before the final one.
    if (statusCode >= 200) this.code = statusCode;
  }

  onResponseData(c: Dispatcher.DispatchController, chunk: Buffer): void {
    this.read += chunk.length;
    if (this.read > ANSWER_READ_MAX) {
      this.settle(null);
      c.abort(new Error("answer too long"));
    }
  }

  onResponseEnd(): void {
    this.settle(null);
  }

  onResponseError(_c: Dispatcher.DispatchController, err: Error): void {
    // Once the final status came, it stands (the body is not read for anything).
    this.settle(this.code !== 0 ? null : err);
  }
}

/** A callback URL as attempts use it: origin, host name (IPv6 without brackets), path with query. */
interface Endpoint {
  origin: string;
  host: string;
  path: string;
}

/** Where an attempt connects: the checked address, or why it does not. */
type Target = { address: string } | { error: string };

/** An attempt's result, its duration counted from `started` (performance.now()). */
function result(started: number, ok: boolean, httpStatus: number | null, error: string | null): AttemptResult {
  return { ok, httpStatus, error, durationMs: Math.round(performance.now() - started) };
}

export class CallbackClient {
  private readonly pools = new Map<string, { pool: Pool; used: number }>();
  /** Per host: where an attempt connects (or why it does not), until when. */
  private readonly dns = new Map<string, { target: Target; until: number }>();
  /** Built once: a TLS context per connection would parse every root certificate again. */
  private readonly secureContext: tls.SecureContext | undefined;
  private readonly resolve: (host: string) => Promise<string[]>;
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly opts: ClientOptions) {
    this.secureContext = opts.extraCaFile ? tls.createSecureContext({ ca: [...tls.rootCertificates, readExtraCa(opts.extraCaFile)] }) : undefined;
    this.resolve = opts.resolve ?? systemResolve;
    this.sweeper = setInterval(() => this.closeIdle(), POOL_IDLE_MS).unref();
  }

  /**
   * The checked address to connect to, or the reason there is none: answered from the cache (the
   * resolution and the address check together, so a hot endpoint costs neither per attempt), or a
   * promise when the host must be resolved.
   */
  private target(host: string, signal: AbortSignal): Target | Promise<Target> {
    const cached = this.dns.get(host);
    if (cached && cached.until > Date.now()) return cached.target;
    if (isIP(host)) return this.remember(host, [host], Number.POSITIVE_INFINITY);
    return this.lookUp(host, signal);
  }

  private async lookUp(host: string, signal: AbortSignal): Promise<Target> {
    // At most the connection's time: a resolver that hangs holds one attempt, not the lease.
    const found = await withTimeout(this.resolve(host), CONNECT_TIMEOUT_MS, signal).catch(() => null);
    if (signal.aborted) return { error: "abandoned" };
    // Failures are remembered briefly too, so a dead name costs one lookup, not one per event.
    if (!found || found.length === 0) return this.remember(host, null, DNS_FAILURE_TTL_MS);
    return this.remember(host, found, DNS_TTL_MS);
  }

  /** Caches what `host` resolved to (null: nothing) for `ttlMs`, checked, and answers it. */
  private remember(host: string, addresses: string[] | null, ttlMs: number): Target {
    let target: Target;
    if (!addresses) target = { error: `host ${host} does not resolve` };
    // The partner reads this in the attempts log: say that, never which address (an internal DNS oracle).
    else if (!this.opts.allowPrivate && addresses.some((a) => nonPublicReason(a)))
      target = { error: `refused at send time: host ${host} resolves to a non-public address` };
    else target = { address: addresses[0]! };
    if (this.dns.size > 10_000) this.dns.clear();
    this.dns.set(host, { target, until: Date.now() + ttlMs });
    return target;
  }

  private poolFor(account: string, { origin, host }: Endpoint, address: string): Pool {
    // An account's own sockets: accounts that share a host never wait in each other's queue.
    const key = `${account}|${origin}|${address}`;
    let entry = this.pools.get(key);
    if (!entry) {
      const pool = new Pool(origin, {
        connections: this.opts.connections,
        pipelining: 1,
        connect: {
          timeout: CONNECT_TIMEOUT_MS,
          lookup: pinned(address),
          ...(isIP(host) ? {} : { servername: host }),
          ...(this.secureContext ? { secureContext: this.secureContext } : {}),
        },
        headersTimeout: ANSWER_TIMEOUT_MS,
        bodyTimeout: ANSWER_TIMEOUT_MS,
        keepAliveTimeout: 4000,
      });
      this.pools.set(key, (entry = { pool, used: Date.now() }));
    }
    entry.used = Date.now();
    return entry.pool;
  }

  private readonly urls = new Map<string, Endpoint | null>();

  /** Parsed once per callback URL (a handful per replica), with what every attempt reads of it. */
  private parse(callbackUrl: string): Endpoint | null {
    let endpoint = this.urls.get(callbackUrl);
    if (endpoint === undefined) {
      try {
        const url = new URL(callbackUrl);
        const host = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
        endpoint = { origin: url.origin, host, path: url.pathname + url.search };
      } catch {
        endpoint = null;
      }
      if (this.urls.size > 10_000) this.urls.clear();
      this.urls.set(callbackUrl, endpoint);
    }
    return endpoint;
  }

  /**
   * POSTs `body` (event JSON) to `callbackUrl`; never throws. Aborting `abort` ends it early
   * (shutdown); the client aborts it itself at the overall deadline. With `signing`, the request
   * carries the Standard Webhooks headers, timestamped as it leaves (notifier.signing.ts).
   */
  async post(
    account: string,
    callbackUrl: string,
    body: string,
    abort: AbortController = new AbortController(),
    signing: Signing | null = null,
  ): Promise<AttemptResult> {
    const started = performance.now();
    const endpoint = this.parse(callbackUrl);
    if (!endpoint) return result(started, false, null, "the callback URL is not valid");
    // The deadline covers everything, the resolution included.
    let late = false;
    const deadline = setTimeout(() => {
      late = true;
      abort.abort();
    }, DEADLINE_MS);
    const { host } = endpoint;
    let t = this.target(host, abort.signal);
    if (t instanceof Promise) t = await t;
    if ("error" in t) {
      clearTimeout(deadline);
      return result(started, false, null, abort.signal.aborted && !late ? "abandoned: the notifier stopped" : t.error);
    }
    try {
      const headers = signing ? { ...HEADERS, ...signatureHeaders(signing, body) } : HEADERS;
      const s = await new Post(this.poolFor(account, endpoint, t.address), endpoint.path, body, headers, abort.signal).status;
      if (s >= 200 && s < 300) return result(started, true, s, null);
      if (s >= 300 && s < 400) return result(started, false, s, `redirect (HTTP ${s}) not followed`);
      return result(started, false, s, `HTTP ${s}`);
    } catch (err) {
      if (late) return result(started, false, null, `no answer within ${ANSWER_TIMEOUT_MS / 1000} s`);
      if (abort.signal.aborted) return result(started, false, null, "abandoned: the notifier stopped");
      return result(started, false, null, describeFailure(err));
    } finally {
      clearTimeout(deadline);
    }
  }

  private closeIdle(): void {
    const now = Date.now();
    for (const [key, e] of this.pools) {
      if (now - e.used > POOL_IDLE_MS) {
        this.pools.delete(key);
        void e.pool.close().catch(() => undefined);
      }
    }
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    const pools = [...this.pools.values()].map((e) => e.pool);
    this.pools.clear();
    await Promise.all(pools.map((p) => p.destroy().catch(() => undefined)));
  }
}
