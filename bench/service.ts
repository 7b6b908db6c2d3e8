/**
 * The whole service as a bench measures it: `npm start` (the package's own start command, Node 22)
 * in a child process on the given database, ready when /healthz/ready answers; keys come from the
 * admin command, as an operator would make them. Children are killed if the bench dies.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import path from "node:path";

export const ROOT = path.join(__dirname, "..");

const children: ChildProcess[] = [];
process.on("exit", () => children.forEach((c) => c.kill("SIGKILL")));

/**
 * `npm start`'s own command (package.json), for `sh -c`: its variables (`VAR=value`), then `exec`,
 * `prefix` (a wrapper such as `taskset -c 0 `) and the node command, so that the shell's pid is
 * node's (signals and /proc reach it).
 */
export function startCommand(prefix = ""): string {
  const script = JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")).scripts.start as string;
  const m = /^((?:[A-Z_][A-Z0-9_]*=\S+\s+)*)(?:exec\s+)?(.*)$/.exec(script)!;
  return `${m[1]}exec ${prefix}${m[2]}`;
}

export interface BenchService {
  port: number;
  pid: number;
  env: NodeJS.ProcessEnv;
  /** A new key of `company` with `operations` (comma-separated), made by `npm run admin`. */
  adminKey(company: string, operations: string): string;
  stop(): Promise<void>;
}

/**
 * Starts the service on `databaseUrl` with PORT `port` and the extra variables in `env`; `node`:
 * run bench/node.ts (one node of a bench cluster, under BENCH_NAMESPACE) with `npm start`'s Node
 * options instead of the start script itself.
 */
export async function startService(databaseUrl: string, port: number, env: Record<string, string> = {}, o: { node?: boolean } = {}): Promise<BenchService> {
  const PATH = `${path.join(ROOT, "node_modules/.bin")}:${process.env.PATH}`;
  const npmStart = startCommand();
  const start = o.node ? npmStart.replace("scripts/start.ts", "bench/node.ts") : npmStart;
  const fullEnv = { ...process.env, PATH, DATABASE_URL: databaseUrl, PORT: String(port), LOG_LEVEL: "warn", RATE_LIMIT_RPS: "100000", ...env };
  const service = spawn("sh", ["-c", start], { cwd: ROOT, env: fullEnv, stdio: ["ignore", "ignore", "inherit"] });
  children.push(service);
  for (let i = 0; ; i++) {
    const r = await fetch(`http://127.0.0.1:${port}/healthz/ready`).catch(() => null);
    if (r?.ok) break;
    if (i > 600 || service.exitCode !== null) throw new Error("service not ready");
    await new Promise((res) => setTimeout(res, 100));
  }
  return {
    port,
    pid: service.pid!,
    env: fullEnv,
    adminKey: (company, operations) =>
      JSON.parse(
        execFileSync("sh", ["-c", `exec node --import tsx scripts/admin.ts keys:create --company ${company} --operations ${operations}`], {
          cwd: ROOT,
          env: fullEnv,
          encoding: "utf8",
        }),
      ).apiKey as string,
    async stop() {
      if (service.exitCode !== null) return;
      service.kill("SIGTERM");
      await once(service, "exit");
    },
  };
}
