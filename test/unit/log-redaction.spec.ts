/**
 * Every log line goes through pino (lib/observability/logger.ts), so pino's redaction censors
 * credentials on all of them, the gateway's access line included; and the buffered stdout loses no
 * line when the process exits or its broker stops.
 */
import { spawn } from "node:child_process";
import path from "node:path";
import { PassThrough } from "node:stream";
import { ServiceBroker } from "moleculer";
import { accessLogWriter, CENSOR, loggerOptions } from "../../lib/observability/logger";
import { testConfig } from "../helpers/app";

const ROOT = path.join(__dirname, "../..");
const SECRET = "SECRETd7c1a0f4e9b2";

/** A line carrying credentials wherever this project and its libraries put them. */
const secretFields = (s: string) => ({
  apiKey: `${s}-k`,
  token: `${s}-t`,
  headers: { authorization: `Bearer ${s}-a`, "x-api-key": `${s}-h`, "x-internal-token": `${s}-i`, accept: "application/json" },
  params: { accessToken: `${s}-p`, network: "X" },
  webhook: { url: "https://example.test/hook", secret: `${s}-w`, signingSecret: `${s}-s` },
  err: { message: "refused", data: { apiKey: `${s}-e` } },
});

function brokerWithCapture() {
  const out: string[] = [];
  const stream = new PassThrough();
  // The broker's own start-up lines are left out: only the lines a test writes are read.
  stream.on("data", (chunk: Buffer) =>
    out.push(
      ...chunk
        .toString()
        .split("\n")
        .filter((l) => l && !/"mod":"(broker|registry)"/.test(l)),
    ),
  );
  const broker = new ServiceBroker({ nodeID: "n1", transporter: null, logger: loggerOptions(testConfig({ logLevel: "info" }), stream) });
  const svc = broker.createService({ name: "gateway" });
  return { broker, svc, out };
}

/** Runs `code` (CommonJS, with tsx) in a child process at the project's root; answers its stdout and exit. */
function runChild(code: string): Promise<{ stdout: string; code: number | null; signal: NodeJS.Signals | null }> {
  const child = spawn(process.execPath, ["--import", "tsx", "-e", code], {
    cwd: ROOT,
    env: { ...process.env, LOG_FORMAT: "json", LOG_LEVEL: "info" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  let stdout = "";
  child.stdout.on("data", (d) => (stdout += d));
  return new Promise((resolve) => child.on("close", (exit, signal) => resolve({ stdout, code: exit, signal })));
}

describe("log redaction", () => {
  it("censors credentials in a service's lines, nested ones included, and keeps the other fields", async () => {
    const { svc, out } = brokerWithCapture();
    svc.logger.info(secretFields(SECRET), "calling upstream");
    await new Promise((r) => setImmediate(r));
    expect(out).toHaveLength(1);
    expect(out[0]).not.toContain(SECRET);
    const line = JSON.parse(out[0]!);
    expect(line).toMatchObject({
      apiKey: CENSOR,
      token: CENSOR,
      headers: { authorization: CENSOR, "x-api-key": CENSOR, "x-internal-token": CENSOR, accept: "application/json" },
      params: { accessToken: CENSOR, network: "X" },
      webhook: { url: "https://example.test/hook", secret: CENSOR, signingSecret: CENSOR },
      err: { message: "refused", data: { apiKey: CENSOR } },
      mod: "gateway",
      msg: "calling upstream",
    });
  });

  it("applies to the access line, which the service's own pino logger writes like every other line", async () => {
    const { broker, svc, out } = brokerWithCapture();
    const write = accessLogWriter(broker, { nodeID: broker.nodeID, ns: broker.namespace, mod: svc.fullName, svc: svc.name });
    write("r-1", "GET", "/api/x", "unmatched", 404, 0.5);
    // The same line with a credential beside its fields, through the service's logger: the access
    // line has no writer of its own that could skip the redaction (test/unit/access-log-line.spec.ts
    // checks that both are the same line).
    svc.logger.info({ requestId: "r-1", method: "GET", path: "/api/x", route: "unmatched", status: 404, ms: 0.5, token: SECRET }, "request");
    await new Promise((r) => setImmediate(r));
    const lines = out.map((l) => JSON.parse(l));
    const fields = { requestId: "r-1", method: "GET", path: "/api/x", route: "unmatched", status: 404, ms: 0.5, mod: "gateway", msg: "request" };
    expect(lines[0]).toMatchObject(fields);
    expect(lines[1]).toMatchObject({ ...fields, token: CENSOR });
    expect(out.join("\n")).not.toContain(SECRET);
  });
});

describe("the buffered stdout (a real process)", () => {
  const setup = (lines: number) => `
    const { ServiceBroker } = require("moleculer");
    const { loggerOptions, accessLogWriter } = require("./lib/observability/logger.ts");
    const broker = new ServiceBroker({ nodeID: "n1", transporter: null, logger: loggerOptions({ logLevel: "info", logFormat: "json" }) });
    const svc = broker.createService({ name: "gateway" });
    const access = accessLogWriter(broker, { mod: svc.fullName, svc: svc.name });
    for (let i = 0; i < ${lines}; i++) access("r-" + i, "GET", "/api/partner-gateway/v1/contacts/" + i, "/contacts/:id", 200, 1.5);
    svc.logger.info({ headers: { "x-internal-token": "${SECRET}" }, apiKey: "${SECRET}" }, "last line");
  `;

  it("writes every line, censored, when the process exits right after logging", async () => {
    // Fewer lines than one chunk: all still gathered when the process exits, written by its exit hook.
    const run = await runChild(`${setup(150)}\nprocess.exit(0);`);
    expect(run.code).toBe(0);
    const lines = run.stdout.split("\n").filter(Boolean);
    const records = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(records.filter((r) => r.msg === "request")).toHaveLength(150);
    expect(records.at(-1)).toMatchObject({ msg: "last line", apiKey: CENSOR, headers: { "x-internal-token": CENSOR } });
    expect(run.stdout).not.toContain(SECRET);
  });

  it("writes every line once its broker has stopped, even if the process is then killed", async () => {
    // Many chunks, some still being written by sonic-boom when the stop begins.
    const run = await runChild(`${setup(3000)}\nbroker.start().then(() => broker.stop()).then(() => process.kill(process.pid, "SIGKILL"));`);
    expect(run.signal).toBe("SIGKILL");
    const records = run.stdout
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(records.filter((r) => r.msg === "request")).toHaveLength(3000);
    expect(records.map((r) => r.msg)).toContain("last line");
    expect(records.at(-1)).toMatchObject({ msg: "ServiceBroker is stopped. Good bye." });
    expect(run.stdout).not.toContain(SECRET);
  });
});
