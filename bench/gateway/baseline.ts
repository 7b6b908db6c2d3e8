/**
 * The floor for bench/gateway: a bare moleculer-web gateway with one action returning a small
 * object, nothing else (no auth, no database, no logging, no metrics). Prints "ready <port>".
 */
import { ServiceBroker } from "moleculer";
import ApiGateway from "moleculer-web";

async function main() {
  const broker = new ServiceBroker({ logger: false, transporter: null, metrics: false, tracing: false });
  broker.createService({
    name: "api",
    mixins: [ApiGateway],
    settings: {
      port: Number(process.env.PORT ?? 0),
      ip: "127.0.0.1",
      logRequest: null,
      logResponse: null,
      routes: [{ path: "/", aliases: { "GET /hello": "hello.get" } }],
    },
  } as never);
  broker.createService({
    name: "hello",
    actions: {
      get() {
        return {
          id: "0b6e4c1e-8a8c-4f5e-9a0e-3d2f1c4b5a69",
          companyId: "acme",
          userId: null,
          username: null,
          operations: ["AUTHENTICATION"],
          trafficType: "TRANSACTIONAL",
          createdAt: new Date().toISOString(),
        };
      },
    },
  });
  await broker.start();
  const addr = (broker.getLocalService("api") as unknown as { server: import("node:http").Server }).server.address();
  process.stdout.write(`ready ${typeof addr === "object" && addr ? addr.port : 0}\n`);
  process.on("SIGTERM", () => broker.stop().then(() => process.exit(0)));
}

void main();
