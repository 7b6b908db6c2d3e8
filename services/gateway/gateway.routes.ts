/**
 * The gateway's routing table and the moleculer-web routes made of it. The table is built here from
 * the `rest` declarations of the actions the cluster publishes right now (and the ops route's paths),
 * not read from moleculer-web: it answers 404/405/OPTIONS (gateway.answers.ts) and decides which path
 * owns a URL (gateway.methods.ts). Each partner route becomes one documented custom-function alias
 * (`"GET /contacts/:id"(req, res) {...}`) whose handler runs the partner call itself
 * (gateway.calls.ts); the route is installed with moleculer-web's documented `addRoute`.
 */
import type { ServerResponse } from "node:http";
import ApiGateway from "moleculer-web";
import { API_PREFIX, type ApiAction } from "../../lib/http/api";
import type { ExposedAction } from "../../lib/http/openapi";
import type { OwnedAlias } from "./gateway.methods";
import type { GwRequest } from "./gateway.request";

/** One route: a method on a path template, the action it calls (null: an ops route answered by its own function). */
export interface RouteEntry extends OwnedAlias {
  method: string;
  /** The full path in moleculer-web's form: `/api/partner-gateway/v1/contacts/:id`. */
  path: string;
  fullPath: string;
  action: (ApiAction & { name: string }) | null;
  /** The options of the action's call: its own timeout, else the gateway's (made once per route, not per request). */
  callOptions: { timeout: number };
  match(url: string): Record<string, string> | false;
}

export type AliasHandler = (this: unknown, req: GwRequest, res: ServerResponse) => unknown;

const escape = (s: string) => s.replace(/[.*+?^$()|[\]\\{}]/g, "\\$&");

/** A path's matcher as path-to-regexp builds moleculer-web's (case-insensitive, an optional trailing slash, decoded params). */
function matcher(fullPath: string): (url: string) => Record<string, string> | false {
  const keys: string[] = [];
  const source = fullPath
    .split("/")
    .map((seg) => {
      const param = /^:([A-Za-z0-9_]+)$/.exec(seg);
      if (!param) return escape(seg);
      keys.push(param[1]!);
      return "([^/]+?)";
    })
    .join("/");
  const re = new RegExp(`^${source}/?$`, "i");
  return (url) => {
    const m = re.exec(url);
    if (!m) return false;
    const params: Record<string, string> = {};
    for (let i = 0; i < keys.length; i++) {
      try {
        params[keys[i]!] = decodeURIComponent(m[i + 1]!);
      } catch {
        throw new ApiGateway.Errors.BadRequestError("ERR_UNABLE_DECODE_PARAM", { param: m[i + 1] });
      }
    }
    return params;
  };
}

function routeEntry(method: string, fullPath: string, action: RouteEntry["action"], timeout: number): RouteEntry {
  return { method, path: fullPath, fullPath, action, callOptions: { timeout }, match: matcher(fullPath) };
}

/** "GET /contacts/:id" -> ["GET", "/contacts/:id"]; a path without its trailing slash, as moleculer-web keeps it. */
function parseRest(rest: string): [string, string] {
  const [method, raw] = rest.trim().split(/\s+/);
  let path = `/${raw ?? ""}`.replace(/\/{2,}/g, "/");
  if (path.length > 1 && path.endsWith("/")) path = path.slice(0, -1);
  return [method!, path];
}

/**
 * The partner routes of `actions` (every service declares `rest: "/"`, so an action's path is its
 * `rest` under the API prefix): the table's entries and the route's aliases, one function per route,
 * each handing its entry to `serve`. Of two actions on one method and path, the first is kept.
 */
export function partnerRoutes(
  actions: readonly ExposedAction[],
  defaultTimeoutMs: number,
  serve: (entry: RouteEntry, req: GwRequest, res: ServerResponse) => void,
): { entries: RouteEntry[]; aliases: Record<string, AliasHandler> } {
  const entries: RouteEntry[] = [];
  const aliases: Record<string, AliasHandler> = {};
  for (const action of actions) {
    const [method, path] = parseRest(action.rest);
    const key = `${method} ${path}`;
    if (aliases[key]) continue;
    const timeout = (action as { timeout?: number }).timeout || defaultTimeoutMs;
    const entry = routeEntry(method, API_PREFIX + path, action as RouteEntry["action"], timeout);
    entries.push(entry);
    aliases[key] = (req, res) => serve(entry, req, res);
  }
  return { entries, aliases };
}

/** The ops route's entries (its paths are under "/"), for 404/405/OPTIONS. */
export function opsEntries(aliases: Record<string, unknown>): RouteEntry[] {
  return Object.keys(aliases).map((key) => {
    const [method, path] = parseRest(key);
    return routeEntry(method, path, null, 0);
  });
}

/**
 * The ops route's aliases, each naming its path for the access log and metrics, and answering a
 * failure as a problem (an async alias that rejects would otherwise leave the request unanswered).
 */
export function labelledOps(
  aliases: Record<string, AliasHandler>,
  onError: (self: unknown, req: GwRequest, res: ServerResponse, err: unknown) => void,
): Record<string, AliasHandler> {
  const out: Record<string, AliasHandler> = {};
  for (const [key, fn] of Object.entries(aliases)) {
    const [, path] = parseRest(key);
    out[key] = function (this: unknown, req, res) {
      req.$apiRoute = path;
      try {
        return Promise.resolve(fn.call(this, req, res)).catch((err: unknown) => onError(this, req, res, err));
      } catch (err) {
        return onError(this, req, res, err);
      }
    };
  }
  return out;
}
