/**
 * The gateway's access log line is built by hand (lib/observability/logger.ts accessLogWriter): it must be the
 * line pino writes for the same fields through the service's logger, byte for byte but the time,
 * escaping included, and follow the log level.
 */
import { ServiceBroker } from "moleculer";
import { PassThrough } from "node:stream";
import { accessLogWriter, loggerOptions } from "../../lib/observability/logger";
import { testConfig } from "../helpers/app";

function brokerWithCapture(logLevel: "info" | "warn") {
  const out: string[] = [];
  const stream = new PassThrough();
  stream.on("data", (chunk: Buffer) => out.push(...chunk.toString().split("\n").filter(Boolean)));
  const broker = new ServiceBroker({ nodeID: 'node-"x"', namespace: "ns1", transporter: null, logger: loggerOptions(testConfig({ logLevel }), stream) });
  const svc = broker.createService({ name: "gateway" });
  return { broker, svc, out };
}

const withoutTime = (line: string) => line.replace(/"time":\d+,/, "");

describe("accessLogWriter", () => {
  it("writes what pino writes for the same fields", async () => {
    const { broker, svc, out } = brokerWithCapture("info");
    const write = accessLogWriter(broker, { nodeID: broker.nodeID, ns: broker.namespace, mod: svc.fullName, svc: svc.name, ver: svc.version });
    expect(write).not.toBeNull();
    const fields = {
      requestId: "r-1",
      method: "GET",
      path: '/api/x/"quoted"\\back\u0001\u2028é',
      route: "unmatched",
      status: 404,
      ms: 0.123,
    };
    svc.logger.info(fields, "request");
    write!(fields.requestId, fields.method, fields.path, fields.route, fields.status, fields.ms);
    await new Promise((r) => setImmediate(r));
    const lines = out.filter((l) => l.includes('"msg":"request"'));
    expect(lines).toHaveLength(2);
    expect(withoutTime(lines[1]!)).toBe(withoutTime(lines[0]!));
    expect(JSON.parse(lines[1]!)).toMatchObject({ ...fields, level: 30, mod: "gateway", svc: "gateway", ns: "ns1", nodeID: 'node-"x"', msg: "request" });
  });

  it("writes nothing when the level is above info", async () => {
    const { broker, svc, out } = brokerWithCapture("warn");
    const write = accessLogWriter(broker, { nodeID: broker.nodeID, ns: broker.namespace, mod: svc.fullName, svc: svc.name });
    write!("r-2", "GET", "/", "/", 200, 1);
    await new Promise((r) => setImmediate(r));
    expect(out.filter((l) => l.includes('"msg":"request"'))).toEqual([]);
  });
});
