/**
 * docs/api-tour.md, "Five minutes with the API": the service is started as its `walk:service` block says (the
 * certificate made by its first lines, `npm start` with the variables of its last), then the ```sh
 * blocks between <!-- walk:start --> and <!-- walk:end --> run, as written, in one bash session
 * against it (own ports and DATA_DIR); only API, INGRESS and HOOK_IP (and DATA_DIR, PORT,
 * INTERNAL_PORT) come from the environment. HOOK_IP is a loopback address of its own (see hookIp):
 * the tour's way off a taken 127.0.0.1:8443, since a webhook may only use port 443 or 8443.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "../helpers/ports";

const root = join(__dirname, "..", "..");
const TOUR = join(root, "docs", "api-tour.md");

function walkBlocks(): string[] {
  const readme = readFileSync(TOUR, "utf8");
  const start = readme.indexOf("<!-- walk:start -->");
  const end = readme.indexOf("<!-- walk:end -->");
  if (start < 0 || end < start) throw new Error("docs/api-tour.md has no walk:start/walk:end section");
  return [...readme.slice(start, end).matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]);
}

/** The walk:service block: the commands before `npm start`, and the variables `npm start` is given. */
function serviceBlock(): { setup: string; env: Record<string, string> } {
  const readme = readFileSync(TOUR, "utf8");
  const at = readme.indexOf("<!-- walk:service -->");
  const m = /```sh\n([\s\S]*?)```/.exec(readme.slice(at));
  if (at < 0 || !m) throw new Error("docs/api-tour.md has no walk:service block");
  const lines = m[1]!.trimEnd().split("\n");
  const start = lines.pop()!;
  const words = start.split(/\s+/);
  expect(words.slice(-2)).toEqual(["npm", "start"]);
  const env = Object.fromEntries(words.slice(0, -2).map((w) => w.split("=") as [string, string]));
  return { setup: lines.join("\n"), env };
}

/**
 * A loopback address whose port 8443 is free, never 127.0.0.1: the other tests' receivers try that
 * one first, and one of them could take it between this check and the walk's receiver (block 7).
 */
async function hookIp(): Promise<string> {
  for (let i = 0; i < 50; i++) {
    const ip = `127.0.${1 + Math.floor(Math.random() * 250)}.${2 + Math.floor(Math.random() * 250)}`;
    const free = await new Promise<boolean>((resolve) => {
      const s = createServer();
      s.once("error", () => resolve(false));
      s.listen(8443, ip, () => s.close(() => resolve(true)));
    });
    if (free) return ip;
  }
  throw new Error("no loopback address with a free port 8443");
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

describe("docs/api-tour.md: Five minutes with the API", () => {
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
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      PORT: String(port),
      INTERNAL_PORT: String(internalPort),
      DATA_DIR: dataDir,
      HOOK_IP: await hookIp(),
    };
    delete env.DATABASE_URL;
    const service = serviceBlock();
    const setup = spawnSync("bash", ["-c", `set -euo pipefail\n${service.setup}`], { cwd: root, env, encoding: "utf8", timeout: 30000 });
    expect({ status: setup.status, stderr: setup.stderr }).toEqual({ status: 0, stderr: "" });
    child = spawn("npm", ["start"], { cwd: root, env: { ...env, ...service.env }, detached: true, stdio: "ignore" });
    const api = `http://localhost:${port}/api/partner-gateway/v1`;
    // A first start on an empty DATA_DIR (initdb and every migration) took more than 45 s in a busy CI run.
    await waitUp(`${api}/authentication/me`, child, 120000);

    // A block that fails leaves no background job (the webhook receiver) behind.
    const script = ["set -euo pipefail", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT", ...blocks.map((b, i) => `echo "::block ${i}"\n${b}`)].join("\n");
    const run = spawnSync("bash", ["-c", script], {
      cwd: root,
      env: { ...env, API: api, INGRESS: `http://localhost:${internalPort}/internal/v1` },
      encoding: "utf8",
      timeout: 150000,
    });
    const out = run.stdout;
    if (run.status !== 0) process.stderr.write(`The tour failed after block ${(out.match(/::block \d+/g) ?? []).pop()}:\n${run.stderr.slice(-3000)}\n`);
    expect({ status: run.status, stderr: run.stderr.slice(-2000) }).toEqual({ status: 0, stderr: expect.any(String) });
    for (let i = 0; i < blocks.length; i++) expect(out).toContain(`::block ${i}`);
    expect(out).toMatch(/^pgw_\S+$/m);
    expect(out).toMatch(/^[0-9a-f-]{36} \d+$/m);
    expect(out).toContain('{"ids":[1],"created":1,"existing":0}');
    expect(out).toMatch(/"status":"COMPLETED".*"totalRows":2,"created":2/);
    expect(out).toMatch(/"text":"Hi Ada"/);
    expect(out).toContain("+351912345671");
    expect(out).toMatch(/"status":"SENT".*"progress":\{"audience":3,"sent":3,"failed":0,"skipped":0\}/);
    // Polling: one status per message of the campaign.
    expect(out).toMatch(/^\{"data":\[\{"customerMessageId":"[^"]+","channel":"SMS"/m);
    // The webhook: three DELIVERY events of the second campaign, and their attempts, delivered.
    expect(out.match(/^\{.*"eventType": "DELIVERY".*"statusCode": \d+.*\}$/gm)).toHaveLength(3);
    expect(out).toMatch(/"attempt":1,.*"outcome":"DELIVERED"/);
    // The export's CSV, its header first.
    expect(out).toMatch(/^customerMessageId,channel,destination,sentAt,deliveryStatus/m);
    // The inbox: the inbound message stored, the reply accepted and in the thread.
    expect(out).toContain('{"accepted":1}');
    expect(out).toMatch(/"id":"inbox-[0-9a-f-]+","direction":"OUTBOUND","messageType":"TEXT","text":"Yes: it arrives tomorrow."/);
    expect(out).toMatch(/"text":"Is my order on its way\?"/);
  }, 300000);
});
