/**
 * The typed client (clients/typescript): generated from the committed openapi.json and kept equal
 * to it, and working against a running gateway through its README example.
 */
import { execFile } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { createPartnerClient, type PartnerClient, type Problem } from "../../clients/typescript";
import { addContactToNewList } from "../../clients/typescript/example";
import { startTestApp, type TestApp } from "../helpers/app";

const ROOT = path.join(__dirname, "../..");
const CLIENT_DIR = path.join(ROOT, "clients/typescript");

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ services: ["gateway", "auth", "contacts"] });
});
afterAll(() => t?.stop());

it("is what the committed openapi.json generates (run `npm run openapi` after changing an action)", async () => {
  const check = await promisify(execFile)(process.execPath, ["--import", "tsx", path.join(ROOT, "scripts/openapi-client.ts"), "--check"], {
    cwd: ROOT,
    encoding: "utf8",
    timeout: 60_000,
  }).catch((err: { stdout?: string; stderr?: string; code?: number }) => ({ stdout: err.stdout ?? "", stderr: err.stderr, code: err.code }));
  expect(check.stdout).toBe("clients/typescript/schema.ts is what openapi.json generates\n");
  // Every operation of the document has its type.
  const doc = JSON.parse(fs.readFileSync(path.join(ROOT, "openapi.json"), "utf8"));
  const schema = fs.readFileSync(path.join(CLIENT_DIR, "schema.ts"), "utf8");
  for (const methods of Object.values(doc.paths as Record<string, Record<string, { operationId: string }>>))
    for (const op of Object.values(methods)) expect(schema).toContain(`    ${op.operationId}: {`);
}, 90_000);

it("runs the README example: a contact, a list, the contact added, the members read back", async () => {
  const account = await t.newAccount(["CONTACTS"]);
  const members = await addContactToNewList(t.root.baseUrl, account.key.apiKey);
  expect(members).toMatchObject({ page: 0, limit: 10, total: 1, totalPages: 1 });
  expect(members.data).toEqual([expect.objectContaining({ firstName: "Ana", phoneNumber: "+351912345678", email: "ana@example.com" })]);
  // Read through the plain API too: the client's calls really created them for this account.
  const lists = await account.api.get("/contacts/list");
  expect(lists.status).toBe(200);
  expect(lists.body.data).toEqual([expect.objectContaining({ name: "VIP", contactCount: 1 })]);
});

it("runs from the command line as its README says", async () => {
  const account = await t.newAccount(["CONTACTS"]);
  const readme = fs.readFileSync(path.join(CLIENT_DIR, "README.md"), "utf8");
  const block = /<!-- docs:run client -->\n```sh\n([\s\S]*?)```/.exec(readme)?.[1];
  expect(block).toBeDefined();
  const run = await promisify(execFile)("bash", ["-c", `set -euo pipefail\n${block}`], {
    cwd: ROOT,
    env: { ...process.env, KEY: account.key.apiKey, PGW_BASE_URL: t.root.baseUrl },
    encoding: "utf8",
    timeout: 60_000,
  });
  const members = JSON.parse(run.stdout) as { total: number; data: Array<{ firstName: string }> };
  expect(members).toMatchObject({
    page: 0,
    limit: 10,
    total: 1,
    totalPages: 1,
    data: [expect.objectContaining({ firstName: "Ana", phoneNumber: "+351912345678" })],
  });
  // Without a key: one line saying what to set, exit 2.
  const bare = await promisify(execFile)("bash", ["-c", "cd clients/typescript && npm run -s example"], {
    cwd: ROOT,
    env: { ...process.env, PGW_API_KEY: "" },
    encoding: "utf8",
  }).catch((e: { code?: number; stderr?: string }) => e);
  expect(bare).toMatchObject({ code: 2, stderr: expect.stringMatching(/^Set PGW_API_KEY to an API key/) });
}, 90_000);

it("answers the API's problems as typed errors", async () => {
  const api: PartnerClient = createPartnerClient({ baseUrl: t.root.baseUrl, apiKey: "pgw_not-a-key" });
  const res = await api.GET("/contacts", { params: { query: { limit: 5 } } });
  expect(res.response.status).toBe(401);
  expect(res.data).toBeUndefined();
  const problem = res.error as Problem;
  expect(problem).toMatchObject({ status: 401, type: "/docs#problem-unauthorized" });
  expect(problem.requestId).toBe(res.response.headers.get("x-request-id"));
});

it("shows the README the example that runs here", () => {
  const readme = fs.readFileSync(path.join(CLIENT_DIR, "README.md"), "utf8");
  const example = fs.readFileSync(path.join(CLIENT_DIR, "example.ts"), "utf8");
  const block = /```ts\n([\s\S]*?)```/.exec(readme)?.[1] ?? "";
  // The README's first block is example.ts without its header comment.
  expect(block.trim()).toBe(example.replace(/^\/\*\*[\s\S]*?\*\/\n/, "").trim());
});

/** Never called: `tsc` (CI's type check) fails if the client stops rejecting these. */
export async function typeChecks(api: PartnerClient) {
  // @ts-expect-error an unknown path
  await api.GET("/contactz");
  // @ts-expect-error a required field missing (a list's name)
  await api.POST("/contacts/list", { body: { description: "no name" } });
  // @ts-expect-error a field of the wrong type
  await api.POST("/contacts/list/contacts", { body: { listIds: ["1"], contactIds: [] } });
  // @ts-expect-error a path parameter left out
  await api.GET("/contacts/list/{listId}/contacts", { params: {} });
}
