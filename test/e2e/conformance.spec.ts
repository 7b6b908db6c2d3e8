/**
 * Issue 30, item 8: a conformance walk generated from openapi.json. For every operation of the
 * document (no list of operations here), fast-check arbitraries built from its parameter and body
 * schemas (test/helpers/oas.ts) make requests the document calls valid, with a fixed seed so CI
 * repeats them, and each goes to the running app. Every answer must:
 *   - not be a 5xx;
 *   - have a status the operation documents, and a body of the documented media type that validates
 *     against the documented schema (ajv + ajv-formats; problems carry the X-Request-Id as requestId);
 *   - not refuse the input, except for a reason the document states: a 404 or 400 naming an id the
 *     account does not have, a documented conflict (409), a repeated Idempotency-Key (422), or a rule
 *     JSON Schema cannot say that the document says in words (STATED, each with its reason, and
 *     checked to still be written in the document).
 * Path ids are filled with seeded resources (sometimes random ones: a documented 404); operations
 * that change or delete what they name get a fresh one per request (test/helpers/conformance-seeds.ts),
 * and DELETEs run last. Every operation must reach a success answer at least once.
 */
import fs from "node:fs";
import path from "node:path";
import fc from "fast-check";
import { ALL_SERVICES } from "../../lib/config";
import { startTestApp, type TestApp } from "../helpers/app";
import { DECLARED_FIELDS, FILES, Seeds, fieldKind, kindOf, paramKind, type Kind } from "../helpers/conformance-seeds";
import { Generator, OpenApi, type Hint, type Operation, type Schema } from "../helpers/oas";
import { checkAnswer, describeInput, invalidParts, sendCase, summarise, type Finding, type Resolved } from "../helpers/conformance-check";

/** Fixed: the same requests on every run. */
const SEED = 3008;
/** Requests per operation, more where a body gives the generator more to vary (the file stays well under a minute and a half on PGlite). */
const RUNS = 8;
const RUNS_WITH_BODY = 24;

const doc = JSON.parse(fs.readFileSync(path.join(__dirname, "../../openapi.json"), "utf8"));
const api = new OpenApi(doc);
/** Every operation of the document, DELETEs last (they may remove what others read). */
const OPERATIONS = api.operations().sort((a, b) => Number(a.method === "DELETE") - Number(b.method === "DELETE"));

/**
 * 400s the document explains in words because JSON Schema cannot say them. Each applies to errors on
 * `field` whose message matches `rule`, and only while the document still `says` it (in the
 * operation's description or a description along the field's path, and for a `global` rule also the
 * document's own description; `sent` narrows it to values).
 */
const STATED: Array<{ field: RegExp; rule: RegExp; says: RegExp; op?: RegExp; sent?: (v: unknown) => boolean; global?: true; why: string }> = [
  { field: /^phoneNumber$/, rule: /./, says: /international format/i, why: "whether a number exists in its country's numbering plan is no pattern" },
  {
    field: /^customFields/,
    rule: /./,
    says: /only fields declared on the account|for a declared custom field/i,
    why: "the account declares its custom fields at run time",
  },
  { field: /^message\.text$/, rule: /custom field|placeholder/i, says: /placeholders/i, why: "placeholders name the account's declared custom fields" },
  {
    field: /^message\.(text|mediaIds)$/,
    rule: /characters on|empty on SMS/,
    says: /1600 characters on SMS|RCS and WhatsApp only/,
    op: /^PUT \/campaigns\/\{id\}$/,
    why: "on an update the channel may be the stored draft's, which the body does not carry",
  },
  { field: /^text$/, rule: /characters on/, says: /3072 characters on RCS/, why: "the limit is the stored conversation's channel's" },
  { field: /^scheduledAt$/, rule: /in the future/, says: /in the future/, why: "relative to the moment of the request" },
  { field: /^callbackUrl$/, rule: /./, says: /publicly reachable addresses/, sent: isHttpsUrl, why: "what the host name resolves to is known only when asked" },
  { field: /^upToMessageId$/, rule: /./, says: /not in the conversation/, why: "the conversation's messages are stored state" },
  { field: /^cursor$/, rule: /./, says: /nextCursor of the previous page/, why: "an opaque value only the server gives out" },
  { field: /^mapping$/, rule: /./, says: /JSON object from column header/, why: "JSON inside a text field (contentSchema is only an annotation)" },
  {
    field: /^from$/,
    rule: /before/,
    says: /`?from`? (must be |is )?(not )?(before|earlier than|not after|at most) `?to`?/i,
    global: true,
    why: "a comparison of two fields",
  },
  {
    field: /./,
    rule: /NUL or unpaired surrogate/,
    says: /\bNUL\b/,
    global: true,
    why: "applies to every text of every request: said once, in the document's own description",
  },
  { field: /^contactListIds$/, rule: /no contact reachable/, says: /empty audience/, why: "who can be reached is stored state" },
];

