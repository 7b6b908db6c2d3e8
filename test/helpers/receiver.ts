/**
 * A real HTTPS webhook receiver for tests and benches: a local CA (made once per process, its PEM
 * written to a file to hand the notifier as NODE_EXTRA_CA_CERTS), a server certificate for the
 * receiver's address signed by it, and a server on port 8443 of 127.0.0.1 (or, when a parallel test
 * file holds that, another loopback address). What it answers is set per request by `behave`.
 */
import { writeFileSync, mkdtempSync } from "node:fs";
import https from "node:https";
import type { IncomingMessage, ServerResponse } from "node:http";
import os from "node:os";
import path from "node:path";
import { generate } from "selfsigned";

export interface Received {
  body: string;
  json: Record<string, unknown>;
  headers: IncomingMessage["headers"];
  at: number;
}

/** What to do with one request: answer with a status, redirect, never answer, or drop the connection. */
export type Behaviour = { status: number; delayMs?: number } | { redirect: string } | "hang" | "close";

export interface Receiver {
  host: string;
  port: number;
  url(pathname?: string): string;
  received: Received[];
  /** Requests seen, including those not answered 2xx. */
  seen: number;
  /** Requests answered 2xx. */
  delivered: number;
  /** TLS connections accepted. */
  connections: number;
  /** `body` is the request's body as text. */
  behave(fn: (req: IncomingMessage, n: number, body: string) => Behaviour): void;
  waitFor(n: number, timeoutMs?: number): Promise<Received[]>;
  close(): Promise<void>;
}

/** A name in the receiver's certificate that no DNS knows: only a pinned lookup reaches it. */
export const RECEIVER_NAME = "pgw-receiver.test";

let caPromise: Promise<{ key: string; cert: string; file: string }> | null = null;

/** The process's test CA; `file` holds its certificate (for NODE_EXTRA_CA_CERTS). */
export function testCa() {
  caPromise ??= (async () => {
    const now = new Date(Date.now() - 3600_000);
    const ca = await generate([{ name: "commonName", value: "pgw test CA" }], {
      keyType: "ec",
      algorithm: "sha256",
      notBeforeDate: now,
      notAfterDate: new Date(Date.now() + 7 * 86400_000),
      extensions: [
        { name: "basicConstraints", cA: true, critical: true },
        { name: "keyUsage", keyCertSign: true, cRLSign: true, critical: true },
      ],
    });
    const file = path.join(mkdtempSync(path.join(os.tmpdir(), "pgw-ca-")), "ca.pem");
    writeFileSync(file, ca.cert);
    return { key: ca.private, cert: ca.cert, file };
  })();
  return caPromise;
}

async function serverCert(host: string) {
  const ca = await testCa();
  return generate([{ name: "commonName", value: host }], {
    keyType: "ec",
    algorithm: "sha256",
    notBeforeDate: new Date(Date.now() - 3600_000),
    notAfterDate: new Date(Date.now() + 7 * 86400_000),
    ca: { key: ca.key, cert: ca.cert },
    extensions: [
      { name: "basicConstraints", cA: false },
      { name: "keyUsage", digitalSignature: true, keyEncipherment: true },
      { name: "extKeyUsage", serverAuth: true },
      {
        name: "subjectAltName",
        altNames: [
          { type: 7, ip: host },
          { type: 2, value: "localhost" },
          { type: 2, value: RECEIVER_NAME },
        ],
      },
    ],
  });
}

function listen(server: https.Server, host: string, port: number): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const onError = (e: NodeJS.ErrnoException) => (e.code === "EADDRINUSE" ? resolve(false) : reject(e));
    server.once("error", onError);
    server.listen(port, host, () => {
      server.off("error", onError);
      resolve(true);
    });
  });
}

/** A free loopback address for port 8443 (127.0.0.1 first). */
export async function startReceiver(opts: { port?: number; record?: boolean; onEvent?: (body: string, at: number) => void } = {}): Promise<Receiver> {
  const record = opts.record ?? true;
  const port = opts.port ?? 8443;
  const received: Received[] = [];
  let seen = 0;
  let delivered = 0;
  let connections = 0;
  let behaviour: (req: IncomingMessage, n: number, body: string) => Behaviour = () => ({ status: 200 });
  const waiters: { n: number; resolve: () => void }[] = [];
  const sockets = new Set<import("node:stream").Duplex>();

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const n = ++seen;
      const body = Buffer.concat(chunks).toString("utf8");
      const b = behaviour(req, n, body);
      if (b === "hang") return;
      if (b === "close") return req.socket.destroy();
      if ("redirect" in b) {
        res.writeHead(302, { location: b.redirect });
        return res.end();
      }
      const answer = () => {
        if (b.status >= 200 && b.status < 300 && !record) {
          delivered++;
          opts.onEvent?.(body, Date.now());
          for (const w of [...waiters]) if (delivered >= w.n) w.resolve();
        } else if (b.status >= 200 && b.status < 300) {
          delivered++;
          let json: Record<string, unknown> = {};
          try {
            json = JSON.parse(body);
          } catch {
            json = {};
          }
          received.push({ body, json, headers: req.headers, at: Date.now() });
          opts.onEvent?.(body, Date.now());
          for (const w of [...waiters]) if (delivered >= w.n) w.resolve();
        }
        res.writeHead(b.status, { "content-type": "text/plain" });
        res.end("ok");
      };
      if (b.delayMs) setTimeout(answer, b.delayMs);
      else answer();
    });
  };

  let host = "127.0.0.1";
  let server: https.Server | null = null;
  for (let i = 0; i < 50 && !server; i++) {
    host = i === 0 ? "127.0.0.1" : `127.0.${Math.floor(Math.random() * 250) + 1}.${Math.floor(Math.random() * 250) + 2}`;
    const cert = await serverCert(host);
    const s = https.createServer({ key: cert.private, cert: cert.cert, keepAliveTimeout: 5000 }, handle);
    if (await listen(s, host, port)) server = s;
  }
  if (!server) throw new Error("no loopback address with a free port 8443");
  server.on("secureConnection", () => connections++);
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  const srv = server;

  return {
    host,
    port,
    url: (p = "/hook") => `https://${host}:${port}${p}`,
    received,
    get seen() {
      return seen;
    },
    get delivered() {
      return delivered;
    },
    get connections() {
      return connections;
    },
    behave(fn) {
      behaviour = fn;
    },
    waitFor(n, timeoutMs = 20000) {
      if (delivered >= n) return Promise.resolve(received);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`receiver got ${delivered} of ${n} events in ${timeoutMs} ms`)), timeoutMs);
        waiters.push({
          n,
          resolve: () => {
            clearTimeout(timer);
            resolve(received);
          },
        });
      });
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise((r) => srv.close(r));
    },
  };
}
