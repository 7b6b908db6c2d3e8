/**
 * Keeps the validation found (issue 15, item 10): a property-based walk of every operation in the
 * app's own OpenAPI document. For each one, fast-check generates requests that the document itself
 * says are invalid (a path id of the wrong shape, a query parameter of the wrong type or value, a
 * JSON body with a wrong-typed, oversized, unknown or missing field, or not an object at all), and
 * each must answer a 4xx problem carrying the request id, with the database left exactly as it was.
 *
 * "Invalid" is decided by the document, not guessed: every generated case is checked with ajv
 * against the operation's published schemas (query and path values first coerced as the gateway
 * documents it: integers, booleans, comma-separated arrays) and dropped when it would be valid.
 * The number of cases is bounded (RUNS per operation); a failure prints fast-check's seed and path.
 */
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import fc from "fast-check";
import { QueryTypes } from "sequelize";
import { ALL_SERVICES } from "../../lib/config";
import { coerceValue } from "../../services/gateway/gateway.params";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { contactIn, listIn } from "../helpers/builders";
import type { Res } from "../helpers/http";

/** Cases per operation: about 35 operations, the whole file under a minute on PGlite when it runs alone. */
const RUNS = 25;

/**
 * Operations not walked, each with its reason. A bug the walk finds is listed here by name (with the
 * failing request) until it is fixed, so the rest of the walk keeps guarding CI.
 */
const NOT_WALKED: Record<string, string> = {
  "GET /openapi.json": "public document, no input",
  "GET /exports/{exportId}/download/{expires}/{signature}": "signed file download, not an API call (covered by exports.spec.ts)",
  // No parameter and no body: nothing the document allows to be wrong.
  "GET /authentication/me": "no input",
  "GET /contacts/custom-fields": "no input",
  "GET /webhooks/delivery-status": "no input",
  "DELETE /webhooks/delivery-status": "no input",
};

/** Statuses an invalid request may answer. */
const ALLOWED = [400, 401, 404, 405, 409, 413, 415, 422];

type Schema = Record<string, any>;
interface Param {
  name: string;
  in: "path" | "query" | "header";
  required?: boolean;
  schema: Schema;
  example?: unknown;
}
interface Op {
  key: string;
  method: string;
  path: string;
  params: Param[];
  jsonBody: Schema | null;
  multipart: boolean;
}
type QueryValue = string | string[] | Record<string, string>;
interface Case {
  path: Record<string, string>;
  query: Record<string, QueryValue>;
  /** A JSON text (raw, so that top-level non-objects can be sent). */
  body?: string;
}

let t: TestApp;
let acct: Account;
let doc: any;
let ajv: Ajv2020;
const known: { contactId?: string; listId?: number; keyId?: string } = {};

beforeAll(async () => {
  t = await startTestApp({ services: ALL_SERVICES, config: { rateLimitRps: 100000 } });
  acct = await t.newAccount("ALL");
  known.keyId = acct.key.id;
  const contact = await acct.api.post("/contacts", contactIn({ email: "walk@example.com" }));
  expect(contact.status).toBe(201);
  known.contactId = contact.body.id;
  const list = await acct.api.post("/contacts/list", listIn());
  expect(list.status).toBe(201);
  known.listId = list.body.id;
  expect((await acct.api.post("/contacts/list/contacts", { listIds: [known.listId], contactIds: [known.contactId] })).status).toBeLessThan(300);
  expect((await acct.api.post("/webhooks/delivery-status", { callbackUrl: "https://93.184.216.34/pgw/delivery" })).status).toBe(201);
  const res = await t.api.get("/openapi.json");
  expect(res.status).toBe(200);
  doc = res.body;
  ajv = new Ajv2020({ strict: false, allErrors: false, validateFormats: true });
  addFormats(ajv);
  ajv.addSchema({ $id: "https://walk.local/doc", components: doc.components });
});
afterAll(() => t?.stop());

// ---- the document ------------------------------------------------------------------------

function deref<T = Schema>(x: any): T {
  if (x && typeof x.$ref === "string" && x.$ref.startsWith("#/")) {
    return deref(
      x.$ref
        .slice(2)
        .split("/")
        .reduce((o: any, k: string) => o[k], doc),
    );
  }
  return x;
}

