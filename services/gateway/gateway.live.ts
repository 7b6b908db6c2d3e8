/**
 * The inbox's live view on a gateway: Server-Sent Events streams held open here, fed from the
 * database (`inbox_events`) through `inbox.eventsSince`, never from memory alone, so a stream resumed
 * with Last-Event-ID, or one whose client was slow, catches up with what was written meanwhile.
 *
 * - Wake-ups: the `inbox.eventsWritten` broadcast (any node's writer, after its commit) names the
 *   accounts; each account with streams here has one feed that reads the account's new events once
 *   (one call in flight, wake-ups meanwhile folded into one more read) and hands them to its streams.
 *   A slow safety poll reads every feed too, for a broadcast lost on the way.
 * - A stream behind the feed (resumed with an older id, or back from a full socket) reads for itself
 *   (its conversation only, page by page) until it reaches the feed.
 * - Slow clients: when `res.write` answers false the stream leaves the feed and nothing more is read
 *   for it until 'drain'; then it catches up from the database. The gateway holds at most one page
 *   per stream beyond the socket's buffer, whatever the client does.
 * - Heartbeats: a comment line every SSE_HEARTBEAT_MS, so proxies keep idle streams.
 * - Limits: SSE_MAX_STREAMS per gateway (503), SSE_MAX_STREAMS_PER_ACCOUNT per account here (429),
 *   reserved before the stream's action runs.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Service, ServiceBroker } from "moleculer";
import { Counter, Gauge, Registry } from "prom-client";
import { ApiError } from "../../lib/errors";
import { callInbox, type EventsSinceIn, type EventsSinceOut, type EventStreamStart, type LiveEvent } from "../inbox/inbox.contract";

/** How often every feed reads even without a wake-up (a broadcast lost on the way). */
export const SAFETY_POLL_MS = 5000;
/** Events per read: one page, about 256 KiB of data at most (inbox.eventsSince). */
const PAGE = 200;
/** How long a closing gateway lets a stream's last bytes go before it cuts the connection. */
const CLOSE_GRACE_MS = 1000;

export const isEventStreamStart = (x: unknown): x is EventStreamStart =>
  typeof x === "object" && x !== null && typeof (x as EventStreamStart).$eventStream?.companyId === "string";

/** The live view's metrics on this gateway. */
export class LiveMetrics {
  readonly registry = new Registry();
  readonly open = new Gauge({
    name: "sse_streams_open",
    help: "Server-Sent Events streams open on this gateway, by scope (account: GET /inbox/events; conversation: one chat's)",
    labelNames: ["scope"] as const,
    registers: [this.registry],
  });
  readonly streamed = new Counter({
    name: "sse_events_streamed_total",
    help: "Inbox events written to live streams by this gateway, by event type",
    labelNames: ["type"] as const,
    registers: [this.registry],
  });
  readonly refused = new Counter({
    name: "sse_streams_refused_total",
    help: "Streams this gateway refused at their limits, by reason (gateway: SSE_MAX_STREAMS, 503; account: SSE_MAX_STREAMS_PER_ACCOUNT, 429)",
    labelNames: ["reason"] as const,
    registers: [this.registry],
  });
  private readonly byType = new Map<string, { inc(n?: number): void }>();
  /** The streamed counter of one event type (label child resolved once). */
  streamedOf(type: string): { inc(n?: number): void } {
    let c = this.byType.get(type);
    if (!c) this.byType.set(type, (c = this.streamed.labels(type)));
    return c;
  }
  readonly reads = new Counter({
    name: "sse_event_reads_total",
    help: "Reads of inbox events by this gateway (feed: an account's new events for its live streams; catch-up: one stream behind)",
    labelNames: ["kind"] as const,
    registers: [this.registry],
  });
}

interface Stream {
  companyId: string;
  chatId: string | null;
  /** The key the stream was opened with: its deletion ends the stream. */
  keyId: string;
  /** Every event of the account up to here was written to this stream (or was not its conversation's). */
  after: number;
  res: ServerResponse;
  /** The socket is full: nothing is read for this stream until 'drain'. */
  blocked: boolean;
  catchingUp: boolean;
  closed: boolean;
  requestId: string;
  openedAt: number;
  events: number;
}

interface Feed {
  companyId: string;
  /** Every event of the account up to here was read by the feed. */
  cursor: number;
  streams: Set<Stream>;
  pulling: boolean;
  again: boolean;
}

export interface LiveOptions {
  heartbeatMs: number;
  maxStreams: number;
  maxStreamsPerAccount: number;
  /** Timeout of each read (REQUEST_TIMEOUT_MS). */
  callTimeoutMs: number;
}

export class LiveStreams {
  private readonly feeds = new Map<string, Feed>();
  /** Open or reserved streams, in all and per account. */
  private total = 0;
  private readonly perAccount = new Map<string, number>();
  private readonly timers: NodeJS.Timeout[] = [];
  private closing = false;

