/**
 * Webhook registration (spec parts 4, 6 and 7): one per account, the exact codes, and the callback
 * URL rules, including the address classes a host may not resolve to.
 */
import { startTestApp, type TestApp } from "../helpers/app";
import { expectProblem } from "../helpers/expect";

let strict: TestApp;
let dev: TestApp;
beforeAll(async () => {
  strict = await startTestApp({ services: ["gateway", "auth", "notifier"] });
  dev = await startTestApp({ services: ["gateway", "auth", "notifier"], config: { webhookAllowPrivateTargets: true } });
});
afterAll(async () => {
  await strict?.stop();
  await dev?.stop();
});

const PUBLIC = "https://93.184.216.34/pgw/delivery";

describe("registration", () => {
  it("answers 404 before, 201 on create, 409 on a second create (the first kept), 200 on update, 204 on delete", async () => {
    const a = await strict.newAccount(["WEBHOOKS"]);
    expectProblem(await a.api.get("/webhooks/delivery-status"), 404);
    const created = await a.api.post("/webhooks/delivery-status", { callbackUrl: PUBLIC });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({ companyId: a.companyId, callbackUrl: PUBLIC, signed: false, createdAt: expect.any(String), updatedAt: expect.any(String) });
    expect((await a.api.get("/webhooks/delivery-status")).body).toEqual(created.body);
    expectProblem(await a.api.post("/webhooks/delivery-status", { callbackUrl: "https://93.184.216.35/other" }), 409);
    expect((await a.api.get("/webhooks/delivery-status")).body.callbackUrl).toBe(PUBLIC);
    const updated = await a.api.put("/webhooks/delivery-status", { callbackUrl: "https://[2001:4860:4860::8888]:8443/hook" });
    expect(updated.status).toBe(200);
    expect(updated.body.callbackUrl).toBe("https://[2001:4860:4860::8888]:8443/hook");
    expectProblem(await a.api.put("/webhooks/delivery-status", { callbackUrl: "https://10.0.0.1/" }), 400);
    expect((await a.api.get("/webhooks/delivery-status")).body.callbackUrl).toBe("https://[2001:4860:4860::8888]:8443/hook");
    const gone = await a.api.delete("/webhooks/delivery-status");
    expect(gone.status).toBe(204);
    expect(gone.text).toBe("");
    expectProblem(await a.api.get("/webhooks/delivery-status"), 404);
    expectProblem(await a.api.put("/webhooks/delivery-status", { callbackUrl: PUBLIC }), 404);
    expectProblem(await a.api.delete("/webhooks/delivery-status"), 404);
  });

  it("keeps accounts apart and needs the WEBHOOKS operation", async () => {
    const a = await strict.newAccount(["WEBHOOKS"]);
    const b = await strict.newAccount(["WEBHOOKS"]);
    await a.api.post("/webhooks/delivery-status", { callbackUrl: PUBLIC });
    expectProblem(await b.api.get("/webhooks/delivery-status"), 404);
    expectProblem(await b.api.delete("/webhooks/delivery-status"), 404);
    expect((await b.api.post("/webhooks/delivery-status", { callbackUrl: PUBLIC })).status).toBe(201);
    const c = await strict.newAccount(["SMS"]);
    expectProblem(await c.api.get("/webhooks/delivery-status"), 401);
  });

  it("refuses a missing, empty or extra field with 400", async () => {
    const a = await strict.newAccount(["WEBHOOKS"]);
    expectProblem(await a.api.post("/webhooks/delivery-status", {}), 400);
    expectProblem(await a.api.post("/webhooks/delivery-status", { callbackUrl: "" }), 400);
    expectProblem(await a.api.post("/webhooks/delivery-status", { callbackUrl: PUBLIC, secret: "x" }), 400);
  });
});