/** A validator for a schema of the document (its $refs resolved against the document's components). */
const validators = new Map<string, (v: unknown) => boolean>();
function isValid(schema: Schema, value: unknown): boolean {
  const text = JSON.stringify(schema);
  let v = validators.get(text);
  if (!v) {
    const fixed = JSON.parse(text.replace(/"#\/components\//g, '"https://walk.local/doc#/components/'));
    const compiled = ajv.compile(fixed);
    v = (x) => compiled(x) as boolean;
    validators.set(text, v);
  }
  return v(value);
}

function operations(): Op[] {
  const ops: Op[] = [];
  for (const [p, byMethod] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
    for (const [m, op] of Object.entries(byMethod)) {
      const content = op.requestBody?.content ?? {};
      ops.push({
        key: `${m.toUpperCase()} ${p}`,
        method: m.toUpperCase(),
        path: p,
        params: ((op.parameters ?? []) as unknown[]).map((x) => deref<Param>(x)).filter((x) => x.in !== "header"),
        jsonBody: content["application/json"] ? deref(content["application/json"].schema) : null,
        multipart: !!content["multipart/form-data"],
      });
    }
  }
  return ops;
}

/** Literal path segments of the document: a path value equal to one would name another route. */
function literalSegments(): Set<string> {
  const s = new Set<string>();
  for (const p of Object.keys(doc.paths)) for (const seg of p.split("/")) if (seg && !seg.startsWith("{")) s.add(seg);
  return s;
}

// ---- valid values (the part of a case left intact) ------------------------------------------

function typesOf(schema: Schema): string[] {
  const s = deref(schema);
  return Array.isArray(s.type) ? s.type : typeof s.type === "string" ? [s.type] : [];
}

function validPathValue(op: Op, p: Param): string {
  if (p.name === "id" && op.path.startsWith("/contacts/list")) return String(known.listId);
  if (p.name === "listId") return String(known.listId);
  if (p.name === "id" && op.path.startsWith("/contacts/")) return known.contactId!;
  if (p.name === "id" && op.path.startsWith("/authentication/")) return known.keyId!;
  const ex = p.example ?? p.schema.examples?.[0] ?? p.schema.example;
  return ex !== undefined ? String(ex) : "00000000-0000-4000-8000-000000000000";
}

function validQueryValue(p: Param): string {
  const s = deref(p.schema);
  if (typesOf(s).includes("array")) {
    const items = deref(s.items ?? {});
    if (typesOf(items).includes("integer")) return String(known.listId);
    return String(items.examples?.[0] ?? items.example ?? known.contactId);
  }
  const ex = p.example ?? s.examples?.[0] ?? s.example ?? s.enum?.[0] ?? s.default;
  return ex !== undefined ? String(ex) : "x";
}

function baseCase(op: Op): Case {
  const path: Record<string, string> = {};
  const query: Record<string, QueryValue> = {};
  for (const p of op.params) {
    if (p.in === "path") path[p.name] = validPathValue(op, p);
    else if (p.in === "query" && p.required) query[p.name] = validQueryValue(p);
  }
  let body: string | undefined;
  if (op.jsonBody) {
    const media = (doc.paths[op.path][op.method.toLowerCase()].requestBody.content["application/json"] ?? {}) as Schema;
    body = JSON.stringify(media.example ?? {});
  }
  return { path, query, body };
}

// ---- generators of wrong values ------------------------------------------------------------

const HUGE = 64 * 1024;
const unicode = fc.string({ unit: "binary", minLength: 1, maxLength: 40 });
const withNul = fc.tuple(fc.string({ maxLength: 10 }), fc.string({ maxLength: 10 })).map(([a, b]) => `${a}\u0000${b}`);
/** Long enough to pass any maxLength of a path or query value, short enough for a URL (Node's 16 KiB header limit). */
const longText = fc.tuple(fc.constantFrom("a", "9", "é", "日", "🎉", "%", "'"), fc.integer({ min: 257, max: 3000 })).map(([c, n]) => c.repeat(n));
const hugeText = fc.tuple(fc.constantFrom("a", "é", "日", "🎉", "\\", '"'), fc.integer({ min: 2049, max: HUGE / 4 })).map(([c, n]) => c.repeat(n));
const numberText = fc.oneof(
  fc.integer().map(String),
  fc.double({ noNaN: false }).map(String),
  fc.constantFrom("0", "-1", "1.5", "1e400", "9".repeat(40), "0x10", "NaN", "Infinity", "-0", "9007199254740993"),
);

/** A raw string for a path or query value: wrong shapes of every kind. */
const badScalarText = fc.oneof(
  numberText,
  unicode,
  withNul,
  longText,
  fc.constantFrom(
    "../",
    "..%2F..%2F",
    "../../etc/passwd",
    "null",
    "true",
    "false",
    "[]",
    "{}",
    "undefined",
    " ",
    "%00",
    "\u202e",
    "a,b",
    "'; DROP TABLE contacts; --",
  ),
  fc.uuid().map((u) => `${u}x`),
  fc.string({ minLength: 1, maxLength: 30 }),
);

/** A query value: a wrong string, the key repeated (an array for a scalar), or a nested object. */
const badQueryValue: fc.Arbitrary<QueryValue> = fc.oneof(
  { weight: 4, arbitrary: badScalarText },
  { weight: 1, arbitrary: fc.array(badScalarText, { minLength: 2, maxLength: 3 }) },
  { weight: 1, arbitrary: fc.array(fc.constantFrom("true", "1", "SMS", "asc", "x"), { minLength: 2, maxLength: 3 }) },
  { weight: 1, arbitrary: fc.dictionary(fc.stringMatching(/^[a-z]{1,8}$/), badScalarText, { minKeys: 1, maxKeys: 2 }) },
);

/** Any JSON value, weighted towards the wrong-type and edge shapes. */
const anyJson: fc.Arbitrary<unknown> = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  unicode,
  withNul,
  hugeText,
  fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 4 }),
  fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }),
  fc.jsonValue({ maxDepth: 6 }),
  fc.integer({ min: 20, max: 200 }).map((d) => {
    let v: unknown = "deep";
    for (let i = 0; i < d; i++) v = { a: v };
    return v;
  }),
);

