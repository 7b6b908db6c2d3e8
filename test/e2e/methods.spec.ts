/**
 * Methods and sizes (issue 30, contract section 9): every path of the API answers a method it does
 * not have with a 405 listing exactly its own methods, even where a sibling path with a parameter
 * would match (`DELETE /authentication/me` is not a key whose id is "me"); the paths are taken from
 * the API's route table, not from a hand list. A query parameter with an empty name is a 400; bulk
 * ids go in a JSON body; a request head past the limit is a 431 problem, logged like any answer.
 */
import { randomUUID } from "node:crypto";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { API_ROUTES } from "../../lib/http/api-routes";
import { ALL_SERVICES } from "../../lib/config";
import { loggerOptions } from "../../lib/observability/logger";
import { MAX_REQUEST_HEAD } from "../../services/gateway/gateway.service";
import { startTestApp, testConfig, type TestApp } from "../helpers/app";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";
import { capturedLogs } from "../helpers/logs";

const { lines: logLines, stream: logStream } = capturedLogs();

let t: TestApp;
beforeAll(async () => {
  const config = testConfig({ logLevel: "info" });
  // Hundreds of requests from one address in a few seconds: past the default rate, which is not what this file is about.
  t = await startTestApp({ services: ALL_SERVICES, config: { logLevel: "info", rateLimitRps: 10_000 }, broker: { logger: loggerOptions(config, logStream) } });
});
afterAll(() => t?.stop());

const ORDER = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];
/** Methods tried on every path (HEAD answers carry no body to check). */
const TRIED = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/** Every path of the route table with its methods, in the Allow order. */
const PATHS = (() => {
  const byPath = new Map<string, string[]>();
  for (const [method, p] of API_ROUTES) byPath.set(p, [...(byPath.get(p) ?? []), method]);
  return [...byPath].map(([template, methods]) => ({ template, methods: methods.sort((a, b) => ORDER.indexOf(a) - ORDER.indexOf(b)) }));
})();

const isParam = (seg: string) => /^\{[^}]+\}$/.test(seg);
/** A URL of a template: each parameter a value no literal segment of the API has. */
const urlOf = (template: string) => template.replace(/\{[^}]+\}/g, "1");
/** Whether `sibling` (with a parameter where `fixed` has a literal) matches every URL of `fixed`. */
function shadows(sibling: string, fixed: string): boolean {
  const a = sibling.split("/");
  const b = fixed.split("/");
  return a.length === b.length && a.some((s, i) => isParam(s) && !isParam(b[i]!)) && a.every((s, i) => s === b[i] || isParam(s));
}

/** The fixed paths a sibling with a parameter would also match, with the methods only that sibling has. */
const SHADOWED = PATHS.flatMap(({ template, methods }) => {
  const foreign = new Set(PATHS.filter((s) => shadows(s.template, template)).flatMap((s) => s.methods.filter((m) => !methods.includes(m))));
  return foreign.size ? [{ template, methods, foreign: [...foreign] }] : [];
});

