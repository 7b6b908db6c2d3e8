/**
 * lib/http/moleculer-web.ts writeAnswer answers an action's result as moleculer-web does (its
 * documented ctx.meta conventions), which the gateway's function aliases rely on: the same results
 * go through moleculer-web's own action alias and through a function alias that calls the action
 * and hands the result to writeAnswer, and every answer (status, message, headers, body) must agree.
 * It fails the day a moleculer-web upgrade answers differently (the package is pinned to 0.11.0).
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { Readable } from "node:stream";
import { ServiceBroker, type Context, type ServiceSchema } from "moleculer";
import ApiGateway from "moleculer-web";
import { writeAnswer, type AnswerMeta } from "../../lib/http/moleculer-web";

type Meta = AnswerMeta & Record<string, unknown>;
const ETAG = '"v1-abc"';

/** Each case: what the action sets in ctx.meta and answers. */
const CASES: Record<string, (meta: Meta) => unknown> = {
  object: () => ({ a: 1, b: [true, null] }),
  array: () => [1, "x"],
  string: () => "hello",
  number: () => 42,
  boolean: () => false,
  nothing: () => null,
  buffer: () => Buffer.from("raw bytes"),
  jsonBuffer: () => JSON.parse(JSON.stringify(Buffer.from("via json"))),
  stream: () => Readable.from([Buffer.from("ab"), Buffer.from("cd")]),
  created: (m) => ((m.$statusCode = 201), (m.$location = "/things/1"), { id: 1 }),
  createdNoLocation: (m) => ((m.$statusCode = 201), { id: 2 }),
  accepted: (m) => ((m.$statusCode = 202), (m.$location = "/jobs/1"), { job: 1 }),
  noContent: (m) => ((m.$statusCode = 204), { ignored: true }),
  redirect: (m) => ((m.$statusCode = 302), (m.$location = "/elsewhere"), null),
  message: (m) => ((m.$statusCode = 200), (m.$statusMessage = "Fine"), { ok: true }),
  csv: (m) => ((m.$responseType = "text/csv; charset=utf-8"), "a,b\n1,2\n"),
  typedNumber: (m) => ((m.$responseType = "text/plain"), 7),
  typedObject: (m) => ((m.$responseType = "application/x-thing"), { a: 1 }),
  headers: (m) => ((m.$responseHeaders = { "X-One": "1", "Content-Type": "text/plain" }), "text"),
  headersAndType: (m) => ((m.$responseType = "text/html"), (m.$responseHeaders = { "Content-Type": "text/plain", "X-Two": "2" }), "<b>"),
  etag: (m) => ((m.$responseHeaders = { ETag: ETAG, "Cache-Control": "private" }), { a: 1 }),
  etagStream: (m) => ((m.$responseHeaders = { ETag: ETAG, "Content-Type": "image/png" }), Readable.from([Buffer.from("png")])),
  partial: (m) => ((m.$statusCode = 206), (m.$responseHeaders = { ETag: ETAG, "Content-Range": "bytes 0-1/4" }), Buffer.from("pn")),
  lastModified: (m) => ((m.$responseHeaders = { "Last-Modified": "Wed, 01 Jan 2025 00:00:00 GMT" }), { a: 1 }),
};

const REQUESTS: Array<{ method: string; name: string; headers?: Record<string, string> }> = [
  ...Object.keys(CASES).map((name) => ({ method: "GET", name })),
  ...["object", "stream", "buffer", "nothing", "etag"].map((name) => ({ method: "HEAD", name })),
  ...[ETAG, `W/${ETAG}`, '"other"', "*", `"x", ${ETAG}`].flatMap((inm) =>
    ["etag", "etagStream", "partial", "object"].map((name) => ({ method: "GET", name, headers: { "If-None-Match": inm } })),
  ),
  { method: "GET", name: "etag", headers: { "If-None-Match": ETAG, "Cache-Control": "no-cache" } },
  { method: "GET", name: "lastModified", headers: { "If-Modified-Since": "Thu, 02 Jan 2025 00:00:00 GMT" } },
  { method: "GET", name: "lastModified", headers: { "If-Modified-Since": "Tue, 31 Dec 2024 00:00:00 GMT" } },
];

let broker: ServiceBroker;
const servers: http.Server[] = [];
let ownPort = 0;
let oursPort = 0;

function listen(svc: { express(): (req: unknown, res: unknown, next: () => void) => void }): Promise<number> {
  const handler = svc.express();
  const server = http.createServer((req, res) =>
    handler(req, res, () => {
      res.statusCode = 404;
      res.end();
    }),
  );
  servers.push(server);
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve((server.address() as AddressInfo).port)));
}

beforeAll(async () => {
  broker = new ServiceBroker({ logger: false });
  broker.createService({
    name: "parity",
    actions: {
      answer(ctx: Context<{ name: string }, Meta>) {
        return CASES[ctx.params.name]!(ctx.meta);
      },
    },
  });
  const gateway = (name: string, aliases: Record<string, unknown>) =>
    broker.createService({
      name,
      mixins: [ApiGateway as unknown as ServiceSchema],
      settings: { server: false, logRequest: null, logResponse: null, routes: [{ path: "/", mappingPolicy: "restrict", aliases }] },
    }) as unknown as { express(): (req: unknown, res: unknown, next: () => void) => void };
  // moleculer-web's own: an action alias (its call, its answer).
  const own = gateway("own", { "GET /a/:name": "parity.answer", "HEAD /a/:name": "parity.answer" });
  // Ours: a function alias that calls the action and answers with writeAnswer, as the gateway's do.
  function ours(this: unknown, req: http.IncomingMessage & { $ctx: Context<unknown, Meta>; $params: { name: string } }, res: http.ServerResponse) {
    req.$ctx.call("parity.answer", { name: req.$params.name }).then(
      (data) => writeAnswer(req, res, req.$ctx.meta, data, broker.logger),
      (err: Error) => {
        res.statusCode = 599;
        res.end(err.message);
      },
    );
  }
  const mine = gateway("ours", { "GET /a/:name": ours, "HEAD /a/:name": ours });
  await broker.start();
  ownPort = await listen(own);
  oursPort = await listen(mine);
});

afterAll(async () => {
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  await broker?.stop();
});

interface Answer {
  status: number;
  message: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

function send(port: number, method: string, path: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: "127.0.0.1", port, method, path, headers: { Connection: "close", ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const { date: _date, "x-request-id": _id, ...rest } = res.headers;
        resolve({ status: res.statusCode ?? 0, message: res.statusMessage ?? "", headers: rest, body: Buffer.concat(chunks).toString("latin1") });
      });
    });
    req.on("error", reject);
    req.end();
  });
}

it("answers every result as moleculer-web's own action alias does", async () => {
  for (const r of REQUESTS) {
    const theirs = await send(ownPort, r.method, `/a/${r.name}`, r.headers);
    const mine = await send(oursPort, r.method, `/a/${r.name}`, r.headers);
    expect({ request: r, answer: mine }).toEqual({ request: r, answer: theirs });
  }
});

it("covers the statuses the gateway's actions use", async () => {
  const statuses = new Set<number>();
  for (const r of REQUESTS) statuses.add((await send(oursPort, r.method, `/a/${r.name}`, r.headers)).status);
  expect([...statuses].sort()).toEqual([200, 201, 202, 204, 206, 302, 304]);
});
