/**
 * The command blocks of the README and docs/ marked `<!-- docs:run admin -->` and
 * `<!-- docs:run guide -->`, run as written against a fresh `npm start` (own ports, a migrated
 * DATA_DIR of its own): the admin ones from the project's directory (they run npm scripts), the
 * guide's in order in one bash session in an empty working directory, with KEY (an account's key
 * made by the admin command), API and INGRESS from the environment. test/unit/docs-blocks.spec.ts
 * checks that no block is left unmarked.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { freePort } from "../helpers/ports";
import { seededDataDir } from "../helpers/template-db";
import { waitForRoutes } from "../helpers/app";

const ROOT = path.join(__dirname, "../..");
const PAGES = ["README.md", "docs/operating.md", "docs/api-guide.md"];

/** The blocks of one group, in page order, with where each is. */
function blocksOf(group: "admin" | "guide"): Array<{ where: string; code: string }> {
  return PAGES.flatMap((page) =>
    [...fs.readFileSync(path.join(ROOT, page), "utf8").matchAll(new RegExp(`<!-- docs:run ${group} -->\\n\`\`\`sh\\n([\\s\\S]*?)\`\`\``, "g"))].map((m) => ({
      where: page,
      code: m[1]!,
    })),
  );
}

let child: ChildProcess | undefined;
let dataDir = "";
let work = "";
let env: NodeJS.ProcessEnv = {};
let api = "";

beforeAll(async () => {
  dataDir = await seededDataDir("pgw-docs-");
  work = fs.mkdtempSync(path.join(os.tmpdir(), "pgw-docs-work-"));
  const [port, internalPort] = [await freePort(), await freePort()];
  env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|TRANSPORTER|SERVICES|TEST_|LOG_|npm_)/.test(k)));
  Object.assign(env, { PORT: String(port), INTERNAL_PORT: String(internalPort), DATA_DIR: dataDir, LOG_LEVEL: "warn" });
  child = spawn("npm", ["start"], { cwd: ROOT, env, detached: true, stdio: "ignore" });
  await waitForRoutes(`http://127.0.0.1:${port}`, 150_000);
  api = `http://localhost:${port}/api/partner-gateway/v1`;
  Object.assign(env, { API: api, INGRESS: `http://localhost:${internalPort}/internal/v1` });
}, 180_000);

afterAll(() => {
  if (child?.pid && child.exitCode === null) {
    try {
      process.kill(-child.pid, "SIGTERM");
    } catch {
      /* already gone */
    }
  }
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

function bash(script: string, cwd: string, extra: NodeJS.ProcessEnv = {}) {
  return spawnSync("bash", ["-c", `set -euo pipefail\n${script}`], { cwd, env: { ...env, ...extra }, encoding: "utf8", timeout: 120_000 });
}

describe("docs:run admin", () => {
  it("runs each admin block from the project's directory", () => {
    const blocks = blocksOf("admin");
    expect(blocks.map((b) => b.where)).toEqual(["README.md", "docs/operating.md", "docs/operating.md", "docs/operating.md"]);
    const outs = blocks.map((b) => {
      const run = bash(b.code, ROOT);
      expect({ where: b.where, code: b.code, status: run.status, stderr: run.stderr.slice(-2000) }).toEqual({
        where: b.where,
        code: b.code,
        status: 0,
        stderr: expect.any(String),
      });
      return run.stdout;
    });
    // README's first requests: who the key belongs to, and the contact made.
    expect(outs[0]).toMatch(/^\{"id":"[0-9a-f-]{36}","companyId":"acme",.*"operations":\["SMS","RCS","WHATSAPP"/m);
    expect(outs[0]).toMatch(/^\{"id":"[0-9a-f-]{36}","firstName":"Ada",.*"phoneNumber":"\+351912345678"/m);
    // keys:create prints the key as JSON; secrets:rotate and migrate say what they did.
    expect(JSON.parse(outs[1]!)).toMatchObject({
      apiKey: expect.stringMatching(/^pgw_/),
      companyId: "acme",
      userId: "ops@acme.example",
      operations: ["SMS", "CONTACTS"],
    });
    expect(outs[2]).toMatch(/\S/);
    expect(outs[3]).toMatch(/"applied":\[\]/);
  }, 300_000);
});

describe("docs:run guide", () => {
  it("runs the guide's blocks in order, in one session, in an empty directory", () => {
    const blocks = blocksOf("guide");
    expect(blocks.length).toBeGreaterThanOrEqual(8);
    const made = bash("npm run -s admin -- keys:create --company acme --operations ALL", ROOT);
    expect(made.status).toBe(0);
    const key = (JSON.parse(made.stdout) as { apiKey: string }).apiKey;
    const script = blocks.map((b, i) => `echo "::block ${i} ${b.where}"\n${b.code}`).join("\n");
    const run = bash(script, work, { KEY: key });
    const out = run.stdout;
    if (run.status !== 0)
      process.stderr.write(`docs guide failed after ${(out.match(/::block \d+ \S+/g) ?? []).pop()}:\n${run.stderr.slice(-3000)}\n${out.slice(-2000)}\n`);
    expect({ status: run.status }).toEqual({ status: 0 });
    for (let i = 0; i < blocks.length; i++) expect(out).toContain(`::block ${i} `);
    // A few answers each block promises.
    expect(out).toMatch(/"importId":"[^"]+","status":"QUEUED"/); // the mapped import
    expect(out).toMatch(/"channel":"WHATSAPP","phoneNumber":"\+351912345670"/); // the opt-out made
    expect(out).toMatch(/^customerMessageId,channel,destination/m); // the export's CSV
    expect(out).toMatch(/^HTTP\/1\.1 206/m); // the media's range
    expect(out).toMatch(/^304$/m); // and its revalidation
    expect(out).toMatch(/"text":"Is my order on its way\?"/); // the inbox's thread
    expect(out).toMatch(/^event: message\.created$/m); // the live view
    expect(out).toMatch(/"network":"INSTAGRAM"/); // the profile
    expect(fs.existsSync(path.join(work, "history.csv"))).toBe(true);
  }, 300_000);
});
