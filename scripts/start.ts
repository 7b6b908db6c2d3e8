/**
 * `npm start`: runs the services named by SERVICES (all by default) on this node. Without
 * TRANSPORTER and DATABASE_URL it is the whole product in one process on embedded PostgreSQL.
 */
import { ConfigError, loadConfig } from "../lib/config";

async function main() {
  let config;
  try {
    config = loadConfig();
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`${e.message}\n`);
      process.exit(2);
    }
    throw e;
  }
  // SIGINT/SIGTERM are taken from the first moment: one that arrives while the services start (the
  // gateway may already answer ready) stops the node gracefully once it has started, never kills it
  // half-way with the default action.
  let signalled: string | null = null;
  let onSignal = (signal: string): void => {
    signalled ??= signal;
  };
  process.on("SIGINT", () => onSignal("SIGINT"));
  process.on("SIGTERM", () => onSignal("SIGTERM"));
  // The product is loaded once the configuration is known to be good: a bad variable is named at once.
  const [{ startApp }, { bannerMessage, bannerText, startupBanner }] = await Promise.all([import("../app/start-app.js"), import("../app/banner.js")]);
  const app = await startApp(config, { replSocket: !config.transporter }).catch((e: Error) => {
    process.stderr.write(`Could not start: ${e.message}\n`);
    process.exit(1);
  });
  // One banner: where things are, the first key, the REPL (a block on a pretty log, one record on a JSON one).
  const banner = startupBanner({ config, port: app.port, internalPort: app.internalPort, opsPort: app.opsPort });
  if (config.logFormat === "pretty") app.broker.logger.info(bannerText(banner).trimEnd());
  else app.broker.logger.info({ urls: banner.urls, firstKey: banner.firstKey, repl: banner.repl }, bannerMessage(banner));
  if (app.internalPort != null && !config.internalToken && config.transporter) {
    app.broker.logger.warn(
      `Internal ingress on ${config.internalHost}:${app.internalPort} without INTERNAL_TOKEN (INTERNAL_TOKEN_DISABLED=true): anyone who reaches it can post receipts and inbound messages`,
    );
  }
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    app.broker.logger.info(`${signal}: stopping`);
    app.stop().then(
      () => process.exit(0),
      (e) => {
        process.stderr.write(`Stopped with an error: ${e}\n`);
        process.exit(1);
      },
    );
  };
  // Moleculer's transporters publish outside its promise chains: a message-bus error that still
  // escapes (a NatsError) is logged and fails only its call; anything else ends the process as before.
  process.on("unhandledRejection", (reason) => {
    const e = reason as { name?: string; code?: string; message?: string } | null;
    if (e?.name === "NatsError") {
      app.broker.logger.error(`Message bus error outside any call: ${e.code ?? ""} ${e.message ?? ""}`);
      return;
    }
    app.broker.logger.fatal({ err: reason }, "Unhandled rejection: stopping");
    process.exit(1);
  });
  onSignal = stop;
  if (signalled) stop(signalled);
}

void main();
