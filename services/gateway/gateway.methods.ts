/**
 * Which path of the API a URL names, and so which methods it has. A fixed path owns its URLs even
 * where a sibling with a parameter would match them too: `/authentication/me` is not a key whose
 * id is "me", so `DELETE /authentication/me` is a 405 whose `Allow` lists exactly the methods of
 * `/authentication/me`, never a call of `DELETE /authentication/{id}`. Of the paths that match a
 * URL, the owner is the one with a literal segment where the others have a parameter, compared
 * segment by segment from the left. The paths are the API's fixed table (lib/http/api-routes.ts) and
 * the routes the gateway serves right now (gateway.routes.ts: test-only actions, an action newer than the table).
 */
import { API_PREFIX } from "../../lib/http/api";
import { API_ROUTES } from "../../lib/http/api-routes";

export const METHOD_ORDER = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];

/** A route as far as ownership goes (a RouteEntry of gateway.routes.ts). */
export interface OwnedAlias {
  method: string;
  fullPath?: string;
  path: string;
  isMethod?(method: string): boolean;
  match(url: string): Record<string, unknown> | false;
}

interface PathTemplate {
  /** Lower case, every parameter as `{}`: two spellings of one path share it. */
  shape: string;
  /** Per segment, whether it is a parameter. */
  params: boolean[];
  re: RegExp;
}

const templates = new Map<string, PathTemplate>();

const escape = (s: string) => s.replace(/[.*+?^$()|[\]\\{}]/g, "\\$&");

/** A full path template, `/api/.../contacts/{id}` or moleculer-web's `/api/.../contacts/:id`. */
function templateOf(full: string): PathTemplate {
  let t = templates.get(full);
  if (t) return t;
  const segments = full.split("/").map((seg) => (/^(?::[A-Za-z0-9_]+|\{[A-Za-z0-9_]+\})$/.test(seg) ? null : seg));
  t = {
    shape: segments.map((s) => (s === null ? "{}" : s.toLowerCase())).join("/"),
    params: segments.map((s) => s === null),
    // Case-insensitive, as path-to-regexp matches the aliases.
    re: new RegExp(`^${segments.map((s) => (s === null ? "[^/]+" : escape(s))).join("/")}/?$`, "i"),
  };
  templates.set(full, t);
  return t;
}

/** Whether `a` owns the URLs both match: a literal segment where `b` has a parameter, first from the left. */
function outranks(a: PathTemplate, b: PathTemplate): boolean {
  for (let i = 0; i < a.params.length; i++) if (a.params[i] !== b.params[i]) return !a.params[i];
  return false;
}

/** Whether some URL matches both (same segment count; wherever both are literal, the same literal). */
function overlap(a: PathTemplate, b: PathTemplate): boolean {
  if (a.params.length !== b.params.length || a.shape === b.shape) return false;
  const sa = a.shape.split("/");
  const sb = b.shape.split("/");
  return sa.every((s, i) => a.params[i] || b.params[i] || s === sb[i]);
}

const FIXED = API_ROUTES.map(([method, path]) => ({ method, template: templateOf(API_PREFIX + path) }));

const aliasTemplate = (alias: OwnedAlias) => templateOf(alias.fullPath ?? alias.path);

/** The methods of the path that owns `url` (empty: no path of the API or the aliases matches it), in the usual order. */
export function pathMethods(aliases: readonly OwnedAlias[], url: string): string[] {
  const path = url.length > 1 && url.endsWith("/") ? url.slice(0, -1) : url;
  const matching: Array<{ method: string; template: PathTemplate }> = FIXED.filter((r) => r.template.re.test(path));
  for (const a of aliases) if (a.method !== "*" && a.match(path)) matching.push({ method: a.method, template: aliasTemplate(a) });
  let owner: PathTemplate | undefined;
  for (const m of matching) if (!owner || outranks(m.template, owner)) owner = m.template;
  const methods = new Set(matching.filter((m) => m.template.shape === owner!.shape).map((m) => m.method));
  return [...methods].sort((a, b) => METHOD_ORDER.indexOf(a) - METHOD_ORDER.indexOf(b));
}

/** Per alias: the paths that outrank it on some URL it matches (none for most), as patterns. */
const shadowsOf = new WeakMap<object, RegExp[]>();

function shadows(aliases: readonly OwnedAlias[], alias: OwnedAlias): RegExp[] {
  let out = shadowsOf.get(alias);
  if (out) return out;
  const mine = aliasTemplate(alias);
  const others = new Map<string, PathTemplate>();
  for (const r of FIXED) others.set(r.template.shape, r.template);
  for (const a of aliases) if (a.method !== "*") others.set(aliasTemplate(a).shape, aliasTemplate(a));
  out = [...others.values()].filter((t) => overlap(t, mine) && outranks(t, mine)).map((t) => t.re);
  shadowsOf.set(alias, out);
  return out;
}

/**
 * moleculer-web's resolution (`found`: the alias it matched, whose function runs this) kept only
 * when the alias's path owns the URL. Otherwise the owner's alias of this method, or
 * nothing: the request is then answered like any unrouted one (405 with the owner's methods, or 503
 * when the owner has the method but no node serves it right now).
 */
export function ownedAlias<A extends OwnedAlias>(
  aliases: readonly A[],
  url: string,
  method: string,
  found: { alias: A; params: Record<string, unknown> } | false,
): { alias: A; params: Record<string, unknown> } | false {
  if (!found) return found;
  const over = shadows(aliases, found.alias);
  if (over.length === 0 || !over.some((re) => re.test(url))) return found;
  let owner: PathTemplate | undefined;
  for (const a of aliases) {
    if (a.method === "*" || (a.isMethod ? !a.isMethod(method) : a.method !== method)) continue;
    const params = a.match(url);
    if (!params) continue;
    const t = aliasTemplate(a);
    if (!owner || outranks(t, owner)) {
      owner = t;
      found = { alias: a, params };
    }
  }
  // The owner of the URL is a path this method's aliases do not have.
  return found && shadows(aliases, found.alias).some((re) => re.test(url)) ? false : found;
}
