import net from "node:net";
import type { Context } from "moleculer";
import { loggerOptions } from "../../lib/observability/logger";
import { startTestApp, testConfig, type TestApp } from "../helpers/app";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";
import { capturedLogs } from "../helpers/logs";

/** Every log line the brokers of this file write, as parsed JSON. */
const { lines: logLines, stream: logStream } = capturedLogs();

/** Test-only actions: one that fails like a bug would, one that logs, one that echoes the request id. */
const probe = {
  name: "probe",
  settings: { rest: "/" },
  actions: {
    boom: {
      rest: "GET /probe/boom",
      operation: "AUTHENTICATION",
      responses: { 200: null },
      handler() {
        throw new Error('relation "secret_table" does not exist: SELECT * FROM secret_table at /srv/app/probe.ts:12');
      },
    },
    trace: {
      rest: "GET /probe/trace",
      operation: "AUTHENTICATION",
      responses: { 200: { type: "object" } },
      handler(this: { logger: { info(...a: unknown[]): void } }, ctx: Context) {
        this.logger.info("inside the probe action");
        return { requestId: ctx.requestID };
      },
    },
  },
};

let t: TestApp;
beforeAll(async () => {
  const config = testConfig({ logLevel: "info" });
  t = await startTestApp({
    config: { logLevel: "info" },
    broker: { logger: loggerOptions(config, logStream) },
    extraServices: [probe as never],
  });
});
afterAll(() => t?.stop());

describe("X-Request-Id", () => {
  it("keeps a well-formed caller id on every kind of answer", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    for (const [client, path] of [
      [a.api, "/authentication/me"],
      [t.api, "/authentication/me"],
      [t.api, "/nope"],
      [t.root, "/healthz/live"],
      [t.root, "/healthz/ready"],
      [t.root, "/metrics"],
    ] as const) {
      const res = await client.get(path, { headers: { "x-request-id": "order-4711.retry:2" } });
      expect(res.headers.get("x-request-id")).toBe("order-4711.retry:2");
    }
  });

  it("replaces a malformed caller id with a fresh one", async () => {
    for (const bad of ["has space", "x".repeat(129), "semi;colon", ""]) {
      const res = await t.api.get("/authentication/me", { headers: { "x-request-id": bad } });
      const id = res.headers.get("x-request-id");
      expect(id).toMatch(/^[0-9a-f-]{36}$/);
      expect(res.body.requestId).toBe(id);
    }
  });

  it("travels with the call into the service (ctx.requestID) and into its log lines", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    const res = await a.api.get("/probe/trace", { headers: { "x-request-id": "trace-me-42" } });
    expect(res.body).toEqual({ requestId: "trace-me-42" });
    await eventually(() => {
      const mine = logLines.filter((l) => JSON.stringify(l).includes("inside the probe action") || l.msg === "request");
      const inside = mine.find((l) => l.msg === "inside the probe action");
      expect(inside?.requestId).toBe("trace-me-42");
      const access = logLines.find((l) => l.msg === "request" && l.requestId === "trace-me-42");
      expect(access).toMatchObject({ status: 200, route: expect.stringContaining("/probe/trace") });
    });
  });
});

