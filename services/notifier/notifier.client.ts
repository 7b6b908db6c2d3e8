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
import { Pool } from "undici";
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

export class CallbackClient {
  private readonly pools = new Map<string, { pool: Pool; used: number }>();
  private readonly dns = new Map<string, { addresses: string[] | null; until: number }>();
  /** Built once: a TLS context per connection would parse every root certificate again. */
  private readonly secureContext: tls.SecureContext | undefined;
  private readonly resolve: (host: string) => Promise<string[]>;
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly opts: ClientOptions) {
    this.secureContext = opts.extraCaFile ? tls.createSecureContext({ ca: [...tls.rootCertificates, readExtraCa(opts.extraCaFile)] }) : undefined;
    this.resolve = opts.resolve ?? systemResolve;
    this.sweeper = setInterval(() => this.closeIdle(), POOL_IDLE_MS).unref();
  }

  /** The checked address to connect to, or the reason there is none. */
  private async target(host: string, signal: AbortSignal): Promise<{ address: string } | { error: string }> {
    let addresses: string[];
    if (isIP(host)) addresses = [host];
    else {
      const cached = this.dns.get(host);
      if (cached && cached.until > Date.now()) {
        if (!cached.addresses) return { error: `host ${host} does not resolve` };
        addresses = cached.addresses;
      } else {
        // At most the connection's time: a resolver that hangs holds one attempt, not the lease.
        const found = await withTimeout(this.resolve(host), CONNECT_TIMEOUT_MS, signal).catch(() => null);
        if (signal.aborted) return { error: "abandoned" };
        if (this.dns.size > 10_000) this.dns.clear();
        if (!found || found.length === 0) {
          // Failures are remembered briefly too, so a dead name costs one lookup, not one per event.
          this.dns.set(host, { addresses: null, until: Date.now() + DNS_FAILURE_TTL_MS });
          return { error: `host ${host} does not resolve` };
        }
        addresses = found;
        this.dns.set(host, { addresses, until: Date.now() + DNS_TTL_MS });
      }
    }
    if (!this.opts.allowPrivate) {
      // The partner reads this in the attempts log: say that, never which address (an internal DNS oracle).
      if (addresses.some((a) => nonPublicReason(a))) return { error: `refused at send time: host ${host} resolves to a non-public address` };
    }
    return { address: addresses[0]! };
  }

  private poolFor(account: string, url: URL, host: string, address: string): Pool {
    // An account's own sockets: accounts that share a host never wait in each other's queue.
    const key = `${account}|${url.origin}|${address}`;
    let entry = this.pools.get(key);
    if (!entry) {
      const pool = new Pool(url.origin, {
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

  private readonly urls = new Map<string, URL | null>();

  /** Parsed once per callback URL (a handful per replica). */
  private parse(callbackUrl: string): URL | null {
    let url = this.urls.get(callbackUrl);
    if (url === undefined) {
      try {
        url = new URL(callbackUrl);
      } catch {
        url = null;
      }
      if (this.urls.size > 10_000) this.urls.clear();
      this.urls.set(callbackUrl, url);
    }
    return url;
  }

  /**
   * POSTs `body` (event JSON) to `callbackUrl`; never throws. Aborting `abort` ends it early
   * (shutdown); the client aborts it itself at the overall deadline.
   */
  async post(account: string, callbackUrl: string, body: string, abort: AbortController = new AbortController()): Promise<AttemptResult> {
    const started = performance.now();
    const done = (ok: boolean, httpStatus: number | null, error: string | null): AttemptResult => ({
      ok,
      httpStatus,
      error,
      durationMs: Math.round(performance.now() - started),
    });
    const url = this.parse(callbackUrl);
    if (!url) return done(false, null, "the callback URL is not valid");
    // The deadline covers everything, the resolution included.
    let late = false;
    const deadline = setTimeout(() => {
      late = true;
      abort.abort();
    }, DEADLINE_MS);
    const host = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
    const t = await this.target(host, abort.signal);
    if ("error" in t) {
      clearTimeout(deadline);
      return done(false, null, abort.signal.aborted && !late ? "abandoned: the notifier stopped" : t.error);
    }
    try {
      const res = await this.poolFor(account, url, host, t.address).request({
        path: url.pathname + url.search,
        method: "POST",
        headers: { "content-type": "application/json", "user-agent": USER_AGENT },
        body,
        signal: abort.signal,
      });
      await res.body.dump({ limit: 64 * 1024 }).catch(() => undefined);
      const s = res.statusCode;
      if (s >= 200 && s < 300) return done(true, s, null);
      if (s >= 300 && s < 400) return done(false, s, `redirect (HTTP ${s}) not followed`);
      return done(false, s, `HTTP ${s}`);
    } catch (err) {
      if (late) return done(false, null, `no answer within ${ANSWER_TIMEOUT_MS / 1000} s`);
      if (abort.signal.aborted) return done(false, null, "abandoned: the notifier stopped");
      return done(false, null, describeFailure(err));
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
