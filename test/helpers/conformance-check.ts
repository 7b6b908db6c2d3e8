/**
 * The conformance walk's two halves that do not depend on the document's content: sending one
 * generated request (JSON, multipart or none; query arrays comma-separated as `style: form,
 * explode: false` says; event streams closed once their headers are in), and checking the answer
 * against what the operation documents.
 */
import type { Account, TestApp } from "./app";
import type { OpenApi, Operation } from "./oas";

/** A request with every placeholder filled: path values as text, the rest as generated. */
export interface Resolved {
  path: Record<string, string>;
  query: Record<string, unknown>;
  headers: Record<string, unknown>;
  body: unknown;
}

export interface Sent {
  status: number;
  headers: Headers;
  mediaType: string;
  text: string;
  json: any;
  url: string;
}

export interface Finding {
  rule: string;
  op: string;
  status: number;
  detail: string;
  input: string;
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

function queryString(query: Record<string, unknown>): string {
  const parts: string[] = [];
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined || v === null) continue; // a null is sent as the parameter's absence
    const text = Array.isArray(v) ? v.map(String).join(",") : String(v);
    parts.push(`${encodeURIComponent(k)}=${encodeURIComponent(text)}`);
  }
  return parts.length ? `?${parts.join("&")}` : "";
}

export function urlOf(op: Operation, r: Resolved): string {
  return op.path.replace(/\{([^}]+)\}/g, (_, n: string) => encodeURIComponent(r.path[n]!)) + queryString(r.query);
}

export async function sendCase(t: TestApp, a: Account, op: Operation, r: Resolved): Promise<Sent> {
  const url = t.api.baseUrl + urlOf(op, r);
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(r.headers)) if (v !== undefined && v !== null) headers[k] = String(v);
  if (op.needsKey) headers["x-api-key"] = a.key.apiKey;
  let body: RequestInit["body"];
  if (op.body?.mediaType === "multipart/form-data" && r.body !== undefined) {
    const form = new FormData();
    for (const [k, v] of Object.entries(r.body as Record<string, any>)) {
      if (v === undefined) continue;
      if (v && typeof v === "object" && "content" in v)
        form.append(k, new Blob([typeof v.content === "string" ? v.content : new Uint8Array(v.content)]), v.name);
      else form.append(k, typeof v === "string" ? v : JSON.stringify(v));
    }
    body = form;
  } else if (op.body && r.body !== undefined) {
    body = JSON.stringify(r.body);
    headers["content-type"] = "application/json";
  }
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), 20_000);
  try {
    const res = await fetch(url, { method: op.method, headers, body, signal: ac.signal, redirect: "manual" });
    const mediaType = (res.headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
    let text = "";
    if (mediaType === "text/event-stream")
      ac.abort(); // the stream stays open: its status and headers are the answer
    else text = /json|text\/(plain|html|csv)/.test(mediaType) || !mediaType ? await res.text() : Buffer.from(await res.arrayBuffer()).toString("latin1");
    let json: any;
    if (/json/.test(mediaType) && text) json = JSON.parse(text);
    return { status: res.status, headers: res.headers, mediaType, text, json, url };
  } finally {
    clearTimeout(timer);
  }
}

/** The request, short enough for a report line. */
export function describeInput(op: Operation, r: Resolved): string {
  const clip = (s: string, n: number) => (s.length > n ? `${s.slice(0, n)}...(${s.length} chars)` : s);
  const headers = Object.keys(r.headers).length ? ` headers ${clip(JSON.stringify(r.headers), 200)}` : "";
  let body = "";
  if (op.body?.mediaType === "multipart/form-data" && r.body)
    body = ` form ${clip(JSON.stringify({ ...(r.body as object), file: (r.body as any).file?.name }), 300)}`;
  else if (r.body !== undefined) body = ` body ${clip(JSON.stringify(r.body), 300)}`;
  return `${op.method} ${clip(urlOf(op, r), 300)}${headers}${body}`;
}

/**
 * Everything the document promises about this answer. `stated` says why a 4xx refusal of the (valid)
 * input is one the document states, or null when it is not.
 */