function isHttpsUrl(v: unknown): boolean {
  try {
    const u = new URL(String(v));
    return u.protocol === "https:" && ["", "443", "8443"].includes(u.port) && !u.username && !u.password && !u.hash;
  } catch {
    return false;
  }
}

/** An id to fill in just before sending: a seeded resource of this kind (a fresh one where the operation changes it). */
class Ref {
  constructor(readonly kind: Kind) {}
}
/** What a Ref stands for while a generated value is checked against its schema. */
const standIn = (v: unknown) => (v instanceof Ref ? (["list", "association"].includes(v.kind) ? 1 : "00000000-0000-4000-8000-000000000000") : undefined);

let t: TestApp;
let phoneSeq = 0;
let seeds: Seeds;
const usedIdempotencyKeys = new Set<string>();
const succeeded = new Set<string>();

beforeAll(async () => {
  t = await startTestApp({ services: ALL_SERVICES, config: { rateLimitRps: 100_000 } });
  seeds = new Seeds(t, await t.newAccount("ALL"));
  await seeds.seedShared();
}, 90_000);
afterAll(() => t?.stop());

/** Values that know the app, per field name (mixed with the schema's examples and pure schema values). */
function hints(op: Operation): Hint {
  return (name, s) => {
    const kind = fieldKind(op, name);
    if (kind && [s.type].flat().includes("array")) return fc.array(fc.constant(new Ref(kind)), { minLength: Math.max(1, s.minItems ?? 0), maxLength: 3 });
    if (kind) return fc.constant(new Ref(kind));
    switch (name) {
      case "ids":
        return s.type === "string" ? fc.subarray([...seeds.made.get("sentMessage")!], { minLength: 1 }).map((a) => a.join(",")) : null;
      case "phoneNumber":
        // Mostly fresh numbers (a repeat is a documented 409, but it hides the success path).
        return fc.integer({ min: 0, max: 9_999_999 }).map((n) => `+35191${String((n + 104_729 * ++phoneSeq) % 10_000_000).padStart(7, "0")}`);
      case "destination":
        return fc.constantFrom(...seeds.sentDestinations);
      case "callbackUrl":
        return fc.constantFrom("https://93.184.216.34/pgw/delivery", "https://[2001:4860:4860::8888]:8443/hook", "https://1.1.1.1/cb?x=1");
      case "scheduledAt":
        return fc.integer({ min: 600, max: 5 * 365 * 86_400 }).map((s) => new Date(Date.now() + s * 1000).toISOString());
      case "customFields":
        return fc.subarray(Object.entries(DECLARED_FIELDS)).map((kv) => Object.fromEntries(kv));
      case "mapping":
        return fc.constantFrom(JSON.stringify({ phoneNumber: "phoneNumber", tier: "tier" }), JSON.stringify({ lastName: null }));
      case "cursor":
        return fc.constant(seeds.cursor);
      case "userId":
        return fc.constant(seeds.a.key.userId);
      case "Range":
        return fc.constantFrom("bytes=0-3", "bytes=5-", "bytes=-4", "bytes=100000-", "bytes=0-1,3-4");
      case "If-None-Match":
        return fc.constant(seeds.etag);
      case "Last-Event-Id":
      case "lastEventId":
        return fc.nat({ max: 1_000_000 }).map(String);
    }
    return null;
  };
}

const STATES = ["DRAFT", "SCHEDULED", "PAUSED"] as const;

interface Case {
  path: Record<string, unknown>;
  query: Record<string, unknown>;
  headers: Record<string, unknown>;
  body: unknown;
  state: (typeof STATES)[number];
}

/**
 * Requests for `op`: half of them lean on what knows the app (seeded ids, real phone numbers, the
 * schema's examples), so that success paths are reached; the other half mix in values drawn from the
 * schemas alone.
 */
