/**
 * The callback client against a real HTTPS receiver: the address rule applied again where the
 * connection is made, the connection pinned to the checked address (the HTTP stack never resolves
 * the name itself), TLS verified against the host name with the local CA.
 */
import { once } from "node:events";
import http from "node:http";
import net, { type AddressInfo } from "node:net";
import { CallbackClient } from "../../services/notifier/notifier.client";
import { eventually } from "../helpers/eventually";
import { RECEIVER_NAME, startReceiver, testCa, type Receiver } from "../helpers/receiver";

let r: Receiver;
const clients: CallbackClient[] = [];
beforeAll(async () => {
  r = await startReceiver();
});
afterAll(async () => {
  for (const c of clients) await c.close();
  await r.close();
});

async function client(allowPrivate: boolean, resolve?: (host: string) => Promise<string[]>, ca = true) {
  const c = new CallbackClient({ allowPrivate, extraCaFile: ca ? (await testCa()).file : null, connections: 2, resolve });
  clients.push(c);
  return c;
}

describe("callback client", () => {
  it("refuses at send time a host that resolves to a non-public address, making no request", async () => {
    const c = await client(false);
    const before = r.seen;
    const res = await c.post("acme", r.url(), "{}");
    expect(res).toMatchObject({ ok: false, httpStatus: null, error: expect.stringMatching(/refused at send time: host .* resolves to a non-public address$/) });
    // A name that a later lookup (rebinding) points at a private address is refused the same way.
    const rebound = await client(false, async () => ["10.1.2.3"]);
    expect((await rebound.post("acme", "https://hooks.example.test:8443/x", "{}")).error).toBe(
      "refused at send time: host hooks.example.test resolves to a non-public address",
    );
    expect(r.seen).toBe(before);
  });

  it("connects to the address it checked, with TLS verified against the host name", async () => {
    const asked: string[] = [];
    // The name is in the receiver's certificate but in no DNS: only the pinned address reaches it.
    const c = await client(true, async (host) => {
      asked.push(host);
      return [r.host];
    });
    const res = await c.post("acme", `https://${RECEIVER_NAME}:${r.port}/pinned`, '{"a":1}');
    expect(res).toMatchObject({ ok: true, httpStatus: 200, error: null });
    expect(asked).toEqual([RECEIVER_NAME]);
    expect(r.received.at(-1)!.body).toBe('{"a":1}');
  });

  it("gives a resolver that hangs the connection's 3 s, and remembers the failure briefly", async () => {
    let asked = 0;
    const c = await client(false, () => {
      asked++;
      return new Promise<string[]>(() => undefined);
    });
    const res = await c.post("acme", "https://hangs.example.test/hook", "{}");
    expect(res).toMatchObject({ ok: false, httpStatus: null, error: "host hangs.example.test does not resolve" });
    // The connection's 3 s: never sooner; later only by what a busy machine adds.
    expect(res.durationMs).toBeGreaterThanOrEqual(2900);
    expect(res.durationMs).toBeLessThan(10_000);
    const again = await c.post("acme", "https://hangs.example.test/hook", "{}");
    expect(again.error).toMatch(/does not resolve/);
    // Remembered: the resolver was not asked again, and the answer did not wait another 3 s.
    expect(asked).toBe(1);
    expect(again.durationMs).toBeLessThan(2900);
  });

  it("fails the TLS check without the local CA", async () => {
    const c = await client(true, undefined, false);
    const res = await c.post("acme", r.url(), "{}");
    expect(res.ok).toBe(false);
    expect(res.error).toMatch(/^TLS: /);
  });

  it("counts an attempt by its final status: the answer's body is dropped unread past 64 KiB, and a connection lost after the status keeps it", async () => {
    const big = Buffer.alloc(1024 * 1024, "x");
    const server = http.createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        switch (req.url) {
          case "/big":
            res.writeHead(200, { "content-type": "text/plain", "content-length": big.length });
            res.end(big);
            return;
          case "/empty":
            res.writeHead(204).end();
            return;
          case "/cut":
            // The status and part of a body, then the connection is gone.
            res.writeHead(200, { "content-length": 1000 });
            res.write("partial", () => res.destroy());
            return;
          case "/unavailable":
            res.writeHead(503).end("later");
            return;
          case "/moved":
            res.writeHead(302, { location: "https://elsewhere.example/" }).end();
            return;
          case "/drop":
            req.socket.destroy();
            return;
        }
      });
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const c = await client(true);
      expect(await c.post("acme", `${base}/big`, "{}")).toMatchObject({ ok: true, httpStatus: 200, error: null });
      expect(await c.post("acme", `${base}/empty`, "{}")).toMatchObject({ ok: true, httpStatus: 204, error: null });
      expect(await c.post("acme", `${base}/cut`, "{}")).toMatchObject({ ok: true, httpStatus: 200, error: null });
      expect(await c.post("acme", `${base}/unavailable`, "{}")).toMatchObject({ ok: false, httpStatus: 503, error: "HTTP 503" });
      expect(await c.post("acme", `${base}/moved`, "{}")).toMatchObject({ ok: false, httpStatus: 302, error: "redirect (HTTP 302) not followed" });
      expect(await c.post("acme", `${base}/drop`, "{}")).toMatchObject({ ok: false, httpStatus: null, error: "connection closed before an answer" });
      // The client goes on over the same pool after each of those.
      expect(await c.post("acme", `${base}/empty`, "{}")).toMatchObject({ ok: true, httpStatus: 204 });
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it("ends an attempt its caller aborts, before or during the request", async () => {
    let received = 0;
    const server = http.createServer(() => void received++); // never answers
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hang`;
    try {
      const c = await client(true);
      const early = new AbortController();
      early.abort();
      expect(await c.post("acme", url, "{}", early)).toMatchObject({ ok: false, error: "abandoned: the notifier stopped" });
      const late = new AbortController();
      const pending = c.post("acme", url, "{}", late);
      await eventually(() => expect(received).toBe(1)); // the request is at the server: aborted during it
      late.abort();
      const res = await pending;
      expect(res).toMatchObject({ ok: false, httpStatus: null, error: "abandoned: the notifier stopped" });
      expect(res.durationMs).toBeLessThan(2000);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it("ends an attempt aborted while its connection is still being made, or queued behind busy ones", async () => {
    // Takes TCP connections and never speaks: the TLS handshake (part of connecting) never ends.
    const sockets = new Set<net.Socket>();
    const silent = net.createServer((s) => sockets.add(s));
    silent.listen(0, "127.0.0.1");
    await once(silent, "listening");
    const url = `https://127.0.0.1:${(silent.address() as AddressInfo).port}/silent`;
    try {
      const c = await client(true); // 2 connections: the third attempt waits for one of them
      const aborts = [new AbortController(), new AbortController(), new AbortController()];
      const pending = aborts.map((a) => c.post("acme", url, "{}", a));
      await new Promise((r) => setTimeout(r, 200));
      for (const a of aborts) a.abort();
      for (const res of await Promise.all(pending)) {
        expect(res).toMatchObject({ ok: false, httpStatus: null, error: "abandoned: the notifier stopped" });
        expect(res.durationMs).toBeLessThan(1000); // not the 3 s a connection may take
      }
    } finally {
      for (const s of sockets) s.destroy();
      silent.close();
    }
  });
});