export function checkAnswer(api: OpenApi, op: Operation, r: Resolved, res: Sent, stated: (status: number, problem: any) => string | null): Finding[] {
  const out: Finding[] = [];
  const add = (rule: string, detail: string) => out.push({ rule, op: op.key, status: res.status, detail, input: describeInput(op, r) });
  const head = op.method === "HEAD"; // headers only: no body to check
  const problem = res.mediaType === "application/problem+json" ? res.json : undefined;
  const said = problem ? `${problem.type}: ${problem.detail}${problem.errors ? ` errors ${JSON.stringify(problem.errors)}` : ""}` : res.text.slice(0, 200);
  if (res.status >= 500) add("answered a 5xx", said);
  const documented = op.responses[String(res.status)] ?? op.responses[`${String(res.status)[0]}XX`] ?? op.responses.default;
  if (!documented) add("status not documented", `documented: ${Object.keys(op.responses).join(", ")}; answered ${said}`);
  else {
    const types = Object.keys(documented.content);
    if (head) {
      if (res.text !== "") add("a body on an answer to HEAD", res.text.slice(0, 200));
    } else if (!types.length) {
      if (res.text !== "") add("a body on an answer documented without one", res.text.slice(0, 200));
    } else if (!types.includes(res.mediaType)) add("media type not documented", `${res.mediaType || "(none)"} not in ${types.join(", ")}`);
    else {
      const schema = documented.content[res.mediaType];
      const errors = schema && /json/.test(res.mediaType) ? api.errors(schema, res.json) : null;
      if (errors) add("body does not match its documented schema", `${errors.slice(0, 6).join("; ")} in ${res.text.slice(0, 300)}`);
    }
    for (const [name, schema] of Object.entries(documented.headers)) {
      const v = res.headers.get(name);
      if (v !== null && schema.type === "integer" && !/^\d+$/.test(v)) add("header does not match its documented schema", `${name}: ${v}`);
    }
  }
  const rid = res.headers.get("x-request-id");
  const sentRid = Object.entries(r.headers).find(([k]) => k.toLowerCase() === "x-request-id")?.[1];
  if (!rid) add("no X-Request-Id", "");
  // A 431 is answered before the request's headers are read: its id is a fresh one (the document says so).
  else if (typeof sentRid === "string" && REQUEST_ID.test(sentRid) && rid !== sentRid && res.status !== 431)
    add("a well-formed X-Request-Id not kept", `${sentRid} -> ${rid}`);
  if (res.status >= 400 && !problem && !head) add("an error that is not a problem", `${res.mediaType}: ${res.text.slice(0, 200)}`);
  if (head && res.status >= 400 && res.mediaType !== "application/problem+json") add("an error that is not a problem", res.mediaType);
  if (problem && problem.requestId !== rid) add("problem requestId differs from X-Request-Id", `${problem.requestId} vs ${rid}`);
  if (res.status >= 400 && res.status < 500 && !stated(res.status, problem)) add("a valid input refused for a reason the document does not state", said);
  return out;
}

/** The parts of a resolved request the document calls invalid (the generator's own check). */
export function invalidParts(api: OpenApi, op: Operation, r: Resolved): string[] {
  const out: string[] = [];
  for (const p of op.params) {
    const raw = p.in === "path" ? r.path[p.name] : p.in === "query" ? r.query[p.name] : r.headers[p.name];
    if (raw === undefined) continue;
    const value = p.in === "path" && ["integer", "number"].includes(p.schema.type) ? Number(raw) : raw;
    const errors = api.errors(p.schema, value);
    if (errors) out.push(`${p.in} ${p.name}=${JSON.stringify(value).slice(0, 80)}: ${errors.join(", ")}`);
  }
  if (op.body && r.body !== undefined) {
    const value = op.body.mediaType === "multipart/form-data" ? { ...(r.body as object), file: "" } : r.body;
    const errors = api.errors(op.body.schema, value);
    if (errors) out.push(`body ${JSON.stringify(value).slice(0, 200)}: ${errors.join(", ")}`);
  }
  return out;
}

/** One line per kind of finding (rule, operation, status, the problem's fields), with one example request. */
export function summarise(findings: Finding[]): string[] {
  const groups = new Map<string, { n: number; first: Finding }>();
  for (const f of findings) {
    const key = `${f.rule} | ${f.op} | ${f.status} | ${f.detail.replace(/\d+/g, "N").slice(0, 200)}`;
    const g = groups.get(key);
    if (g) g.n++;
    else groups.set(key, { n: 1, first: f });
  }
  return [...groups.values()].map(({ n, first: f }) => `${f.rule}: ${f.op} -> ${f.status} (${n}x) ${f.detail.slice(0, 400)} | e.g. ${f.input.slice(0, 600)}`);
}
