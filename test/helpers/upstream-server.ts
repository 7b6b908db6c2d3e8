/**
 * A local HTTP upstream (UPSTREAM_MODE=http) that counts what it received: every request with its
 * Idempotency-Key, in order, before any deduplication, so a test sees each hand-over of a message,
 * a repeat included. `hold()` stops answering (requests wait, as at a slow carrier) until `release()`.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface UpstreamServer {
  base: string;
  /** Every request received: its Idempotency-Key, the body's destination, when. */
  received: Array<{ key: string; destination: string; at: number }>;
  /** Requests received per Idempotency-Key. */
  perKey(prefix?: string): Map<string, number>;
  /** Requests waiting for an answer (while held). */
  waiting(): number;
  hold(): void;
  release(): void;
  close(): Promise<void>;
}

export async function startUpstreamServer(): Promise<UpstreamServer> {
  const received: UpstreamServer["received"] = [];
  let held = false;
  const waiting = new Set<ServerResponse>();
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let s = "";
    req.on("data", (c) => (s += c));
    req.on("end", () => {
      const body = JSON.parse(s || "{}") as { destination?: string };
      received.push({ key: String(req.headers["idempotency-key"] ?? ""), destination: String(body.destination ?? ""), at: Date.now() });
      if (!held) return void res.writeHead(202).end();
      waiting.add(res);
      res.on("close", () => waiting.delete(res));
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received,
    perKey(prefix = "") {
      const m = new Map<string, number>();
      for (const r of received) if (r.key.startsWith(prefix)) m.set(r.key, (m.get(r.key) ?? 0) + 1);
      return m;
    },
    waiting: () => waiting.size,
    hold() {
      held = true;
    },
    release() {
      held = false;
      for (const res of waiting) if (!res.writableEnded && !res.destroyed) res.writeHead(202).end();
      waiting.clear();
    },
    async close() {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}