describe("a known path with a method it does not have", () => {
  it.each(SHADOWED.map((s) => [s.template, s.methods.join(", "), s.foreign] as const))(
    "answers %s (%s) with 405 for the methods of its sibling with a parameter",
    async (template, allow, foreign) => {
      const a = await t.newAccount("ALL");
      for (const method of foreign) {
        const res = await a.api.request(method, template, method === "GET" || method === "DELETE" ? {} : { body: {} });
        expect({ method, status: res.status }).toEqual({ method, status: 405 });
        expectProblem(res, 405);
        expect({ method, allow: res.headers.get("allow") }).toEqual({ method, allow });
      }
    },
  );

  it.each(PATHS.map((p) => [p.template, p.methods.join(", ")] as const))(
    "answers %s (%s) with 405 and exactly its methods in Allow",
    async (template, allow) => {
      const url = urlOf(template);
      for (const method of TRIED.filter((m) => !allow.split(", ").includes(m))) {
        const res = await t.api.request(method, url);
        expect({ method, status: res.status, allow: res.headers.get("allow") }).toEqual({ method, status: 405, allow });
        expect(res.body.requestId).toBe(res.headers.get("x-request-id"));
      }
      const options = await t.api.request("OPTIONS", url);
      expect({ status: options.status, allow: options.headers.get("allow") }).toEqual({ status: 204, allow: `${allow}, OPTIONS` });
    },
  );

  it("is a 405 for DELETE /authentication/me and PUT /contacts/custom-fields, while the paths' own methods and their siblings still work", async () => {
    // The route table gives the fixed paths a sibling with a parameter also matches (the cases above).
    expect(SHADOWED.map((s) => s.template)).toEqual(
      expect.arrayContaining(["/authentication/me", "/contacts/custom-fields", "/campaigns/stats", "/exports/contacts"]),
    );
    expect(SHADOWED.length).toBeGreaterThanOrEqual(8);
    const a = await t.newAccount(["AUTHENTICATION", "CONTACTS"]);
    const del = await a.api.delete("/authentication/me");
    expectProblem(del, 405);
    expect(del.headers.get("allow")).toBe("GET");
    const put = await a.api.put("/contacts/custom-fields", { key: "tier", type: "TEXT" });
    expectProblem(put, 405);
    expect(put.headers.get("allow")).toBe("GET, POST");
    const me = await a.api.get("/authentication/me");
    expect(me.status).toBe(200);
    expect((await a.api.get(`/authentication/${me.body.id}`)).status).toBe(200);
    expect((await a.api.get("/AUTHENTICATION/ME")).status).toBe(200); // paths match case-insensitively, as before
    expectProblem(await a.api.delete("/Authentication/Me"), 405);
    expect((await a.api.get("/contacts/custom-fields")).status).toBe(200);
    // A trailing slash names the same path; the ops paths match case-insensitively too, and know their methods.
    expect((await a.api.get("/authentication/me/")).status).toBe(200);
    expectProblem(await a.api.delete("/authentication/me/"), 405);
    expect((await t.root.get("/HEALTHZ/Live")).status).toBe(200);
    const post = await t.root.post("/healthz/live", {});
    expectProblem(post, 405);
    expect(post.headers.get("allow")).toBe("GET");
  });
});

describe("query parameter names", () => {
  it("refuses a parameter with an empty name, like any unknown one", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "CONTACTS", "WEBHOOKS"]);
    for (const url of ["/contacts?=false", "/contacts?limit=5&=x", "/authentication?=", "/contacts/custom-fields?=1"]) {
      const res = await a.api.get(url);
      expectProblem(res, 400);
      expect(res.body.errors).toEqual([{ path: "", message: expect.stringMatching(/empty name/) }]);
    }
    expect((await a.api.get("/contacts?limit=5&&page=0")).status).toBe(200); // an empty pair is no parameter
  });

  it("refuses a parameter on an operation that declares none", async () => {
    const a = await t.newAccount(["AUTHENTICATION", "WEBHOOKS"]);
    const res = await a.api.get("/authentication/me?verbose=true");
    expectProblem(res, 400);
    expect(res.body.errors).toEqual([{ path: "verbose", message: "is not an allowed field" }]);
    expectProblem(await a.api.get("/webhooks/delivery-status?x=1"), 400);
    expect((await a.api.get("/authentication/me")).status).toBe(200);
  });
});

