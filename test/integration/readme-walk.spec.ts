/**
 * README "Five minutes with the API": the ```sh blocks between <!-- walk:start --> and
 * <!-- walk:end --> run, as written, in one bash session against a fresh `npm start` (own ports and
 * DATA_DIR); only API (and DATA_DIR, PORT, INTERNAL_PORT) come from the environment.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

const root = join(__dirname, "..", "..");

function walkBlocks(): string[] {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const start = readme.indexOf("<!-- walk:start -->");
  const end = readme.indexOf("<!-- walk:end -->");
  if (start < 0 || end < start) throw new Error("README has no walk:start/walk:end section");
  return [...readme.slice(start, end).matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });
}

async function waitUp(url: string, child: ChildProcess, ms: number): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (child.exitCode !== null) throw new Error(`npm start exited with ${child.exitCode}`);
    try {
      await fetch(url);
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  throw new Error(`${url} did not answer within ${ms} ms`);
}

describe("README: Five minutes with the API", () => {
  let child: ChildProcess | undefined;
  let dataDir = "";

  afterAll(() => {
    if (child?.pid && child.exitCode === null) {
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        /* already gone */
      }
    }
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it("runs every block of the walk against a fresh npm start", async () => {
    const blocks = walkBlocks();
    expect(blocks.length).toBeGreaterThanOrEqual(6);
    dataDir = mkdtempSync(join(tmpdir(), "pgw-walk-"));
    const [port, internalPort] = [await freePort(), await freePort()];
    const env: NodeJS.ProcessEnv = { ...process.env, PORT: String(port), INTERNAL_PORT: String(internalPort), DATA_DIR: dataDir };
    delete env.DATABASE_URL;
    child = spawn("npm", ["start"], { cwd: root, env, detached: true, stdio: "ignore" });
    const api = `http://localhost:${port}/api/partner-gateway/v1`;
    await waitUp(`${api}/authentication/me`, child, 45000);

    const script = ["set -euo pipefail", ...blocks.map((b, i) => `echo "::block ${i}"\n${b}`)].join("\n");
    const run = spawnSync("bash", ["-c", script], { cwd: root, env: { ...env, API: api }, encoding: "utf8", timeout: 60000 });
    const out = run.stdout;
    expect({ status: run.status, stderr: run.stderr.slice(-2000) }).toEqual({ status: 0, stderr: expect.any(String) });
    for (let i = 0; i < blocks.length; i++) expect(out).toContain(`::block ${i}`);
    expect(out).toMatch(/^pgw_\S+$/m);
    expect(out).toMatch(/^[0-9a-f-]{36} \d+$/m);
    expect(out).toContain('{"ids":[1],"created":1,"existing":0}');
    expect(out).toMatch(/"status":"COMPLETED".*"totalRows":2,"created":2/);
    expect(out).toMatch(/"text":"Hi Ada"/);
    expect(out).toContain("+351912345671");
    expect(out).toMatch(/"status":"SENT".*"progress":\{"audience":3,"sent":3,"failed":0\}/);
  }, 110000);
});
