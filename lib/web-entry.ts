/**
 * moleculer-web's entry for an HTTP request, without a broker call for its own `rest` action.
 *
 * moleculer-web answers each request by calling its private `rest` action through the broker
 * (`this.actions.rest(...)`): a Context, then every broker middleware of the node (request scope,
 * database-outage mapping, context tracking, time-out, error handler, request metrics) wrapped
 * around a handler that only routes. The action the route then calls passes through the same chain
 * again, as it must. Both listeners (the partner gateway and the internal ingress) already give the
 * request its id, log scope, access log, metrics and drain bookkeeping themselves, so here the
 * `rest` handler is run directly on a Context made for it: the same Context (req.$ctx, the parent of
 * the action's call, with the request id) and the same routing, errors and 404s as moleculer-web's
 * own `httpHandler` (moleculer-web 0.11, src/index.js), without the chain.
 *
 * With tracing on, the broker path is kept: the Tracing middleware's span of the `rest` action is the
 * root span of a request's trace.
 */
import { createRequire } from "node:module";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Context, Service, ServiceBroker } from "moleculer";

/**
 * moleculer-web writes `logger.debug("  Alias:", alias.toString())` for every routed request, and
 * the argument is built (padded, coloured with kleur) even when debug is off: about 1 % of the
 * gateway's CPU at load. An alias's text never changes once it is made, so it is made once.
 */
const Alias = createRequire(__filename)("moleculer-web/src/alias.js") as { prototype: { toString(): string } };
const aliasText = Alias.prototype.toString;
const aliasTexts = new WeakMap<object, string>();
Alias.prototype.toString = function memoizedAliasText(this: object): string {
  let text = aliasTexts.get(this);
  if (text === undefined) aliasTexts.set(this, (text = aliasText.call(this)));
  return text;
};

type RestHandler = (ctx: Context) => Promise<unknown>;

