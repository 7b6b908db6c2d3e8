/**
 * Graceful stop of a node's HTTP listeners (the partner gateway, the internal ingress, the
 * operator's listener). On SIGTERM the node first drains, then stops its broker:
 * - readiness answers 503 "stopping" at once (`draining`), so no new traffic is routed here;
 * - every listener stops accepting connections and closes its idle keep-alive connections;
 * - a request already being served is finished, and its answer carries `Connection: close` so the
 *   client does not send another on that connection;
 * - long-lived answers (the inbox's event streams) are ended by their owners' `onDrain` hooks (the
 *   client reconnects to another replica);
 * - after `timeoutMs` whatever is still open is cut.
 * One Drain per broker (`drainOf`), so that every service of a node shares it.
 */
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { ServiceBroker } from "moleculer";

export class Drain {
  private servers = new Set<Server>();
  private hooks: (() => void)[] = [];
  private open = new Set<ServerResponse>();
  private idle: (() => void)[] = [];
  private started = false;

  /** True once the node began to stop: readiness answers 503. */
  get draining(): boolean {
    return this.started;
  }

  /** Requests being served right now, on every tracked listener. */
  get inFlight(): number {
    return this.open.size;
  }

  /** Counts `server`'s requests and drains it with the rest. */
  track(server: Server): void {
    if (this.servers.has(server)) return;
    this.servers.add(server);
    // Ahead of the listener's own handler, so the header is set before anything is written. The
    // handlers already there (the listener's own) are called from the same listener: a 'request'
    // event with one listener is emitted without copying the listener list.
    const handlers = server.listeners("request") as ((req: IncomingMessage, res: ServerResponse) => void)[];
    server.removeAllListeners("request");
    server.on("request", (req: IncomingMessage, res: ServerResponse) => {
      this.open.add(res);
      if (this.started) res.shouldKeepAlive = false;
      res.on("close", this.onClose); // an answer closes once; `on` spares the once-wrapper
      for (const handler of handlers) handler.call(server, req, res);
    });
  }

  /** One handler for every answer's close (no closure per request): the answer is the emitter. */
  private readonly onClose = ((drain: Drain) =>
    function onAnswerClosed(this: ServerResponse): void {
      drain.closed(this);
    })(this);

  private closed(res: ServerResponse): void {
    this.open.delete(res);
    if (this.open.size === 0 && this.idle.length > 0) for (const wake of this.idle.splice(0)) wake();
  }

  /** Called once when draining starts (end long-lived answers here). */
  onDrain(hook: () => void): void {
    this.hooks.push(hook);
  }

  /** Stops taking requests and waits (at most `timeoutMs`) for the ones in flight; then cuts the rest. */
  async drain(timeoutMs: number): Promise<{ cut: number }> {
    if (!this.started) {
      this.started = true;
      // Answers not yet begun close their connection when done.
      for (const res of this.open) if (!res.headersSent) res.shouldKeepAlive = false;
      for (const server of this.servers) {
        // Stops accepting; Node also closes the connections idle at this moment.
        server.close();
        server.closeIdleConnections();
      }
      for (const hook of this.hooks) {
        try {
          hook();
        } catch {
          // a hook's failure must not stop the drain
        }
      }
    }
    if (this.open.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        new Promise<void>((resolve) => this.idle.push(resolve)),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, timeoutMs);
          timer.unref();
        }),
      ]);
      clearTimeout(timer);
    }
    const cut = this.open.size;
    for (const server of this.servers) server.closeAllConnections();
    return { cut };
  }
}

const drains = new WeakMap<ServiceBroker, Drain>();

/** The Drain of `broker`'s node. */
export function drainOf(broker: ServiceBroker): Drain {
  let d = drains.get(broker);
  if (!d) {
    d = new Drain();
    drains.set(broker, d);
  }
  return d;
}
