/**
 * `npm start`: runs the services named by SERVICES (all by default) on this node. Without
 * TRANSPORTER and DATABASE_URL it is the whole product in one process on embedded PostgreSQL.
 */
import { createServer } from "node:net";
import { ConfigError, loadConfig, type Config } from "../lib/config";
import { startLogger } from "../lib/observability/logger";

/** The listeners this node opens, by the variable that sets each port (port 0: any free one, nothing to check). */
function listeners(config: Config): Array<{ variable: "PORT" | "INTERNAL_PORT"; port: number; host: string }> {
  const out: Array<{ variable: "PORT" | "INTERNAL_PORT"; port: number; host: string }> = [];
  const gateway = config.services.includes("gateway");
  const tracking = config.services.includes("tracking");
  // A node with neither still answers probes on PORT (app/start-app.ts's ops listener).
  if (gateway || !tracking) out.push({ variable: "PORT", port: config.port, host: config.host });
  if (tracking) out.push({ variable: "INTERNAL_PORT", port: config.internalPort, host: config.internalHost });
  return out.filter((l) => l.port !== 0);
}

/** Whether `port` can be listened on at `host` now: null, or the error's code (EADDRINUSE, EACCES, ...). */
function tryListen(port: number, host: string): Promise<string | null> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    server.listen({ port, host, exclusive: true }, () => server.close(() => resolve(null)));
  });
}

function portMessage(l: { variable: string; port: number; host: string }, code: string): string {
  const why =
    code === "EADDRINUSE"
      ? "is already in use (another process listens there)"
      : code === "EACCES"
        ? "may not be opened by this user"
        : `cannot be opened (${code})`;
  return `Port ${l.port} on ${l.host} (${l.variable}) ${why}. Stop that process, or choose another port: ${l.variable}=${l.port + 100} npm start`;
}

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
  process.on("SIGHUP", () => onSignal("SIGHUP"));
  // Started by npm (`npm start`, which execs node: npm forwards its signals here), a parent that
  // dies without one (kill -9) leaves this process an orphan: it stops as if signalled.
  const parent = process.ppid;
  if (process.env.npm_lifecycle_event) setInterval(() => process.ppid !== parent && onSignal("parent process gone"), 1000).unref();
  const log = startLogger(config);
  const where = config.databaseUrl ? "PostgreSQL at DATABASE_URL" : `embedded PostgreSQL (PGlite) in ${config.dataDir}`;
  log.info(`Starting the partner gateway (${config.transporter ? "cluster node" : "one process"}): ${config.services.join(", ")} on ${where}`);
  // A port another process holds is named at once, not after the database has been opened and migrated.
  for (const l of listeners(config)) {
    const code = await tryListen(l.port, l.host);
    if (code) {
      process.stderr.write(`${portMessage(l, code)}\n`);
      process.exit(2);
    }
  }
  // The product is loaded once the configuration is known to be good: a bad variable is named at once.
  const [{ startApp }, { bannerMessage, bannerText, startupBanner }] = await Promise.all([import("../app/start-app.js"), import("../app/banner.js")]);
  const app = await startApp(config, {
    replSocket: !config.transporter,
    onProgress: (p) => {
      if (p.step === "embedded")
        log.info(p.created ? `Creating the embedded database in ${p.dataDir} (a first start takes 10-20 s)` : `Opening the embedded database in ${p.dataDir}`);
      else if (p.step === "migrating") log.info(`Migrating the database: ${p.index} of ${p.total} (${p.name})`);
      else log.info(`Starting ${p.services.length} service(s): ${p.services.join(", ")}`);
    },
  }).catch((e: NodeJS.ErrnoException & { port?: number }) => {
    const taken = e.code === "EADDRINUSE" || e.code === "EACCES" ? listeners(config).find((l) => l.port === e.port) : undefined;
    process.stderr.write(`Could not start: ${taken ? portMessage(taken, e.code!) : e.message}\n`);
    process.exit(e.code === "EADDRINUSE" ? 2 : 1);
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