  constructor(
    private readonly broker: ServiceBroker,
    private readonly logger: Service["logger"],
    private readonly o: LiveOptions,
    readonly metrics: LiveMetrics,
  ) {}

  /** Starts the heartbeat and the safety poll. */
  start(): void {
    const heartbeat = setInterval(() => this.heartbeat(), this.o.heartbeatMs);
    const poll = setInterval(() => {
      for (const feed of this.feeds.values()) void this.pullFeed(feed);
    }, SAFETY_POLL_MS);
    heartbeat.unref();
    poll.unref();
    this.timers.push(heartbeat, poll);
  }

  /** Streams open (or being opened) on this gateway. */
  get size(): number {
    return this.total;
  }

  /** The most bytes any stream here has waiting in its response buffer (the socket's not counted). */
  pendingBytes(): number {
    let most = 0;
    for (const feed of this.feeds.values()) for (const s of feed.streams) most = Math.max(most, s.res.writableLength);
    return most;
  }

  /** A place for one more stream of `companyId`, taken before its action runs; answers its release (idempotent). Throws 503 or 429 past the limits. */
  reserve(companyId: string): () => void {
    if (this.closing || this.total >= this.o.maxStreams) {
      this.metrics.refused.labels("gateway").inc();
      throw new ApiError("SERVICE_UNAVAILABLE", "This gateway holds as many event streams as it may; retry shortly (another replica may take it).", {
        retryAfter: 5,
      });
    }
    const mine = this.perAccount.get(companyId) ?? 0;
    if (mine >= this.o.maxStreamsPerAccount) {
      this.metrics.refused.labels("account").inc();
      throw new ApiError("STREAM_LIMIT_REACHED", `This account holds ${mine} open event streams on this gateway, as many as it may; close one first.`, {
        retryAfter: 5,
      });
    }
    this.total++;
    this.perAccount.set(companyId, mine + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.total--;
      const left = (this.perAccount.get(companyId) ?? 1) - 1;
      if (left > 0) this.perAccount.set(companyId, left);
      else this.perAccount.delete(companyId);
    };
  }

  /** Starts the stream on `res` (headers now, events from `start.after`), holding the place `release` frees when it closes. */
  open(req: IncomingMessage & { $requestId?: string }, res: ServerResponse, start: EventStreamStart["$eventStream"], keyId: string, release: () => void): void {
    res.writeHead(200, {
      "Content-Type": "text/event-stream; charset=utf-8",
      "Cache-Control": "no-cache",
      "X-Accel-Buffering": "no",
      Connection: "keep-alive",
    });
    req.socket.setTimeout(0);
    req.socket.setNoDelay(true);
    // The reconnection delay EventSource clients wait, and a first line: the stream is open.
    res.write(`retry: 3000\n: open\n\n`);
    const s: Stream = {
      companyId: start.companyId,
      chatId: start.chatId,
      keyId,
      after: start.after,
      res,
      blocked: false,
      catchingUp: false,
      closed: false,
      requestId: req.$requestId ?? "",
      openedAt: performance.now(),
      events: 0,
    };
    let feed = this.feeds.get(s.companyId);
    if (!feed) this.feeds.set(s.companyId, (feed = { companyId: s.companyId, cursor: start.head, streams: new Set(), pulling: false, again: false }));
    feed.streams.add(s);
    this.metrics.open.labels(s.chatId ? "conversation" : "account").inc();
    res.on("error", (err) => this.logger.debug({ err }, "event stream write failed (the client left)"));
    res.once("close", () => {
      this.remove(s);
      release();
    });
    if (s.after < feed.cursor) void this.catchUp(s);
  }

  /** The `inbox.eventsWritten` broadcast: the feeds of these accounts read their new events. */
  wake(companyIds: readonly string[]): void {
    for (const id of companyIds) {
      const feed = this.feeds.get(id);
      if (feed) void this.pullFeed(feed);
    }
  }

  /**
   * Ends the streams opened with a key that was just deleted (`auth.keyDeleted`): a key checked only
   * when its stream opened must not keep reading the account's inbox for hours after. The client's
   * reconnection is then refused with 401 like any request with that key. Answers how many ended.
   */
  endKey(keyId: string): number {
    let n = 0;
    for (const feed of this.feeds.values()) {
      for (const s of feed.streams) {
        if (s.keyId !== keyId || s.closed) continue;
        n++;
        s.res.end();
        setTimeout(() => s.res.destroy(), CLOSE_GRACE_MS).unref();
      }
    }
    if (n > 0) this.logger.info({ keyId, streams: n }, "event streams of a deleted key ended");
    return n;
  }

  /** Ends every stream (the gateway stops): clients reconnect elsewhere with their Last-Event-ID. */
  closeAll(): void {
    this.closing = true;
    for (const t of this.timers) clearInterval(t);
    for (const feed of this.feeds.values()) {
      for (const s of feed.streams) {
        s.res.end();
        setTimeout(() => s.res.destroy(), CLOSE_GRACE_MS).unref();
      }
    }
  }