describe("bulk ids in the body", () => {
  it("documents DELETE /contacts/list/contacts with its JSON body of up to 10,000 ids and takes them (too many for a query string), and still the query form", async () => {
    const committed = JSON.parse(fs.readFileSync(path.join(__dirname, "../../openapi.json"), "utf8"));
    const op = committed.paths["/contacts/list/contacts"].delete;
    expect(op.parameters.filter((p: { in?: string }) => p.in === "query")).toEqual([]);
    expect(op.requestBody.required).toBe(true);
    const body = committed.components.schemas[op.requestBody.content["application/json"].schema.$ref.split("/").pop()];
    expect(body.properties.contactIds.maxItems).toBe(10000);
    expect(body.properties.excludeIdsAllContacts.maxItems).toBe(10000);

    const a = await t.newAccount(["CONTACTS"]);
    const list = (await a.api.post("/contacts/list", { name: "bulk" })).body;
    const contacts: string[] = [];
    for (let i = 0; i < 3; i++) contacts.push((await a.api.post("/contacts", { email: `bulk${i}@example.com` })).body.id);
    expect((await a.api.post("/contacts/list/contacts", { listIds: [list.id], contactIds: contacts })).status).toBe(201);
    const others = Array.from({ length: 9_999 }, () => randomUUID());
    expect(`contactIds=${others.join(",")}`.length).toBeGreaterThan(MAX_REQUEST_HEAD);
    const res = await a.api.delete("/contacts/list/contacts", {
      body: { listIds: [list.id], allContacts: true, excludeIdsAllContacts: [contacts[0], ...others] },
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ deleted: 2 });
    // 10,000 ids of contacts that do not exist: read and checked, the first 100 named.
    const unknown = await a.api.delete("/contacts/list/contacts", { body: { listIds: [list.id], contactIds: [...others, randomUUID()] } });
    expectProblem(unknown, 400);
    expect(unknown.body.errors).toHaveLength(100);
    const tooMany = await a.api.delete("/contacts/list/contacts", { body: { listIds: [list.id], contactIds: [...others, randomUUID(), randomUUID()] } });
    expectProblem(tooMany, 400);
    expect(tooMany.body.errors).toEqual([{ path: "contactIds", message: "must NOT have more than 10000 items" }]);
    const query = await a.api.delete(`/contacts/list/contacts?listIds=${list.id}&contactIds=${contacts[0]}`);
    expect(query.status).toBe(200);
    expect(query.body).toEqual({ deleted: 1 });
  });
});

describe("a request head too large", () => {
  /** Sends raw bytes, answers what came back (the server closes the connection). */
  const raw = (bytes: string) =>
    new Promise<string>((resolve, reject) => {
      const s = net.connect(t.app.port!, "127.0.0.1", () => s.end(bytes));
      let data = "";
      s.on("data", (d) => (data += d.toString()));
      s.on("close", () => resolve(data));
      s.on("error", (err: NodeJS.ErrnoException) => (err.code === "ECONNRESET" || err.code === "EPIPE" ? resolve(data) : reject(err)));
    });

  it("is a 431 problem with X-Request-Id, logged like any other answer and counted", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const ids = Array.from({ length: 10_000 }, () => randomUUID()).join(",");
    const res = await a.api.delete(`/contacts/list/contacts?listIds=1&contactIds=${ids}`);
    expectProblem(res, 431);
    const requestId = res.headers.get("x-request-id");
    expect(requestId).toMatch(/^[0-9a-f-]{36}$/);
    expect(res.body.detail).toMatch(/too large/i);
    // A head too large in its headers rather than its request line, sent by hand.
    const answer = await raw(`GET /api/partner-gateway/v1/contacts HTTP/1.1\r\nHost: x\r\nX-Pad: ${"p".repeat(MAX_REQUEST_HEAD + 1024)}\r\n\r\n`);
    expect(answer).toMatch(/^HTTP\/1\.1 431 /);
    expect(answer).toMatch(/Content-Type: application\/problem\+json/);
    const second = /X-Request-Id: ([0-9a-f-]{36})/.exec(answer)?.[1];
    expect(second).toBeDefined();
    await eventually(() => {
      for (const id of [requestId, second]) {
        const line = logLines.find((l) => l.msg === "request" && l.requestId === id);
        expect({ id, line }).toEqual({ id, line: expect.objectContaining({ status: 431, route: "unmatched" }) });
      }
    });
    const metrics = await t.root.get("/metrics");
    expect(metrics.text).toMatch(/http_requests_total\{method="[A-Z-]+",route="unmatched",status="431"\} [1-9]/);
  });
});