function bodyArbitrary(op: Op): fc.Arbitrary<string> {
  const schema = op.jsonBody!;
  const base = JSON.parse(baseCase(op).body ?? "{}") as Record<string, unknown>;
  const props = Object.keys(deref(schema).properties ?? {});
  const required: string[] = deref(schema).required ?? [];
  const mutations: fc.Arbitrary<unknown>[] = [
    // Not an object at all.
    fc.oneof(fc.constant(null), fc.boolean(), fc.integer(), unicode, fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 3 })),
    // An unknown field.
    fc.tuple(fc.string({ unit: "binary", minLength: 1, maxLength: 20 }), anyJson).map(([k, v]) => ({ ...base, [k]: v })),
  ];
  if (props.length) {
    // A documented field given a wrong type, a null, a nested object, an array for a scalar or a huge string.
    mutations.push(fc.tuple(fc.constantFrom(...props), anyJson).map(([k, v]) => ({ ...base, [k]: v })));
  }
  if (required.length) {
    mutations.push(fc.constantFrom(...required).map((k) => Object.fromEntries(Object.entries(base).filter(([kk]) => kk !== k))));
  }
  return fc
    .oneof(...mutations)
    .filter((b) => !isValid(schema, b))
    .map((b) => JSON.stringify(b));
}

// ---- requests ------------------------------------------------------------------------------

function encodeQuery(q: Record<string, QueryValue>): string {
  const parts: string[] = [];
  const e = encodeURIComponent;
  for (const [k, v] of Object.entries(q)) {
    if (typeof v === "string") parts.push(`${e(k)}=${e(v)}`);
    else if (Array.isArray(v)) for (const x of v) parts.push(`${e(k)}=${e(x)}`);
    else for (const [kk, x] of Object.entries(v)) parts.push(`${e(k)}[${e(kk)}]=${e(x)}`);
  }
  return parts.length ? `?${parts.join("&")}` : "";
}

function urlOf(op: Op, c: Case): string {
  return op.path.replace(/\{([^}]+)\}/g, (_, n: string) => encodeURIComponent(c.path[n]!)) + encodeQuery(c.query);
}

/** Whether the query and path values (as the gateway coerces them) break the operation's parameter schemas. */
function paramsInvalid(op: Op, c: Case): boolean {
  for (const p of op.params) {
    const raw = p.in === "path" ? c.path[p.name] : c.query[p.name];
    if (raw === undefined) {
      if (p.required) return true;
      continue;
    }
    if (typeof raw === "object" && !Array.isArray(raw)) return true; // a nested object is never a documented value
    if (!isValid(p.schema, coerceValue(raw, p.schema))) return true;
  }
  return false;
}

async function send(op: Op, c: Case): Promise<Res> {
  const url = urlOf(op, c);
  if (op.multipart || c.body !== undefined) {
    return acct.api.request(op.method, url, { raw: c.body ?? "{}", headers: { "content-type": "application/json" } });
  }
  return acct.api.request(op.method, url);
}

// ---- the database --------------------------------------------------------------------------

