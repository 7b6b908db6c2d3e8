/**
 * `npm run repl`: Moleculer's REPL (moleculer-repl) on a node that runs no services, joined to the
 * running service so that `nodes`, `services`, `actions`, `events` and `call` inspect it live.
 * - Without TRANSPORTER it joins the single-process service (`npm start`) running on the same
 *   DATA_DIR, through the Unix socket that service listens on inside that directory
 *   (lib/repl/repl-link.ts); only the user that runs the service (and root) may connect to it.
 * - With TRANSPORTER=nats://... it joins the cluster (no database needed).
 * A refusal (nothing running, no permission, a bad variable) is one line on stderr and exit 1 (2 for
 * a bad variable), never a stack trace.
 */
import os from "node:os";
import { ServiceBroker } from "moleculer";
import { brokerOptions } from "../moleculer.config";
import { ConfigError, loadConfig, type Config } from "../lib/config";
import { SocketClient } from "../lib/repl/repl-transporter";
import { operatorCommands } from "../lib/repl/repl-commands";
import { paramNamesMiddleware } from "../lib/repl/param-names";
import { joinRunningService, ReplRefusal } from "../lib/repl/repl-link";
import { setTimeout as sleep } from "node:timers/promises";

function refuse(message: string, code: number): never {
  process.stderr.write(`${message}\n`);
  process.exit(code);
}

/** Waits (a bounded time) until the registry knows `nodeID` with its services. */
async function waitForNode(broker: ServiceBroker, nodeID: string, ms = 5000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (broker.registry.nodes.get(nodeID)?.available) return true;
    await sleep(50);
  }
  return false;
}

async function main() {
  let config: Config;
  try {
    config = loadConfig(process.env, {}, { runsServices: false });
  } catch (e) {
    if (e instanceof ConfigError) refuse(e.message, 2);
    throw e;
  }
  const nodeID = `repl-${os.hostname()}-${process.pid}`;
  const replOptions = { delimiter: "mol $", customCommands: operatorCommands() };
  // `actions` lists parameter names, not the keywords of the JSON schemas they are declared as.
  const withParamNames = (options: ReturnType<typeof brokerOptions>) => ({ ...options, middlewares: [...(options.middlewares ?? []), paramNamesMiddleware()] });
  let broker: ServiceBroker;
  if (config.transporter) {
    broker = new ServiceBroker({ ...withParamNames(brokerOptions(config, { nodeID })), replOptions } as ConstructorParameters<typeof ServiceBroker>[0]);
    await broker.start();
    broker.logger.info(
      `Joined the cluster at ${config.transporter} as ${broker.nodeID}; no services run here. Try: cluster, outbox, exports, campaigns, keys, services, call`,
    );
  } else {
    const { socket, info } = await joinRunningService(config.dataDir).catch((e: unknown) => {
      if (e instanceof ReplRefusal) refuse(e.message, 1);
      throw e;
    });
    const transporter = new SocketClient(socket, () => refuse(`The service on DATA_DIR ${config.dataDir} (pid ${info.pid}) stopped; leaving the REPL.`, 1));
    broker = new ServiceBroker({ ...withParamNames(brokerOptions(config, { nodeID, transporter })), replOptions } as ConstructorParameters<
      typeof ServiceBroker
    >[0]);
    await broker.start();
    if (!(await waitForNode(broker, info.nodeID))) {
      await broker.stop().catch(() => undefined);
      refuse(`The service on DATA_DIR ${config.dataDir} (pid ${info.pid}) accepted the REPL but did not introduce itself; try again.`, 1);
    }
    broker.logger.info(
      `Joined the service ${info.nodeID} (pid ${info.pid}) on DATA_DIR ${config.dataDir} as ${broker.nodeID}. Try: cluster, outbox, exports, campaigns, keys, services, call`,
    );
  }
  await broker.repl();
}

main().catch((e: unknown) => refuse(`The REPL could not start: ${(e as Error)?.message ?? String(e)}`, 1));