function caseArbitrary(op: Operation): fc.Arbitrary<Case> {
  const avoid = (name: string, v: unknown) => {
    const kind = fieldKind(op, name);
    return kind !== undefined && seeds.isSeeded(kind, v);
  };
  return fc.oneof(
    casesFrom(op, new Generator(api, hints(op), avoid, { hint: 12, example: 4, pure: 1 }, standIn)),
    casesFrom(op, new Generator(api, hints(op), avoid, undefined, standIn)),
  );
}

function casesFrom(op: Operation, gen: Generator): fc.Arbitrary<Case> {
  const where = (w: string) => op.params.filter((p) => p.in === w);
  const record = (w: "query" | "header") =>
    fc.record(Object.fromEntries(where(w).map((p) => [p.name, gen.of(p.schema, p.name, w === "header")])), {
      requiredKeys: where(w)
        .filter((p) => p.required)
        .map((p) => p.name),
    });
  const pathArb = fc.record(
    Object.fromEntries(
      where("path").map((p) => [
        p.name,
        fc.oneof(
          { weight: 4, arbitrary: fc.constant(new Ref(paramKind(op, p.name))) },
          // "." and ".." cannot travel as a path segment: URL parsing removes them.
          { weight: 1, arbitrary: gen.pure(p.schema).filter((v) => v !== "." && v !== ".." && !seeds.isSeeded(paramKind(op, p.name), v)) },
        ),
      ]),
    ),
  );
  let body: fc.Arbitrary<unknown> = fc.constant(undefined);
  if (op.body?.mediaType === "multipart/form-data") {
    const props = Object.entries((op.body.schema.properties ?? {}) as Record<string, Schema>);
    const fields = props.map(([k, p]) => {
      if (p.format !== "binary") return [k, gen.of(p, k)];
      const files = FILES.filter(([re]) => re.test(p.description ?? ""));
      return [k, fc.constantFrom(...files).map(([, name, make]) => ({ name, content: make() }))];
    });
    body = fc.record(Object.fromEntries(fields), { requiredKeys: op.body.schema.required ?? [] });
  } else if (op.body) body = op.body.required ? gen.of(op.body.schema) : fc.option(gen.of(op.body.schema), { nil: undefined });
  return fc.record({ path: pathArb, query: record("query"), headers: record("header"), body, state: fc.constant(STATES[0]) });
}

/** Kinds an operation changes or deletes: a fresh resource for each of its requests. */
function freshKinds(op: Operation): Set<Kind> {
  if (op.method === "GET" || op.method === "HEAD") return new Set();
  const kinds = new Set(op.params.filter((p) => p.in === "path").map((p) => paramKind(op, p.name)));
  const own = kindOf(op.path);
  if (op.method === "DELETE" && own) kinds.add(own);
  return kinds;
}

/** Fills the placeholders with seeded ids (fresh ones where the operation changes what it names). */
async function resolve(op: Operation, c: Case): Promise<Resolved & { fromRefs: Set<string> }> {
  const fresh = freshKinds(op);
  const fromRefs = new Set<string>();
  const got = new Map<Kind, string>();
  const get = async (kind: Kind): Promise<string> => {
    if (kind === "message") {
      const chat = got.get("conversation");
      return chat ? seeds.conversationMessage.get(chat)! : seeds.shared.get("message")!;
    }
    if ((kind === "optOutChannel" || kind === "optOutNumber") && !got.has(kind)) {
      // One opt-out names both parameters of its path.
      const o = await seeds.freshOptOut();
      got.set("optOutChannel", o.channel);
      got.set("optOutNumber", o.phoneNumber);
    }
    if (!got.has(kind)) got.set(kind, fresh.has(kind) ? await seeds.fresh(kind, { state: c.state }) : seeds.shared.get(kind)!);
    return got.get(kind)!;
  };
  const fill = async (v: unknown): Promise<unknown> => {
    if (v instanceof Ref) {
      const id = v.kind === "download" ? "" : await get(v.kind);
      fromRefs.add(id);
      return ["list", "association"].includes(v.kind) ? Number(id) : id;
    }
    if (Array.isArray(v)) return Promise.all(v.map(fill));
    if (v && typeof v === "object" && !Buffer.isBuffer(v))
      return Object.fromEntries(await Promise.all(Object.entries(v).map(async ([k, x]) => [k, await fill(x)])));
    return v;
  };
  const pathValues: Record<string, string> = {};
  for (const [name, v] of Object.entries(c.path)) {
    pathValues[name] = v instanceof Ref && v.kind === "download" ? seeds.download[name as "expires"] : String(await fill(v));
    if (v instanceof Ref) fromRefs.add(pathValues[name]!);
  }
  if (op.path.includes("/download/") && c.path.exportId instanceof Ref) pathValues.exportId = seeds.download.exportId;
  return {
    fromRefs,
    path: pathValues,
    query: (await fill(c.query)) as Record<string, unknown>,
    headers: (await fill(c.headers)) as Record<string, unknown>,
    body: await fill(c.body),
  };
}