let fingerprintSql: string | null = null;
/** Count and content hash of every table of the public schema. */
async function fingerprint(): Promise<Record<string, string>> {
  const q = <T extends object>(sql: string) => t.db.sequelize.query<T>(sql, { type: QueryTypes.SELECT });
  // Every table's row count and a digest of its rows, in one statement (one round trip per fingerprint).
  fingerprintSql ??= // Partitioned tables count every day's rows; the days themselves come and go (made ahead, dropped by retention).
    (
      await q<{ tablename: string }>(
        "SELECT c.relname AS tablename FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY c.relname",
      )
    )
      .map(({ tablename }) => {
        const ident = `"${tablename.replace(/"/g, '""')}"`;
        const literal = `'${tablename.replace(/'/g, "''")}'`;
        return `SELECT ${literal} AS t, count(*)::text AS n, md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) AS h FROM ${ident} x`;
      })
      .join(" UNION ALL ");
  const out: Record<string, string> = {};
  for (const r of await q<{ t: string; n: string; h: string }>(fingerprintSql)) out[r.t] = `${r.n}:${r.h}`;
  return out;
}

// ---- the walk ------------------------------------------------------------------------------

function caseArbitrary(op: Op): fc.Arbitrary<Case> | null {
  const base = baseCase(op);
  const literals = literalSegments();
  const kinds: fc.Arbitrary<Case>[] = [];
  const pathParams = op.params.filter((p) => p.in === "path");
  const queryParams = op.params.filter((p) => p.in === "query");
  if (pathParams.length) {
    const badPath = badScalarText.filter((s) => s.length > 0 && s !== "." && s !== ".." && !literals.has(s));
    kinds.push(
      fc
        .tuple(fc.constantFrom(...pathParams.map((p) => p.name)), badPath)
        .map(([n, v]) => ({ ...base, path: { ...base.path, [n]: v } }))
        .filter((c) => paramsInvalid(op, c)),
    );
  }
  if (queryParams.length) {
    kinds.push(
      fc
        .tuple(fc.constantFrom(...queryParams.map((p) => p.name)), badQueryValue)
        .map(([n, v]) => ({ ...base, query: { ...base.query, [n]: v } }))
        .filter((c) => paramsInvalid(op, c)),
    );
  }
  if (op.jsonBody) kinds.push(bodyArbitrary(op).map((body) => ({ ...base, body })));
  if (op.multipart) {
    // An upload sent as JSON instead of multipart/form-data.
    kinds.push(fc.jsonValue({ maxDepth: 3 }).map((v) => ({ ...base, body: JSON.stringify(v) })));
  }
  return kinds.length ? fc.oneof(...kinds) : null;
}

describe("every operation answers a 4xx problem with the request id to invalid input, and writes nothing", () => {
  it("sees a write in the database fingerprint (the guard of the walk works)", async () => {
    const before = await fingerprint();
    expect((await acct.api.post("/contacts/list", listIn())).status).toBe(201);
    const after = await fingerprint();
    expect(Object.keys(before).filter((k) => before[k] !== after[k])).toContain("contact_lists");
    expect(await fingerprint()).toEqual(after);
  });

  it("walks the whole document", () => {
    const walked = operations().filter((o) => !(o.key in NOT_WALKED));
    expect(walked.length).toBeGreaterThanOrEqual(25);
    for (const o of walked) expect({ op: o.key, walkable: caseArbitrary(o) !== null }).toEqual({ op: o.key, walkable: true });
  });

  // The operations are only known once the app serves its document: one test walks them in turn,
  // naming the operation and the request in any failure.
  it("rejects generated invalid requests on every operation", async () => {
    const ops = operations().filter((o) => !(o.key in NOT_WALKED));
    for (const op of ops) {
      const arb = caseArbitrary(op)!;
      await fc.assert(
        fc.asyncProperty(arb, async (c) => {
          const before = await fingerprint();
          const res = await send(op, c);
          const after = await fingerprint();
          const seen = {
            op: op.key,
            url: urlOf(op, c).slice(0, 300),
            body: c.body?.slice(0, 300),
            status: res.status,
            statusAllowed: ALLOWED.includes(res.status),
            contentType: res.headers.get("content-type"),
            // A HEAD answer has no body: its problem is only the headers of the GET's.
            requestIdMatches:
              op.method.toUpperCase() === "HEAD"
                ? Boolean(res.headers.get("x-request-id"))
                : typeof res.body === "object" && res.body?.requestId === res.headers.get("x-request-id"),
            dbUnchanged: Object.keys(before).filter((k) => before[k] !== after[k]),
          };
          expect(seen).toEqual({
            ...seen,
            statusAllowed: true,
            contentType: expect.stringMatching(/^application\/problem\+json/),
            requestIdMatches: true,
            dbUnchanged: [],
          });
        }),
        { numRuns: RUNS },
      );
    }
    // 40-50 s alone; beside three other test files on two cores the embedded run has taken 120-140 s.
  }, 300_000);
});
