/**
 * The document says what the server checks (issue 30, contract section 9): for each rule that used
 * to live only in handler code, the server refuses an input with a 400 problem AND the schema
 * openapi.json gives for that input (validated with ajv, JSON Schema 2020-12 as OpenAPI 3.1 reads
 * it) refuses it too, so a client generated from the document, or a fuzzer, never sends it believing
 * it valid. Where JSON Schema cannot say a rule (`from` before `to`), the description says it.
 */
import { randomUUID } from "node:crypto";
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import { ALL_SERVICES } from "../../lib/config";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { expectProblem } from "../helpers/expect";
import type { Res } from "../helpers/http";

let t: TestApp;
let a: Account;
let doc: any;
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

beforeAll(async () => {
  t = await startTestApp({ services: ALL_SERVICES, config: { publicBaseUrl: "http://localhost:3000" } });
  doc = (await t.api.get("/openapi.json")).body;
  a = await t.newAccount("ALL");
});
afterAll(() => t?.stop());

const deref = (x: any): any =>
  x && typeof x.$ref === "string"
    ? deref(
        x.$ref
          .slice(2)
          .split("/")
          .reduce((o: any, k: string) => o[k], doc),
      )
    : x;
const operation = (method: string, path: string) => {
  const op = doc.paths[path]?.[method.toLowerCase()];
  if (!op) throw new Error(`openapi.json has no ${method} ${path}`);
  return op;
};
/** The JSON body's schema of an operation, as the document gives it. */
const bodyOf = (method: string, path: string) => operation(method, path).requestBody.content["application/json"].schema;
/** A parameter's schema (query or header, by name, headers case-insensitively). */
const paramOf = (method: string, path: string, where: "query" | "header", name: string) => {
  const p = operation(method, path)
    .parameters.map(deref)
    .find((x: any) => x.in === where && x.name.toLowerCase() === name.toLowerCase());
  if (!p) throw new Error(`${method} ${path} documents no ${where} parameter ${name}`);
  return p;
};
/** Whether the document's `schema` accepts `value` ($refs into components resolved). */
const documented = (schema: unknown, value: unknown): boolean => ajv.validate({ ...(schema as object), components: doc.components }, value);

/** Each refused case: the server's answer and what the document says of the same input. */
async function refusedByBoth(res: Promise<Res>, schema: unknown, value: unknown): Promise<Res> {
  const answer = await res;
  expectProblem(answer, 400);
  expect({ value, documentedValid: documented(schema, value) }).toEqual({ value, documentedValid: false });
  return answer;
}

describe("one of phoneNumber or email on a contact", () => {
  it("is required by the document as by the server, body included, with the message partners had", async () => {
    expect(operation("POST", "/contacts").requestBody.required).toBe(true);
    const create = bodyOf("POST", "/contacts");
    for (const body of [{}, { firstName: "Ana" }, { phoneNumber: null, email: null }, { firstName: "Ana", phoneNumber: null }]) {
      const res = await refusedByBoth(a.api.post("/contacts", body), create, body);
      expect(res.body.errors).toEqual([{ path: "phoneNumber", message: "a phone number or an email is required" }]);
    }
    const good = { firstName: "Ana", email: `ana-${randomUUID()}@example.com` };
    expect(documented(create, good)).toBe(true);
    const made = await a.api.post("/contacts", good);
    expect(made.status).toBe(201);
    const replace = bodyOf("PUT", "/contacts/{id}");
    expect(operation("PUT", "/contacts/{id}").requestBody.required).toBe(true);
    await refusedByBoth(a.api.put(`/contacts/${made.body.id}`, { firstName: "Ana" }), replace, { firstName: "Ana" });
  });

  it("documents that a phone number begins with + or 00 and its country code", async () => {
    const create = bodyOf("POST", "/contacts");
    const res = await refusedByBoth(a.api.post("/contacts", { phoneNumber: "912 345 678" }), create, { phoneNumber: "912 345 678" });
    expect(res.body.errors).toEqual([{ path: "phoneNumber", message: expect.stringMatching(/international format/) }]);
    expect(documented(create, { phoneNumber: "+351 912 345 678" })).toBe(true);
    const filter = paramOf("GET", "/contacts", "query", "phoneNumber").schema;
    await refusedByBoth(a.api.get("/contacts?phoneNumber=912345678"), filter, "912345678");
  });

  it("documents the length of a TEXT custom field value", async () => {
    const value = { email: `long-${randomUUID()}@example.com`, customFields: { note: "x".repeat(2001) } };
    await refusedByBoth(a.api.post("/contacts", value), bodyOf("POST", "/contacts"), value);
  });
});