interface WebService {
  broker: ServiceBroker;
  actions: Record<string, (params: unknown, opts: Record<string, unknown>) => Promise<unknown>>;
  settings: unknown;
  serve?: (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;
  corsHandler(settings: unknown, req: IncomingMessage, res: ServerResponse): boolean;
  send404(req: IncomingMessage, res: ServerResponse): void;
  errorHandler(req: IncomingMessage, res: ServerResponse, err: unknown): void;
  logger: { debug(...args: unknown[]): void };
}

interface RestEntry {
  handler: RestHandler;
  endpoint: unknown;
}

const entries = new WeakMap<object, RestEntry | null>();

/** Marks a Context made here for a request (not by the broker): the request's action call may run on it. */
const DIRECT = Symbol("web-entry.direct");

/** The `rest` action's own handler (before middlewares) and a private endpoint for its Contexts; null when tracing needs the broker path. */
function restEntry(svc: WebService & Service): RestEntry | null {
  let entry = entries.get(svc);
  if (entry !== undefined) return entry;
  entry = null;
  const tracing = (svc.broker as unknown as { isTracingEnabled(): boolean }).isTracingEnabled();
  const spec = (svc as unknown as { _serviceSpecification?: { actions?: Record<string, { handler: RestHandler }> } })._serviceSpecification;
  const action = spec?.actions?.[`${svc.fullName}.rest`];
  if (!tracing && action && typeof action.handler === "function") {
    const registry = svc.broker.registry as unknown as { createPrivateActionEndpoint(action: unknown): unknown };
    entry = { handler: action.handler, endpoint: registry.createPrivateActionEndpoint(action) };
  }
  entries.set(svc, entry);
  return entry;
}

/**
 * moleculer-web's `httpHandler`, calling the `rest` handler directly (see above). `requestId` is the
 * request's own (lib/http.ts tagRequest): the Context's requestID, so every log line and call of the
 * request carries it.
 */
export async function serveWeb(svc: WebService & Service, req: IncomingMessage, res: ServerResponse, requestId: string): Promise<void> {
  const r = req as IncomingMessage & Record<string, unknown>;
  r.$startTime = process.hrtime();
  r.$service = svc;
  r.$next = undefined;
  const s = res as ServerResponse & Record<string, unknown>;
  s.$service = svc;
  s.locals ??= {};
  const options = { requestID: requestId };
  try {
    const entry = restEntry(svc);
    let result: unknown;
    if (entry) {
      const broker = svc.broker as unknown as { ContextFactory: { create(b: unknown, ep: unknown, params: unknown, opts: unknown): Context } };
      const ctx = broker.ContextFactory.create(svc.broker, entry.endpoint, { req, res }, options);
      (ctx as unknown as Record<symbol, boolean>)[DIRECT] = true;
      result = await entry.handler(ctx);
    } else {
      result = await svc.actions.rest!({ req, res }, options);
    }
    if (result == null) {
      // Not routed: moleculer-web's CORS, static files (none here) and 404, as its own handler does.
      if (svc.corsHandler(svc.settings, req, res)) return;
      if (svc.serve) {
        svc.serve(req, res, (err) => {
          svc.logger.debug(err);
          svc.send404(req, res);
        });
        return;
      }
      svc.send404(req, res);
    }
  } catch (err) {
    svc.errorHandler(req, res, err);
  }
}

interface CallRoute {
  callOptions?: Record<string, unknown>;
  logging?: boolean;
  onAfterCall?: (this: unknown, ctx: Context, route: unknown, req: IncomingMessage, res: ServerResponse, data: unknown) => unknown;
}

interface CallService extends WebService {
  fullName: string;
  sendResponse(req: IncomingMessage, res: ServerResponse, data: unknown, action: unknown): void;
  logResponse(req: IncomingMessage, res: ServerResponse, data: unknown): void;
}

/**
 * moleculer-web's `callAction` for a request whose Context was made by serveWeb: the action runs on
 * that Context (the broker's reused-context call) instead of a child Context made for it, so a
 * request makes one Context, not two. What the child would have carried is set on it: the params,
 * the route's call options (time-out), the caller (this service, the label of the action's metrics).
 * Its meta is the request's own, so the action's $statusCode, headers and the rest are where
 * moleculer-web reads them, as after a child's meta was merged back. Returns false (the caller
 * makes the usual call) when the Context is not one of serveWeb's (tracing on) or a stream is sent.
 */
export async function callOnRequestContext(
  svc: CallService,
  route: CallRoute,
  req: IncomingMessage & { $ctx: Context; $endpoint?: unknown },
  res: ServerResponse,
  params: Record<string, unknown>,
  isStream: boolean,
): Promise<boolean> {
  const ctx = req.$ctx as Context & { options: Record<string, unknown>; caller: string | null; [DIRECT]?: boolean };
  if (isStream || !ctx[DIRECT]) return false;
  ctx[DIRECT] = false; // one action per request Context
  ctx.setParams(params);
  ctx.options = { ...route.callOptions };
  ctx.caller = svc.fullName;
  const endpoint = req.$endpoint as { action: unknown };
  let data = await svc.broker.call(endpoint as never, params, { ctx });
  if (route.onAfterCall) data = await route.onAfterCall.call(svc, ctx, route, req, res, data);
  svc.sendResponse(req, res, data, endpoint.action);
  if (route.logging) svc.logResponse(req, res, data);
  return true;
}

interface RoutedService extends WebService {
  logRequest(req: IncomingMessage): void;
  aliasHandler(req: IncomingMessage, res: ServerResponse, alias: unknown): Promise<unknown>;
}

interface WebRoute {
  middlewares: unknown[];
  opts: { mergeParams?: boolean };
}

interface FoundAlias {
  alias: unknown;
  params: Record<string, unknown>;
}

/**
 * moleculer-web's `routeHandler` for a request that matched an alias of a route without
 * middlewares (the partner API): the same steps (request log, CORS, params from body and query,
 * the alias's path params, the alias handler) without the promise it wraps them in, which waits
 * for the answer's finish/close/error besides (three listeners and a closure per request, the
 * largest allocation left per request in bench/gateway). That wait exists for route middlewares,
 * which may answer without calling next; a route with middlewares (the internal ingress) keeps
 * moleculer-web's own. As there, an error after the client has gone is not answered.
 */
export async function routeDirect(
  svc: RoutedService,
  route: WebRoute,
  req: IncomingMessage & Record<string, unknown>,
  res: ServerResponse & Record<string, unknown>,
  found: FoundAlias,
): Promise<unknown> {
  req.$route = route;
  res.$route = route;
  svc.logRequest(req);
  try {
    if (svc.corsHandler(route, req, res)) return true;
    let params: Record<string, unknown>;
    if (route.opts.mergeParams === false) {
      params = { body: req.body, query: req.query, params: found.params };
    } else {
      const body = req.body !== null && typeof req.body === "object" ? req.body : {};
      params = Object.assign({}, body, req.query, found.params);
    }
    req.$params = params;
    req.$alias = found.alias;
    return await svc.aliasHandler(req, res, found.alias);
  } catch (err) {
    if (res.destroyed || res.writableEnded) return true; // moleculer-web's promise had settled on close/finish
    throw err;
  }
}

interface RoutableAlias {
  fullPath: string;
  isMethod(method: string): boolean;
  match(url: string): Record<string, unknown> | false;
}

interface AliasTrie {
  /** Aliases whose literal leading segments end here. */
  here: number[];
  /** Every alias a URL reaching this node may match (this node's and its ancestors'), in list order. */
  all: number[];
  children: Map<string, AliasTrie>;
}

const aliasIndexes = new WeakMap<RoutableAlias[], { length: number; root: AliasTrie }>();

/** Leading segments without a parameter, wildcard or group: what a URL must begin with to match (lower case: path-to-regexp matches case-insensitively). */
function literalSegments(fullPath: string): string[] {
  const out: string[] = [];
  for (const seg of fullPath.toLowerCase().split("/")) {
    if (/[:*?(+{}\\]/.test(seg)) break;
    out.push(seg);
  }
  return out;
}

function buildIndex(aliases: RoutableAlias[]): AliasTrie {
  const root: AliasTrie = { here: [], all: [], children: new Map() };
  aliases.forEach((alias, i) => {
    let node = root;
    for (const seg of literalSegments(alias.fullPath)) {
      let next = node.children.get(seg);
      if (!next) node.children.set(seg, (next = { here: [], all: [], children: new Map() }));
      node = next;
    }
    node.here.push(i);
  });
  const fill = (node: AliasTrie, inherited: number[]) => {
    node.all = [...inherited, ...node.here].sort((x, y) => x - y);
    for (const child of node.children.values()) fill(child, node.all);
  };
  fill(root, []);
  return root;
}

/**
 * moleculer-web's `resolveAlias` (the first alias, in its order, whose method and pattern match),
 * trying only the aliases whose literal leading segments the URL begins with instead of running
 * every alias's regular expression in turn (about 70 on the partner route). The index follows the
 * alias list: moleculer-web replaces the array when routes change (filter), and a push changes its
 * length.
 */
export function resolveIndexed(aliases: RoutableAlias[], url: string, method = "GET"): { alias: RoutableAlias; params: Record<string, unknown> } | false {
  let index = aliasIndexes.get(aliases);
  if (!index || index.length !== aliases.length) aliasIndexes.set(aliases, (index = { length: aliases.length, root: buildIndex(aliases) }));
  // The deepest node the URL's segments reach: its list holds every alias the URL may match.
  const path = url.toLowerCase();
  let node = index.root;
  let start = 0;
  for (;;) {
    const end = path.indexOf("/", start);
    const next = node.children.get(end < 0 ? path.slice(start) : path.slice(start, end));
    if (!next) break;
    node = next;
    if (end < 0) break;
    start = end + 1;
  }
  for (const i of node.all) {
    const alias = aliases[i]!;
    if (alias.isMethod(method)) {
      const params = alias.match(url);
      if (params) return { alias, params };
    }
  }
  return false;
}
