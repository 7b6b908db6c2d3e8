/**
 * The operator's listener of a node that has no HTTP listener of its own (neither the partner
 * gateway nor the tracking ingress runs on it: a notifier node, say): GET /healthz/live,
 * GET /healthz/ready (database and, when configured, NATS) and GET /metrics (the node's service
 * registries, its request metrics and Moleculer's own), on PORT. Everything else is a 404 or 405
 * problem; every answer carries X-Request-Id.
 */
import { createServer, type Server } from "node:http";
import type { ServiceBroker } from "moleculer";
import type { Database } from "../db/db";
import { ApiError } from "../errors";
import { drainOf } from "../http/drain";
import { transporterUp } from "../bus/nats-transporter";
import { HttpMetrics } from "./http-metrics";
import { answerClientError, tagRequest, writeProblem } from "../http/http";
import { toProblem } from "../http/problem";

const PATHS = new Set(["/healthz/live", "/healthz/ready", "/metrics"]);

export async function startOpsServer(broker: ServiceBroker, db: Database, port: number, host: string): Promise<Server> {
  const metrics = new HttpMetrics(broker);
  const json = (res: import("node:http").ServerResponse, body: unknown) => {
    res.setHeader("Content-Type", "application/json; charset=utf-8");
    res.end(JSON.stringify(body));
  };
  const server = createServer((req, res) => {
    handle(req, res).catch((err) => {
      broker.logger.error({ err }, "operator's listener failed a request");
      if (!res.headersSent) writeProblem(res, toProblem(err, String(res.getHeader("X-Request-Id") ?? "")));
      else res.destroy();
    });
  });
  const handle = async (req: import("node:http").IncomingMessage, res: import("node:http").ServerResponse) => {
    const requestId = tagRequest(req, res);
    const path = (req.url ?? "/").split("?")[0]!;
    const started = performance.now();
    res.on("finish", () => metrics.observe(req.method ?? "GET", PATHS.has(path) ? path : "unmatched", res.statusCode, (performance.now() - started) / 1000));
    if (!PATHS.has(path)) return writeProblem(res, toProblem(new ApiError("ROUTE_NOT_FOUND", `No route ${path} on this node.`), requestId));
    if (req.method !== "GET") {
      return writeProblem(res, toProblem(new ApiError("METHOD_NOT_ALLOWED", `${req.method} is not allowed on ${path}; allowed: GET.`), requestId), {
        Allow: "GET",
      });
    }
    if (path === "/healthz/live") return json(res, { status: "live" });
    if (path === "/metrics") {
      const text = await metrics.render();
      res.setHeader("Content-Type", metrics.contentType);
      return res.end(text);
    }
    const checks: Record<string, string> = {};
    if (drainOf(broker).draining) checks.node = "stopping";
    checks.database = await db.ping().then(
      () => "ok",
      () => "unreachable",
    );
    if (broker.transit) checks.transporter = transporterUp(broker) ? "ok" : "disconnected";
    if (Object.values(checks).every((v) => v === "ok")) return json(res, { status: "ready", checks });
    const why = Object.entries(checks)
      .filter(([, v]) => v !== "ok")
      .map(([k, v]) => `${k} ${v}`)
      .join(", ");
    writeProblem(res, toProblem(new ApiError("SERVICE_UNAVAILABLE", `Not ready: ${why}`, { checks }), requestId));
  };
  server.on("clientError", answerClientError);
  drainOf(broker).track(server);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
  return server;
}
