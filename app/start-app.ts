/**
 * One code path for every way of running: open the database (PostgreSQL, or embedded PGlite),
 * migrate it, start a broker with the services this node runs. Embedded and cluster differ only in
 * configuration.
 */
import { ServiceBroker, type BrokerOptions, type ServiceSchema } from "moleculer";
import { brokerOptions } from "../moleculer.config";
import { SERVICE_FACTORIES } from "../services";
import type { Config, ServiceName } from "../lib/config";
import { openDatabase, type Database, type OpenProgress } from "../lib/db/db";
import { drainOf } from "../lib/http/drain";
import { startOpsServer } from "../lib/observability/ops-server";
import { addRuntimeMetrics } from "../lib/observability/runtime-metrics";
import { replHub } from "../lib/repl/repl-link";

export interface App {
  broker: ServiceBroker;
  config: Config;
  db: Database;
  /** The port the gateway listens on (when this node runs it). */
  port: number | null;
  /** The port of the operator's listener (/healthz, /metrics) on a node with neither the gateway nor the ingress. */
  opsPort: number | null;
  /** The port of the internal ingress (when this node runs tracking). */
  internalPort: number | null;
  stop(): Promise<void>;
}

export interface StartOptions {
  /** Overrides config.services (tests). */
  services?: readonly ServiceName[];
  /** A database opened by the caller (tests); otherwise one is opened from config. */
  db?: Database;
  broker?: Partial<BrokerOptions>;
  /** Services beyond the project's own (tests). */
  extraServices?: ServiceSchema[];
  /**
   * Without TRANSPORTER: also listen on a Unix socket inside DATA_DIR that `npm run repl` joins
   * (lib/repl/repl-link.ts). `npm start` turns it on; tests that do not need it leave it off.
   */
  replSocket?: boolean;
  /** Told each step of the start: the database opened and migrated, then the services starting. */
  onProgress?: (progress: OpenProgress | { step: "services"; services: readonly string[] }) => void;
}

export async function startApp(config: Config, opts: StartOptions = {}): Promise<App> {
  const db =
    opts.db ??
    (await openDatabase({
      databaseUrl: config.databaseUrl,
      dataDir: config.dataDir,
      role: "service",
      statementTimeoutMs: config.dbStatementTimeoutMs,
      ...(opts.onProgress ? { onProgress: opts.onProgress } : {}),
    }));
  const hub = opts.replSocket && !config.transporter ? replHub(config.dataDir) : undefined;
  const broker = new ServiceBroker(brokerOptions(config, { ...(hub ? { transporter: hub } : {}), ...opts.broker }));
  const deps = { config, db };
  addRuntimeMetrics(broker, db);
  for (const name of opts.services ?? config.services) broker.createService(SERVICE_FACTORIES[name](deps));
  for (const schema of opts.extraServices ?? []) broker.createService(schema);
  opts.onProgress?.({ step: "services", services: opts.services ?? config.services });
  try {
    await broker.start();
  } catch (e) {
    await broker.stop().catch(() => undefined);
    if (!opts.db) await db.close();
    throw e;
  }
  const services = opts.services ?? config.services;
  // A node with no listener of its own still answers probes and scrapes (a notifier node, say).
  let opsServer: import("node:http").Server | null = null;
  if (!services.includes("gateway") && !services.includes("tracking")) {
    try {
      opsServer = await startOpsServer(broker, db, config.port, config.host);
    } catch (e) {
      await broker.stop().catch(() => undefined);
      if (!opts.db) await db.close();
      throw e;
    }
  }
  const opsAddress = opsServer?.address();
  const gateway = broker.getLocalService("gateway") as unknown as { server?: import("node:http").Server } | undefined;
  const address = gateway?.server?.address();
  const tracking = broker.getLocalService("tracking") as unknown as { server?: import("node:http").Server } | undefined;
  const internal = tracking?.server?.address();
  let stopping: Promise<void> | null = null;
  return {
    broker,
    config,
    db,
    port: address && typeof address === "object" ? address.port : null,
    opsPort: opsAddress && typeof opsAddress === "object" ? opsAddress.port : null,
    internalPort: internal && typeof internal === "object" ? internal.port : null,
    stop() {
      stopping ??= (async () => {
        // Graceful within SHUTDOWN_TIMEOUT_MS: readiness off and the listeners drained (lib/http/drain.ts),
        // then the broker: others stop sending here, the calls being served finish (Moleculer's
        // context tracking, given what is left of the bound), each service's stopped() finishes or
        // hands back its work (deliveries, exports, send batches), and the node leaves the cluster.
        const deadline = Date.now() + config.shutdownTimeoutMs;
        const { cut } = await drainOf(broker).drain(config.shutdownTimeoutMs);
        if (cut > 0) broker.logger.warn(`${cut} HTTP request(s) still open after SHUTDOWN_TIMEOUT_MS (${config.shutdownTimeoutMs} ms): cut`);
        if (opsServer?.listening) await new Promise((resolve) => opsServer!.close(resolve));
        const tracking = broker.options.tracking as { shutdownTimeout?: number } | undefined;
        if (tracking) tracking.shutdownTimeout = Math.max(1000, deadline - Date.now());
        await broker.stop();
        if (!opts.db) await db.close();
      })();
      return stopping;
    },
  };
}