/** Fields and parameters whose value names a resource but was not one the walk seeded for this request (dotted paths). */
function unseeded(op: Operation, r: Resolved & { fromRefs: Set<string> }): string[] {
  const out: string[] = [];
  for (const p of op.params.filter((x) => x.in === "path")) if (!r.fromRefs.has(r.path[p.name]!)) out.push(p.name);
  const walk = (v: unknown, name: string, at: string) => {
    if (Array.isArray(v)) v.forEach((x) => walk(x, name, at));
    else if (fieldKind(op, name) && v !== undefined && v !== null && !r.fromRefs.has(String(v))) out.push(at);
    else if (v && typeof v === "object") for (const [k, x] of Object.entries(v)) walk(x, k, at ? `${at}.${k}` : k);
  };
  for (const p of op.params.filter((x) => x.in === "query")) walk(r.query[p.name], p.name, p.name);
  if (op.body?.mediaType === "application/json") walk(r.body, "", "");
  if (op.body?.mediaType === "multipart/form-data") walk({ ...(r.body as object), file: undefined }, "", "");
  return [...new Set(out)];
}

/** Why a refusal of a valid input is one the document states (null: it is not). */
function refusalStated(op: Operation, r: Resolved & { fromRefs: Set<string> }, status: number, problem: any, reused: boolean, url: string): string | null {
  const random = unseeded(op, r);
  // The document's own description: a request line over 256 KiB is a 431 (a query of many long ids can reach it).
  if (status === 431) return Buffer.byteLength(url) > 256 * 1024 && /over 256 KiB are a 431/.test(doc.info.description) ? "a request line over 256 KiB" : null;
  if (status === 404 || (status === 403 && !op.needsKey)) return random.length ? `names ${random.join(", ")}, which the account does not have` : null;
  if (status === 409) return "a documented conflict";
  if (status === 422) return reused ? "Idempotency-Key used before" : null;
  if (status !== 400) return null;
  const errors: Array<{ path: string; message: string }> = problem?.errors ?? [];
  if (!errors.length) return null;
  const schemaOf = (field: string) => op.params.find((p) => p.name === field.split(/[.[]/)[0])?.schema ?? op.body?.schema;
  for (const e of errors) {
    const field = e.path.replace(/\[\d+\]/g, "");
    if (random.includes(field)) continue;
    const texts = [op.description, ...api.descriptionsAlong(schemaOf(field), field), ...op.params.filter((p) => p.name === field).map((p) => p.description)];
    const sent = field.split(".").reduce((o: any, k) => o?.[k], { ...r.query, ...(r.body as object) });
    const ok = STATED.some(
      (s) =>
        s.field.test(field) &&
        s.rule.test(e.message) &&
        s.says.test((s.global ? [doc.info.description, ...texts] : texts).join("\n")) &&
        (!s.op || s.op.test(op.key)) &&
        (!s.sent || s.sent(sent)),
    );
    if (!ok) return null;
  }
  return "a rule the document states in words";
}

describe("conformance walk of openapi.json", () => {
  it("flags what the document does not allow (the walk's own checks work)", () => {
    const op = OPERATIONS.find((o) => o.key === "GET /contacts/{id}")!;
    const r: Resolved = { path: { id: "0b6e4c1e-8a8c-4f5e-9a0e-3d2f1c4b5a69" }, query: {}, headers: { "X-Request-Id": "walk-1" }, body: undefined };
    const answer = (status: number, json: unknown, headers: Record<string, string> = { "x-request-id": "walk-1" }) => {
      const mediaType = status >= 400 ? "application/problem+json" : "application/json";
      return checkAnswer(api, op, r, { status, headers: new Headers(headers), mediaType, text: JSON.stringify(json), json, url: "" }, () => null).map(
        (f) => f.rule,
      );
    };
    const problem = (status: number) => ({ type: "/docs#x", title: "x", status, detail: "x", requestId: "walk-1" });
    expect(answer(503, problem(503))).toContain("answered a 5xx");
    expect(answer(418, problem(418))).toContain("status not documented");
    expect(answer(200, { id: 1 })).toContain("body does not match its documented schema");
    expect(answer(400, problem(400))).toContain("a valid input refused for a reason the document does not state");
    expect(answer(404, { ...problem(404), requestId: "other" })).toContain("problem requestId differs from X-Request-Id");
    expect(answer(404, problem(404), { "x-request-id": "replaced" })).toContain("a well-formed X-Request-Id not kept");
  });

  it("keeps an allowance only while the document still says it", () => {
    const texts: string[] = [];
    const collect = (v: unknown): void => {
      if (Array.isArray(v)) v.forEach(collect);
      else if (v && typeof v === "object")
        for (const [k, x] of Object.entries(v)) {
          if (k === "description" && typeof x === "string") texts.push(x);
          else collect(x);
        }
    };
    collect(doc);
    const all = texts.join("\n");
    expect(STATED.filter((s) => !s.says.test(all)).map((s) => String(s.says))).toEqual([]);
  });

  it("walks every operation of the document", () => {
    const documented = Object.entries(doc.paths as Record<string, object>).flatMap(([p, item]) => Object.keys(item).map((m) => `${m.toUpperCase()} ${p}`));
    expect(OPERATIONS.map((o) => o.key).sort()).toEqual(documented.sort());
    for (const op of OPERATIONS) expect({ op: op.key, responses: Object.keys(op.responses).length > 0 }).toEqual({ op: op.key, responses: true });
    // A path parameter the seeds cannot fill (a new collection): add it to COLLECTIONS in conformance-seeds.ts.
    const unfilled = OPERATIONS.flatMap((op) => op.params.filter((p) => p.in === "path" && !paramKind(op, p.name)).map((p) => `${op.key} {${p.name}}`));
    expect(unfilled).toEqual([]);
  });

  it.each(OPERATIONS.map((op, i) => [op.key, op, i] as const))("%s answers generated valid requests as documented", async (_key, op, i) => {
    const findings: Finding[] = [];
    const singleton = !op.path.includes("{") && OPERATIONS.some((o) => o.path === op.path && o.method === "DELETE" && !o.params.some((p) => p.required));
    const runs = op.body ? RUNS_WITH_BODY : RUNS;
    const cases = fc.sample(caseArbitrary(op), { seed: SEED + i, numRuns: runs });
    for (const [k, c] of cases.entries()) {
      c.state = STATES[k % STATES.length]!; // every state a campaign is made in, in turn
      const r = await resolve(op, c);
      const invalid = invalidParts(api, op, r);
      if (invalid.length) {
        findings.push({ rule: "generator made an input the document calls invalid", op: op.key, status: 0, detail: invalid.join("; "), input: "" });
        continue;
      }
      if (singleton) await seeds.webhook(op.method !== "POST");
      const idem = Object.entries(r.headers).find(([k]) => k.toLowerCase() === "idempotency-key")?.[1] as string | undefined;
      const reused = idem !== undefined && usedIdempotencyKeys.has(idem);
      const res = await sendCase(t, seeds.a, op, r);
      if (idem !== undefined) usedIdempotencyKeys.add(idem);
      if (res.status >= 200 && res.status < 300) succeeded.add(op.key);
      // CONFORMANCE_LOG=<file>: every request and the start of its answer, to see what the walk sent.
      if (process.env.CONFORMANCE_LOG)
        fs.appendFileSync(process.env.CONFORMANCE_LOG, `${res.status} ${describeInput(op, r).slice(0, 400)} => ${res.text.slice(0, 300)}\n`);
      findings.push(...checkAnswer(api, op, r, res, (status, problem) => refusalStated(op, r, status, problem, reused, res.url)));
    }
    if (!succeeded.has(op.key))
      findings.push({ rule: "no generated request reached a success answer", op: op.key, status: 0, detail: `${runs} requests`, input: "" });
    expect(summarise(findings)).toEqual([]);
  });
});
