/**
 * bench/logger: log lines per second and CPU time per line through the real logging path
 * (lib/observability/logger.ts: Moleculer's logger, pino with its redaction, the buffered stdout),
 * in a child process whose stdout is a pipe this process drains, as a log collector would. Half the
 * lines are the gateway's access line, half a service line with a nested object. CPU time counts
 * every thread of the child (the writes happen in libuv's pool), so it holds on a busy machine
 * where lines per second do not.
 *
 *   npx tsx bench/logger.ts [--lines 200000] [--rounds 3] [--compare path/to/other-logger.ts]
 *
 * `--compare` runs another version of the module (an older copy, say) in the same run, alternating.
 */
import { spawn } from "node:child_process";
import path from "node:path";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  options: {
    lines: { type: "string", default: "200000" },
    rounds: { type: "string", default: "3" },
    compare: { type: "string" },
    child: { type: "string" },
  },
});
const LINES = Number(values.lines);

interface Result {
  linesPerSecond: number;
  cpuMicrosPerLine: number;
  bytes: number;
}

/** In the child: logs LINES lines through `modulePath`'s logger to stdout, reports on stderr. */
async function child(modulePath: string) {
  const { ServiceBroker } = await import("moleculer");
  const mod = (await import(modulePath)) as typeof import("../lib/observability/logger");
  const broker = new ServiceBroker({ nodeID: "bench", transporter: null, logger: mod.loggerOptions({ logLevel: "info", logFormat: "json" }) });
  const svc = broker.createService({ name: "gateway" });
  const access = mod.accessLogWriter(broker, { nodeID: broker.nodeID, ns: broker.namespace, mod: svc.fullName, svc: svc.name });
  const started = performance.now();
  const cpu = process.cpuUsage();
  for (let i = 0; i < LINES; i++) {
    if (i % 2 === 0)
      access!("3f1c2a9e-1111-4222-8333-444455556666", "GET", `/api/partner-gateway/v1/contacts/${i}`, "/api/partner-gateway/v1/contacts/:id", 200, 1.234);
    else svc.logger.info({ companyId: "c-1", webhook: { url: "https://example.test/hook", secret: "s3cr3t" }, attempt: i }, "webhook delivered");
    // A server yields between requests: the destination's asynchronous writes get their turn.
    if (i % 200 === 199) await new Promise((r) => setImmediate(r));
  }
  await broker.stop(); // empties the buffered stdout
  const used = process.cpuUsage(cpu);
  const seconds = (performance.now() - started) / 1000;
  process.stderr.write(`${JSON.stringify({ linesPerSecond: LINES / seconds, cpuMicrosPerLine: (used.user + used.system) / LINES })}\n`);
}

function run(modulePath: string): Promise<Result> {
  const proc = spawn(process.execPath, ["--import", "tsx", __filename, "--lines", String(LINES), "--child", modulePath], {
    cwd: path.join(__dirname, ".."),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let bytes = 0;
  let report = "";
  proc.stdout.on("data", (d: Buffer) => (bytes += d.length));
  proc.stderr.on("data", (d: Buffer) => (report += d));
  return new Promise((resolve, reject) =>
    proc.on("close", (code) => {
      const line = report.trim().split("\n").pop() ?? "";
      if (code !== 0 || !line.startsWith("{")) return reject(new Error(`child exited ${code}: ${report}`));
      resolve({ ...(JSON.parse(line) as Omit<Result, "bytes">), bytes });
    }),
  );
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main() {
  if (values.child) return child(values.child);
  const modules: Record<string, string> = { current: path.join(__dirname, "../lib/observability/logger.ts") };
  if (values.compare) modules.compare = path.resolve(values.compare);
  const results: Record<string, Result[]> = Object.fromEntries(Object.keys(modules).map((k) => [k, []]));
  for (let round = 0; round < Number(values.rounds); round++) {
    for (const [name, file] of Object.entries(modules)) results[name]!.push(await run(file));
  }
  console.log(`bench/logger: ${LINES} lines x ${values.rounds} rounds (half access lines), stdout a pipe; medians:`);
  for (const [name, rs] of Object.entries(results)) {
    const lps = median(rs.map((r) => r.linesPerSecond));
    const cpu = median(rs.map((r) => r.cpuMicrosPerLine));
    console.log(
      `${name.padEnd(8)} ${Math.round(lps).toString().padStart(8)} lines/s   ${cpu.toFixed(2)} us CPU/line   ${(rs[0]!.bytes / LINES).toFixed(0)} bytes/line`,
    );
  }
}

void main();
