/**
 * bench/gateway: GET /authentication/me under load (autocannon, 10 s, 50 connections) against the
 * embedded `npm start` (whole process: PGlite, auth, gateway, logs at the default level), and in the
 * same run a bare moleculer-web gateway with one action returning a small object. Prints req/s and
 * p99 of both and the ratio. Target: ratio >= 0.6.
 *
 *   npm run bench:gateway [-- --duration 10 --connections 50]
 */
import autocannon from "autocannon";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { startCommand } from "../service";

const ROOT = path.join(__dirname, "../..");
const TSX = path.join(ROOT, "node_modules/tsx/dist/cli.mjs");
const { values } = parseArgs({
  options: {
    duration: { type: "string", default: "10" },
    connections: { type: "string", default: "50" },
    rounds: { type: "string", default: "3" },
    "log-level": { type: "string", default: "info" },
  },
});
const DURATION = Number(values.duration);
const CONNECTIONS = Number(values.connections);
const ROUNDS = Number(values.rounds);

const PIN = os.cpus().length >= 2 && spawnSync("taskset", ["-cp", "1", String(process.pid)], { stdio: "ignore" }).status === 0;

/** Every process this bench started: all are stopped when it ends, however it ends. */
const children: ChildProcess[] = [];
process.on("exit", () => children.forEach((c) => c.kill("SIGKILL")));

/** Runs a shell command (`exec` and `pin`'s wrapper first, unless it is npm start's own: startCommand) with the project's Node 22 first on PATH. */
function startProcess(
  command: string,
  env: Record<string, string>,
  ready: RegExp | null,
  logFile?: string,
): Promise<{ child: ChildProcess; match: RegExpMatchArray }> {
  return new Promise((resolve, reject) => {
    const PATH = `${path.join(ROOT, "node_modules/.bin")}:${process.env.PATH}`;
    // Logs go to a file, as a collector would take them: a pipe into this (busy) load generator
    // would throttle the server by its own back-pressure.
    const stdout = logFile ? fs.openSync(logFile, "w") : "pipe";
    // Servers on core 0, this load generator on core 1 (when taskset exists): each side gets a core
    // of its own, so the two servers are measured alike and runs repeat.
    const pin = PIN ? "taskset -c 0 " : "";
    const line = /\bexec\b/.test(command) ? command : `exec ${pin}${command}`;
    const child = spawn("sh", ["-c", line], { cwd: ROOT, env: { ...process.env, PATH, ...env }, stdio: ["ignore", stdout, "pipe"] });
    children.push(child);
    let out = "";
    const onData = (d: Buffer) => {
      out += d.toString();
      const m = ready ? out.match(ready) : null;
      if (m) {
        child.stdout!.off("data", onData);
        child.stdout!.resume(); // keep draining the logs
        child.stderr!.resume();
        resolve({ child, match: m });
      }
    };
    child.stderr!.on("data", (d) => (out += d.toString()));
    if (!ready) {
      resolve({ child, match: [""] as unknown as RegExpMatchArray });
    } else child.stdout!.on("data", onData);
    child.on("exit", (code) => reject(new Error(`${command} exited ${code}:\n${out.slice(-2000)}`)));
    setTimeout(() => reject(new Error(`${command} not ready in 60 s:\n${out.slice(-2000)}`)), 60000).unref();
  });
}

async function waitReady(url: string) {
  for (let i = 0; i < 600; i++) {
    const r = await fetch(url).catch(() => null);
    if (r?.ok) return;
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error(`${url} never became ready`);
}

function run(url: string, headers: Record<string, string>): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    autocannon({ url, headers, connections: CONNECTIONS, duration: DURATION, pipelining: 1 }, (err, res) => (err ? reject(err) : resolve(res)));
  });
}

async function warm(url: string, headers: Record<string, string>) {
  await new Promise((resolve, reject) => autocannon({ url, headers, connections: CONNECTIONS, duration: 5 }, (e, r) => (e ? reject(e) : resolve(r))));
}

function runAdmin(dataDir: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [TSX, path.join(ROOT, "scripts/admin.ts"), "keys:create", "--company", "bench", "--operations", "AUTHENTICATION"], {
      cwd: ROOT,
      env: { ...process.env, DATA_DIR: dataDir },
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.on("exit", (code) => (code === 0 ? resolve(JSON.parse(out).apiKey) : reject(new Error(`admin exited ${code}`))));
  });
}

async function main() {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "pgw-bench-"));
  const port = 3900 + Math.floor(Math.random() * 50);
  // Exactly what `npm start` runs (its script text from package.json), without npm's wrapper process.
  const product = await startProcess(
    startCommand(PIN ? "taskset -c 0 " : ""),
    { DATA_DIR: dataDir, PORT: String(port), LOG_FORMAT: "json", RATE_LIMIT_RPS: "1000000", LOG_LEVEL: values["log-level"]! },
    null,
    path.join(dataDir, "service.log"),
  );
  await waitReady(`http://127.0.0.1:${port}/healthz/ready`);
  const baseline = await startProcess("node --import tsx bench/gateway/baseline.ts", { PORT: "0" }, /ready (\d+)/);
  try {
    const key = await runAdmin(dataDir);
    const oursUrl = `http://127.0.0.1:${port}/api/partner-gateway/v1/authentication/me`;
    const baseUrl = `http://127.0.0.1:${baseline.match[1]}/hello`;
    const check = await fetch(oursUrl, { headers: { "x-api-key": key } });
    if (check.status !== 200) throw new Error(`GET /authentication/me answered ${check.status}`);
    await warm(baseUrl, {});
    await warm(oursUrl, { "x-api-key": key });
    // Alternate the two, ROUNDS times each, so that drift on a shared machine hits both alike.
    const bases: autocannon.Result[] = [];
    const ourss: autocannon.Result[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      bases.push(await run(baseUrl, {}));
      ourss.push(await run(oursUrl, { "x-api-key": key }));
    }
    const median = (rs: autocannon.Result[]) => [...rs].sort((a, b) => a.requests.average - b.requests.average)[Math.floor(rs.length / 2)]!;
    const base = median(bases);
    const ours = median(ourss);
    const line = (name: string, r: autocannon.Result, all: autocannon.Result[]) =>
      `${name.padEnd(34)} ${r.requests.average.toFixed(0).padStart(8)} req/s   p99 ${String(r.latency.p99).padStart(4)} ms   non-2xx ${r.non2xx}   errors ${r.errors}   (rounds: ${all.map((x) => x.requests.average.toFixed(0)).join(", ")})`;
    const ratio = ours.requests.average / base.requests.average;
    console.log(
      `bench/gateway: ${ROUNDS} x ${DURATION} s alternating, ${CONNECTIONS} connections, Node ${process.version}, ${os.cpus().length} cores${PIN ? " (servers on core 0, load on core 1)" : ""}, LOG_LEVEL=${values["log-level"]}; medians:`,
    );
    console.log(line("bare moleculer-web (floor)", base, bases));
    console.log(line("GET /authentication/me (npm start)", ours, ourss));
    console.log(
      `ratio (ours / floor, req/s): ${ratio.toFixed(2)}   p99 ${ours.latency.p99} ms vs ${base.latency.p99} ms   target >= 0.60   ${ratio >= 0.6 ? "MET" : "NOT MET"}`,
    );
  } finally {
    baseline.child.kill("SIGTERM");
    product.child.kill("SIGTERM");
    await new Promise((r) => setTimeout(r, 1500));
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
