/**
 * lib/web-entry.ts resolveIndexed finds the alias moleculer-web's own linear resolveAlias finds
 * (the first in order whose method and path-to-regexp pattern match), for every URL tried.
 */
import { pathToRegexp } from "path-to-regexp";
import { resolveIndexed } from "../../lib/web-entry";

function alias(method: string, fullPath: string) {
  const { regexp, keys } = pathToRegexp(fullPath, {});
  return {
    method,
    fullPath,
    isMethod: (m: string) => method === "*" || method === m,
    match(url: string) {
      const m = regexp.exec(url);
      if (!m) return false;
      const params: Record<string, string> = {};
      keys.forEach((k, i) => m[i + 1] !== undefined && (params[k.name] = m[i + 1]!));
      return params;
    },
  };
}

const linear = (aliases: ReturnType<typeof alias>[], url: string, method: string) => {
  for (const a of aliases) if (a.isMethod(method)) if (a.match(url)) return a;
  return undefined;
};

const ALIASES = [
  alias("GET", "/healthz/live"),
  alias("GET", "/api/v1/contacts"),
  alias("POST", "/api/v1/contacts"),
  alias("GET", "/api/v1/contacts/:id"),
  alias("GET", "/api/v1/contacts/lists"),
  alias("GET", "/api/v1/messages/status"),
  alias("GET", "/api/v1/exports/:id/download/:expires/:sig"),
  alias("*", "/api/v1/files/*rest"),
  alias("GET", "/api/v1/docs{/:page}"),
  alias("GET", "/api/v1/:anything/info"),
  alias("GET", "/openapi.json"),
  alias("GET", "/"),
];

describe("resolveIndexed", () => {
  it("picks the alias the linear scan picks, for every URL and method", () => {
    const urls = [
      "/",
      "/healthz/live",
      "/HEALTHZ/Live",
      "/api/v1/contacts",
      "/api/v1/Contacts/42",
      "/api/v1/contacts/lists",
      "/api/v1/contacts/lists/x",
      "/api/v1/messages/status",
      "/api/v1/exports/e1/download/1790000000/c2ln",
      "/api/v1/files/a/b/c",
      "/api/v1/docs",
      "/api/v1/docs/intro",
      "/api/v1/whatever/info",
      "/api/v1/contacts/info",
      "/openapi.json",
      "/openapiXjson",
      "/api",
      "/nothing/here",
      "/api/v1/\u212Aontacts",
    ];
    for (const url of urls) {
      for (const method of ["GET", "POST", "DELETE"]) {
        const found = resolveIndexed(ALIASES as never, url, method);
        expect([url, method, found ? (found.alias as { fullPath: string }).fullPath : null]).toEqual([
          url,
          method,
          linear(ALIASES, url, method)?.fullPath ?? null,
        ]);
      }
    }
  });

  it("follows the alias list when it changes", () => {
    const list = [alias("GET", "/a/:x")];
    expect(resolveIndexed(list as never, "/a/b", "GET")).toBeTruthy();
    list.unshift(alias("GET", "/a/b"));
    expect((resolveIndexed(list as never, "/a/b", "GET") as { alias: { fullPath: string } }).alias.fullPath).toBe("/a/b");
  });
});
