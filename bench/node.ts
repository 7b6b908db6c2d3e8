/**
 * One node of a bench cluster: the product's own startApp (as `npm start`), under the Moleculer
 * namespace BENCH_NAMESPACE, so a bench on a NATS other runs share never meets their nodes.
 */
import { startApp } from "../app/start-app";
import { loadConfig } from "../lib/config";

async function main() {
  const app = await startApp(loadConfig(), { broker: { namespace: process.env.BENCH_NAMESPACE ?? "pgw-bench" } });
  const stop = () =>
    void app.stop().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
}

main().catch((err) => {
  process.stderr.write(`bench node: ${err}\n`);
  process.exit(1);
});