  private remove(s: Stream): void {
    if (s.closed) return;
    s.closed = true;
    const feed = this.feeds.get(s.companyId);
    feed?.streams.delete(s);
    if (feed && feed.streams.size === 0) this.feeds.delete(s.companyId);
    this.metrics.open.labels(s.chatId ? "conversation" : "account").dec();
    this.logger.info(
      { requestId: s.requestId, companyId: s.companyId, chatId: s.chatId, events: s.events, seconds: Math.round(performance.now() - s.openedAt) / 1000 },
      "event stream closed",
    );
  }

  private read(kind: "feed" | "catch-up", companyId: string, chatId: string | null, after: number): Promise<EventsSinceOut> {
    this.metrics.reads.labels(kind).inc();
    const params: EventsSinceIn = { after, limit: PAGE, ...(chatId ? { chatId } : {}) };
    return callInbox(this.broker, "inbox.eventsSince", params, { meta: { companyId }, timeout: this.o.callTimeoutMs });
  }

  /** Reads the account's new events once (again while wake-ups came meanwhile or pages remain) and hands them to its streams. */
  private async pullFeed(feed: Feed): Promise<void> {
    if (feed.pulling) {
      feed.again = true;
      return;
    }
    feed.pulling = true;
    try {
      do {
        feed.again = false;
        if (feed.streams.size === 0) break;
        const from = feed.cursor;
        const page = await this.read("feed", feed.companyId, null, from);
        for (const s of feed.streams) {
          // Streams behind the feed, blocked or reading for themselves are not fed (they catch up below).
          if (s.closed || s.blocked || s.catchingUp || s.after < from) continue;
          this.deliver(s, page.events, page.next);
        }
        feed.cursor = Math.max(feed.cursor, page.next);
        if (page.more) feed.again = true;
        for (const s of feed.streams) if (!s.blocked && !s.catchingUp && s.after < feed.cursor) void this.catchUp(s);
      } while (feed.again);
    } catch (err) {
      this.readFailed(err, feed.companyId);
    } finally {
      feed.pulling = false;
    }
  }

  /** A stream behind its feed reads for itself (its conversation only) until it has reached the feed. */
  private async catchUp(s: Stream): Promise<void> {
    if (s.catchingUp || s.blocked || s.closed) return;
    s.catchingUp = true;
    try {
      for (;;) {
        // Everything up to the feed's cursor was committed before this read starts: a last page reaches it.
        const target = this.feeds.get(s.companyId)?.cursor ?? 0;
        const page = await this.read("catch-up", s.companyId, s.chatId, s.after);
        if (s.closed) return;
        this.deliver(s, page.events, page.next);
        if (s.blocked) return;
        if (!page.more) s.after = Math.max(s.after, target);
        const feed = this.feeds.get(s.companyId);
        if (!page.more && (!feed || s.after >= feed.cursor)) return;
      }
    } catch (err) {
      this.readFailed(err, s.companyId);
    } finally {
      s.catchingUp = false;
    }
  }

  /**
   * Writes the page's events the stream has not had, in one write (a page is at most about 256 KiB);
   * when the socket is then full the stream waits for 'drain' and reads nothing more until then.
   */
  private deliver(s: Stream, events: readonly LiveEvent[], next: number): void {
    if (s.closed) return;
    let chunk = "";
    let last = s.after;
    for (const e of events) {
      if (e.id <= s.after) continue;
      if (s.chatId !== null && e.chatId !== s.chatId) continue;
      chunk += `id: ${e.id}\nevent: ${e.type}\ndata: ${e.data}\n\n`;
      last = e.id;
      s.events++;
      this.metrics.streamedOf(e.type).inc();
    }
    const room = chunk === "" || this.write(s, chunk);
    s.after = room ? Math.max(last, next) : last;
  }

  /** One write; false when the socket is full (the stream then waits for 'drain', and catches up after it). */
  private write(s: Stream, chunk: string): boolean {
    if (s.closed || s.res.destroyed) return false; // gone: 'close' removes it
    if (s.res.write(chunk)) return true;
    s.blocked = true;
    s.res.once("drain", () => {
      s.blocked = false;
      void this.catchUp(s);
    });
    return false;
  }

  private lastFailureLog = 0;
  private failuresNotLogged = 0;
  /** A failed read (the inbox away, say), logged at most every 10 s: wake-ups come hundreds a second. */
  private readFailed(err: unknown, companyId: string): void {
    const now = Date.now();
    if (now - this.lastFailureLog < 10_000) {
      this.failuresNotLogged++;
      return;
    }
    this.logger.warn({ err, companyId, alsoFailed: this.failuresNotLogged }, "could not read inbox events for live streams (the safety poll tries again)");
    this.lastFailureLog = now;
    this.failuresNotLogged = 0;
  }

  private heartbeat(): void {
    for (const feed of this.feeds.values()) for (const s of feed.streams) if (!s.blocked && !s.closed) this.write(s, ": heartbeat\n\n");
  }
}
