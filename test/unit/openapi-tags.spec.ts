/**
 * The reference groups operations by tag, in the fixed order of OPENAPI_TAGS: every exposed action of
 * every service must land in one of those groups, and every problem type must be explained.
 */
import { Sequelize } from "sequelize";
import { loadConfig } from "../../lib/config";
import type { Database } from "../../lib/db/db";
import { ERROR_TYPES } from "../../lib/errors";
import { buildOpenApi, OPENAPI_TAGS, operationIdOf, problemExample, problemTypesMarkdown, tagOf, type ExposedAction } from "../../lib/http/openapi";
import { problemTypeUri } from "../../lib/http/problem";
import { SERVICE_FACTORIES } from "../../services";

/** Every action of every service that is exposed over HTTP, named as the registry names it. */
function exposed(): ExposedAction[] {
  const config = loadConfig({ LOG_LEVEL: "silent" }, {}, { runsServices: false });
  const deps = { config, db: { sequelize: new Sequelize("postgres://nobody@127.0.0.1:1/none", { logging: false }) } as unknown as Database };
  const out: ExposedAction[] = [];
  for (const factory of Object.values(SERVICE_FACTORIES)) {
    const svc = factory(deps);
    for (const [name, action] of Object.entries((svc.actions ?? {}) as Record<string, Record<string, unknown>>)) {
      if (action && typeof action === "object" && typeof action.rest === "string") out.push({ ...action, name: `${svc.name}.${name}` } as ExposedAction);
    }
  }
  return out;
}

const TAG_NAMES: string[] = OPENAPI_TAGS.map((t) => t.name);

it("puts every exposed action under one of the listed tags", () => {
  const actions = exposed();
  expect(actions.length).toBeGreaterThan(40);
  const outside = actions.filter((a) => !TAG_NAMES.includes(tagOf(a))).map((a) => `${a.name}: ${tagOf(a)}`);
  expect(outside).toEqual([]);
});

it("lists the issue's groups in order, each described, inbox included", () => {
  expect(TAG_NAMES.slice(0, 12)).toEqual([
    "keys",
    "contacts",
    "lists",
    "imports",
    "tracking",
    "history",
    "webhooks",
    "exports",
    "campaigns",
    "inbox",
    "media",
    "profiles",
  ]);
  expect(new Set(TAG_NAMES).size).toBe(TAG_NAMES.length);
  for (const t of OPENAPI_TAGS) expect(t.description.length).toBeGreaterThan(10);
});

it("writes the tags into the document in that order, even one no operation has yet", () => {
  const doc = buildOpenApi([
    { name: "contacts.createList", rest: "POST /contacts/list", operation: "CONTACTS", tag: "lists" },
    { name: "auth.me", rest: "GET /authentication/me", operation: "AUTHENTICATION", tag: "keys" },
  ]) as { tags: Array<{ name: string; description: string }>; paths: Record<string, Record<string, { operationId: string; tags: string[] }>> };
  expect(doc.tags.map((t) => t.name)).toEqual(TAG_NAMES);
  expect(doc.paths["/contacts/list"]!.post!.tags).toEqual(["lists"]);
  // The operation id follows from the action name alone.
  expect(doc.paths["/contacts/list"]!.post!.operationId).toBe("contacts_createList");
  expect(operationIdOf("auth.me")).toBe("auth_me");
});

it("gives every exposed action a distinct operationId", () => {
  const ids = exposed().map((a) => operationIdOf(a.name));
  expect(new Set(ids).size).toBe(ids.length);
});

it("explains every problem type with its status", () => {
  const md = problemTypesMarkdown();
  for (const [type, { status }] of Object.entries(ERROR_TYPES)) {
    const name = problemTypeUri(type as keyof typeof ERROR_TYPES).replace("/docs#", "");
    expect(md).toContain(`| \`${name}\` | ${status} | **${ERROR_TYPES[type as keyof typeof ERROR_TYPES].title}**`);
  }
});

it("shows a problem example whose type matches its status", () => {
  expect(problemExample(409)).toMatchObject({ status: 409, type: problemTypeUri("IDEMPOTENCY_IN_PROGRESS") });
  expect(problemExample(400)).toMatchObject({ status: 400, type: problemTypeUri("VALIDATION_ERROR"), errors: [expect.objectContaining({ path: "name" })] });
  expect(problemExample(500)).toMatchObject({ status: 500, type: "about:blank" });
  for (const status of [401, 403, 404, 413, 415, 422, 429, 503]) {
    const t = (problemExample(status) as { type: string }).type;
    const name = Object.keys(ERROR_TYPES).find((k) => problemTypeUri(k as keyof typeof ERROR_TYPES) === t) as keyof typeof ERROR_TYPES;
    expect({ status, typeStatus: ERROR_TYPES[name].status }).toEqual({ status, typeStatus: status });
  }
});