describe("problem bodies", () => {
  it("answers an unknown route with a 404 problem", async () => {
    expectProblem(await t.api.get("/does-not-exist"), 404);
    expectProblem(await t.root.get("/"), 404);
  });

  it("answers a known route with the wrong method with a 405 problem and Allow", async () => {
    const res = await t.api.request("PATCH", "/authentication");
    expectProblem(res, 405);
    expect(res.headers.get("allow")).toBe("GET, POST");
  });

  it("answers OPTIONS with the allowed methods", async () => {
    const res = await t.api.request("OPTIONS", "/authentication");
    expect(res.status).toBe(204);
    expect(res.headers.get("allow")).toBe("GET, POST, OPTIONS");
  });

  it("answers malformed JSON with 400, an unsupported content type with 415, a body over 1 MiB with 413", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "SMS"]);
    expectProblem(await a.api.request("POST", "/authentication", { raw: '{"operations": [', headers: { "content-type": "application/json" } }), 400);
    expectProblem(
      await a.api.request("POST", "/authentication", { raw: "operations=SMS", headers: { "content-type": "application/x-www-form-urlencoded" } }),
      415,
    );
    expectProblem(await a.api.request("POST", "/authentication", { raw: '{"operations":["SMS"]}', headers: { "content-type": "text/plain" } }), 415);
    expectProblem(
      await a.api.request("POST", "/authentication", { raw: '{"operations":["SMS"]}', headers: { "content-type": "application/json; charset=latin1" } }),
      415,
    );
    const big = JSON.stringify({ operations: ["SMS"], pad: "x".repeat(1024 * 1024) });
    expectProblem(await a.api.request("POST", "/authentication", { raw: big, headers: { "content-type": "application/json" } }), 413);
    expect((await a.api.get("/authentication")).body.total).toBe(1);
  });

  it("checks the key before reading the body: 401 comes first", async () => {
    const res = await t.api.request("POST", "/authentication", { raw: '{"operations": [', headers: { "content-type": "application/json" } });
    expectProblem(res, 401);
    const big = await t.api.request("POST", "/authentication", { raw: "x".repeat(2 * 1024 * 1024), headers: { "content-type": "text/plain" } });
    expectProblem(big, 401);
  });

  it("answers an internal failure with a bare 500: no message, stack, SQL or internal name", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    const res = await a.api.get("/probe/boom");
    expectProblem(res, 500);
    expect(res.body).toEqual({
      type: "about:blank",
      title: "Internal Server Error",
      status: 500,
      detail: "Internal Server Error",
      requestId: res.headers.get("x-request-id"),
    });
    expect(res.text).not.toMatch(/secret_table|SELECT|probe|\.ts|stack/i);
    await eventually(() => {
      const logged = logLines.find((l) => l.msg === "request failed" && l.requestId === res.headers.get("x-request-id"));
      expect(JSON.stringify(logged)).toContain("secret_table"); // the stack goes to the log instead
    });
  });

  it("answers a request Node's HTTP parser refuses (bad header bytes) with a problem", async () => {
    const raw = await new Promise<string>((resolve, reject) => {
      const s = net.connect(t.app.port!, "127.0.0.1", () => {
        s.write("GET /healthz/live HTTP/1.1\r\nHost: x\r\nX-Bad: a\u0001b\r\n\r\n");
      });
      let data = "";
      s.on("data", (d) => (data += d.toString()));
      s.on("end", () => resolve(data));
      s.on("error", reject);
    });
    expect(raw).toMatch(/^HTTP\/1\.1 400 /);
    expect(raw).toMatch(/Content-Type: application\/problem\+json/);
    expect(raw).toMatch(/X-Request-Id: [0-9a-f-]{36}/);
    const body = JSON.parse(raw.slice(raw.indexOf("\r\n\r\n") + 4));
    expect(body.status).toBe(400);
  });
});

describe("connections", () => {
  it("keeps an idle connection open 65 s, past a load balancer's 60 s, and says so in Keep-Alive", async () => {
    // Two requests on one socket, the second after a pause: the same connection answers both.
    const raw = await new Promise<string>((resolve, reject) => {
      const s = net.connect(t.app.port!, "127.0.0.1", () => s.write("GET /healthz/live HTTP/1.1\r\nHost: x\r\n\r\n"));
      let data = "";
      s.on("data", (d) => {
        data += d.toString();
        const answers = data.split("HTTP/1.1 200").length - 1;
        if (answers === 1 && data.endsWith("}")) setTimeout(() => s.write("GET /healthz/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 300);
      });
      s.on("end", () => resolve(data));
      s.on("error", reject);
    });
    expect(raw.split("HTTP/1.1 200").length - 1).toBe(2);
    expect(raw).toMatch(/Keep-Alive: timeout=65\r\n/);
  });
});

describe("health and metrics", () => {
  it("answers liveness and readiness without a key", async () => {
    const live = await t.root.get("/healthz/live");
    expect(live).toMatchObject({ status: 200, body: { status: "live" } });
    const ready = await t.root.get("/healthz/ready");
    expect(ready).toMatchObject({ status: 200, body: { status: "ready", checks: { database: "ok", routes: "ok" } } });
  });

  it("reports requests by route and status, latency, and Moleculer's own metrics", async () => {
    const a = await t.newAccount(["AUTHENTICATION"]);
    await a.api.get("/authentication/me");
    await t.api.get("/authentication/me");
    const res = await t.root.get("/metrics");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/plain/);
    expect(res.text).toMatch(/http_requests_total\{method="GET",route="\/api\/partner-gateway\/v1\/authentication\/me",status="200"\} [1-9]/);
    expect(res.text).toMatch(/http_requests_total\{method="GET",route="\/api\/partner-gateway\/v1\/authentication\/me",status="401"\} [1-9]/);
    expect(res.text).toMatch(/http_request_duration_seconds_bucket\{le="0\.05",method="GET",route="\/api\/partner-gateway\/v1\/authentication\/me"\}/);
    expect(res.text).toMatch(/moleculer_request_total\{action="auth\.verify",caller="gateway"\} [1-9]/);
    expect(res.text).toMatch(/moleculer_request_duration_seconds_bucket\{le="0\.005",action="auth\.me"\}/);
    expect(res.text).toMatch(/process_memory_heap_size_used\{[^}]*nodeID=/); // Moleculer's own registry
  });
});