describe("headers", () => {
  it("Idempotency-Key: 1-255 printable ASCII characters", async () => {
    const schema = deref(doc.components.parameters["Idempotency-Key"]).schema;
    for (const key of ["tab\there", "x".repeat(256)]) {
      await refusedByBoth(a.api.post("/contacts/list", { name: "keyed" }, { headers: { "idempotency-key": key } }), schema, key);
    }
    expect(documented(schema, "order 4711 / retry ~1")).toBe(true);
  });

  it("Last-Event-ID and lastEventId: 1-15 digits, never null", async () => {
    const header = paramOf("GET", "/inbox/events", "header", "Last-Event-ID").schema;
    for (const id of ["abc", "1234567890123456", "-1"]) await refusedByBoth(a.api.get("/inbox/events", { headers: { "last-event-id": id } }), header, id);
    const query = paramOf("GET", "/inbox/events", "query", "lastEventId").schema;
    await refusedByBoth(a.api.get("/inbox/events?lastEventId=abc"), query, "abc");
    expect(documented(query, null)).toBe(false);
    expect(documented(paramOf("GET", "/inbox/conversations/{chatId}/events", "query", "lastEventId").schema, null)).toBe(false);
    expect(documented(query, "42")).toBe(true);
  });
});

describe("from before to", () => {
  const later = "2026-01-02T00:00:00Z";
  const earlier = "2026-01-01T00:00:00Z";

  it("is refused by the server (equal too) and said in the description of every from and to", async () => {
    for (const [from, to] of [
      [later, earlier],
      [earlier, earlier],
    ]) {
      const q = `from=${from}&to=${to}`;
      expectProblem(await a.api.get(`/messages/history?${q}`), 400);
      expectProblem(await a.api.get(`/campaigns/stats?${q}`), 400);
      expectProblem(await a.api.post("/exports/delivery-reports", { from, to }), 400);
      expectProblem(await a.api.post("/messages/history/export", { from, to }), 400);
    }
    const said = /`from` must be before `to` \(equal is refused/;
    for (const path of ["/messages/history", "/campaigns/stats"])
      for (const name of ["from", "to"])
        expect({ path, name, description: paramOf("GET", path, "query", name).description }).toEqual({ path, name, description: expect.stringMatching(said) });
    for (const path of ["/exports/delivery-reports", "/messages/history/export"]) {
      const props = deref(bodyOf("POST", path)).properties;
      for (const name of ["from", "to"])
        expect({ path, name, description: props[name].description }).toEqual({ path, name, description: expect.stringMatching(said) });
    }
  });
});

describe("exactly one of text and mediaId in an inbox reply", () => {
  it("is a oneOf in the document, with the paths and message partners had", async () => {
    const path = `/inbox/conversations/${randomUUID()}/messages`;
    const schema = bodyOf("POST", "/inbox/conversations/{chatId}/messages");
    const none = await refusedByBoth(a.api.post(path, {}), schema, {});
    expect(none.body.errors).toEqual([{ path: "text", message: "give exactly one of text and mediaId" }]);
    const both = { text: "hi", mediaId: randomUUID() };
    const twice = await refusedByBoth(a.api.post(path, both), schema, both);
    expect(twice.body.errors).toEqual([{ path: "mediaId", message: "give exactly one of text and mediaId" }]);
    expect(documented(schema, { text: "hi" })).toBe(true);
    expect(documented(schema, { mediaId: randomUUID() })).toBe(true);
    expect((await a.api.post(path, { text: "hi" })).status).toBe(404); // valid: the conversation is what is missing
  });
});

describe("an absolute https URL for callbackUrl", () => {
  it("is a pattern in the document, refusing what the server refuses and accepting what it may accept (the host's resolution is the server's alone)", async () => {
    for (const callbackUrl of [
      "http://93.184.216.34/hook",
      "https://93.184.216.34:8080/hook",
      "https://user:pw@93.184.216.34/hook",
      "https://93.184.216.34/hook#frag",
      "/relative/hook",
      "hooks.example.com/hook",
    ]) {
      for (const method of ["POST", "PUT"] as const) {
        const schema = bodyOf(method, "/webhooks/delivery-status");
        const res = await refusedByBoth(a.api.request(method, "/webhooks/delivery-status", { body: { callbackUrl } }), schema, { callbackUrl });
        expect(res.body.errors).toEqual([{ path: "callbackUrl", message: expect.stringMatching(/^must be an absolute URL: https/) }]);
      }
    }
    const schema = bodyOf("POST", "/webhooks/delivery-status");
    for (const callbackUrl of ["https://hooks.example.com/pgw/delivery", "https://93.184.216.34:8443/h?x=1", "HTTPS://[2001:db8::1]/h"])
      expect({ callbackUrl, ok: documented(schema, { callbackUrl }) }).toEqual({ callbackUrl, ok: true });
    expect(deref(schema).properties.callbackUrl.description).toMatch(/resolve/);
  });
});
