/**
 * `npm run repl`: Moleculer's REPL (moleculer-repl).
 * - Without TRANSPORTER it starts the embedded service set (like `npm start`) and opens the REPL on
 *   it: `services`, `actions`, `call auth.verify ...`.
 * - With TRANSPORTER=nats://... it joins the running cluster as an extra node that runs no services
 *   (and needs no database), so `nodes`, `services`, `actions`, `events` and `call` inspect it live.
 */
import os from "node:os";
import { ServiceBroker } from "moleculer";
import { brokerOptions } from "../moleculer.config";
import { startApp } from "../lib/app";
import { ConfigError, loadConfig } from "../lib/config";

async function main() {
  let config;
  try {
    config = loadConfig(process.env, {}, { runsServices: !process.env.TRANSPORTER });
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`${e.message}\n`);
      process.exit(2);
    }
    throw e;
  }
  let broker: ServiceBroker;
  if (config.transporter) {
    broker = new ServiceBroker(brokerOptions(config, { nodeID: `repl-${os.hostname()}-${process.pid}` }));
    await broker.start();
    broker.logger.info(`Joined the cluster at ${config.transporter} as ${broker.nodeID}; no services run here. Try: nodes, services, actions`);
  } else {
    const app = await startApp(config);
    broker = app.broker;
    broker.logger.info(`Embedded service set started (API on port ${app.port}). Try: services, actions, call auth.verify --keyHash <sha256>`);
  }
  await broker.repl();
}

void main();
