/**
 * The callback client against a real HTTPS receiver: the address rule applied again where the
 * connection is made, the connection pinned to the checked address (the HTTP stack never resolves
 * the name itself), TLS verified against the host name with the local CA.
 */
import { CallbackClient } from "../../services/notifier/notifier.client";
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
});