describe("callback URL rules", () => {
  it.each([
    ["http://93.184.216.34/hook", /https/],
    ["https://93.184.216.34:8080/hook", /port 443 or 8443/],
    ["https://user:pw@93.184.216.34/hook", /credentials/],
    ["https://93.184.216.34/hook#frag", /fragment/],
    ["https://93.184.216.34/hook#", /fragment/],
    ["not a url", /absolute URL/],
    ["https://does-not-exist.invalid/hook", /does not resolve/],
    ["https://127.0.0.1/hook", /loopback/],
    ["https://[::1]/hook", /loopback/],
    ["https://10.0.0.1/hook", /private/],
    ["https://192.168.1.10/hook", /private/],
    ["https://172.16.0.1/hook", /private/],
    ["https://169.254.169.254/latest/meta-data", /link-local/],
    ["https://[::ffff:127.0.0.1]/hook", /loopback/],
    ["https://[::ffff:a00:1]/hook", /private/],
    ["https://[64:ff9b::a00:1]/hook", /private/],
    ["https://100.64.0.1/hook", /carrier-grade NAT/],
    ["https://[fc00::1]/hook", /unique-local/],
    ["https://[fe80::1]/hook", /link-local/],
    ["https://224.0.0.1/hook", /multicast/],
    ["https://0.0.0.0/hook", /unspecified/],
    ["https://192.0.2.1/hook", /reserved/],
    ["https://localhost/hook", /^host localhost resolves to a non-public address; only publicly reachable addresses may receive callbacks$/],
    ["https://2130706433/hook", /loopback/], // 127.0.0.1 written as one number
  ])("refuses %s with 400", async (callbackUrl, why) => {
    const a = await strict.newAccount(["WEBHOOKS"]);
    const res = await a.api.post("/webhooks/delivery-status", { callbackUrl });
    expectProblem(res, 400);
    expect(res.body.errors).toEqual([{ path: "callbackUrl", message: expect.stringMatching(why) }]);
    expectProblem(await a.api.get("/webhooks/delivery-status"), 404);
  });

  it("refuses a name resolving to a private address with 400 without naming the address (no DNS oracle)", async () => {
    const a = await strict.newAccount(["WEBHOOKS"]);
    const res = await a.api.post("/webhooks/delivery-status", { callbackUrl: "https://localhost/hook" });
    expectProblem(res, 400);
    const body = JSON.stringify(res.body);
    expect(body).toContain("resolves to a non-public address");
    for (const leaked of ["127.0.0.1", "::1", "loopback"]) expect(body).not.toContain(leaked);
  });

  it("accepts public addresses on 443 and 8443, IPv4 and IPv6", async () => {
    for (const callbackUrl of [
      "https://93.184.216.34/hook",
      "https://93.184.216.34:8443/hook",
      "https://93.184.216.34:443/hook",
      "https://[2001:4860:4860::8888]/hook",
      "https://[::ffff:5db8:d822]/hook",
    ]) {
      const a = await strict.newAccount(["WEBHOOKS"]);
      expect({ callbackUrl, status: (await a.api.post("/webhooks/delivery-status", { callbackUrl })).status }).toEqual({ callbackUrl, status: 201 });
    }
  });

  it("with WEBHOOK_ALLOW_PRIVATE_TARGETS relaxes only the address rule", async () => {
    const a = await dev.newAccount(["WEBHOOKS"]);
    expect((await a.api.post("/webhooks/delivery-status", { callbackUrl: "https://localhost:8443/hook" })).status).toBe(201);
    expect((await a.api.put("/webhooks/delivery-status", { callbackUrl: "https://127.0.0.1/hook" })).status).toBe(200);
    for (const bad of [
      "https://does-not-exist.invalid/hook",
      "http://localhost/hook",
      "https://localhost:8080/hook",
      "https://u:p@localhost/hook",
      "https://localhost/#x",
    ]) {
      expectProblem(await a.api.put("/webhooks/delivery-status", { callbackUrl: bad }), 400);
    }
    expect((await a.api.get("/webhooks/delivery-status")).body.callbackUrl).toBe("https://127.0.0.1/hook");
  });
});
