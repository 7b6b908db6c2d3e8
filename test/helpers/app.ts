/**
 * One helper starts the product as production does (the same startApp and brokerOptions), on a
 * database of this file's own, with the gateway on an ephemeral port, and hands back HTTP clients
 * per account.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { BrokerOptions, ServiceSchema } from "moleculer";
import { API_PREFIX, type Operation, type TrafficType } from "../../lib/http/api";
import { startApp, type App } from "../../app/start-app";
import { loadConfig, type Config, type ServiceName } from "../../lib/config";
import type { Database } from "../../lib/db/db";
import { createKey } from "../../services/auth/auth.keys";
import { defineAuthModels } from "../../services/auth/auth.models";
import type { CreatedApiKeyOut } from "../../services/auth/auth.schemas";
import { createTestDatabase, type TestDatabase } from "./db";
import { Http } from "./http";

export interface Account {
  companyId: string;
  key: CreatedApiKeyOut;
  /** Client under the API prefix, sending this account's key. */
  api: Http;
}

export interface TestApp {
  app: App;
  db: Database;
  config: Config;
  /** Client at the server root (no key). */
  root: Http;
  /** Client under the API prefix (no key). */
  api: Http;
  /** Client of the internal ingress under /internal/v1 (when tracking runs). */
  ingress: Http;
  newAccount(operations: Operation[] | "ALL", opts?: { userId?: string | null; trafficType?: TrafficType; companyId?: string }): Promise<Account>;
  stop(): Promise<void>;
}

export interface TestAppOptions {
  services?: readonly ServiceName[];
  config?: Partial<Config>;
  broker?: Partial<BrokerOptions>;
  /** Extra services for the test only (a slow or failing action, say). */
  extraServices?: ServiceSchema[];
  /** Use this database instead of a fresh one (cross-node tests share one). */
  db?: Database;
  /**
   * Every account newAccount makes has a registered webhook (a row of the notifier's `webhooks`),
   * so that its status changes and inbound messages write events (the product writes none for an
   * account without one). For apps that run no notifier: the events stay in the outbox to be read.
   */
  listening?: boolean;
}

/** One key for every node of a test cluster (as operators set EXPORT_SIGNING_KEY). */
export const TEST_SIGNING_KEY = randomBytes(32).toString("base64url");

/** One secrets key for every node of a test cluster (as operators set SECRETS_KEY). */
export const TEST_SECRETS_KEY = randomBytes(32).toString("base64");

export const uid = (prefix = "acme") => `${prefix}-${randomBytes(5).toString("hex")}`;

export function testConfig(overrides: Partial<Config> = {}): Config {
  return loadConfig(
    { LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? "warn", LOG_FORMAT: "json" },
    {
      port: 0,
      internalPort: 0,
      host: "127.0.0.1",
      validateResponses: true,
      importDir: mkdtempSync(path.join(os.tmpdir(), "pgw-test-imports-")),
      exportDir: mkdtempSync(path.join(os.tmpdir(), "pgw-test-exports-")),
      exportSigningKey: TEST_SIGNING_KEY,
      mediaDir: mkdtempSync(path.join(os.tmpdir(), "pgw-test-media-")),
      secretsKey: TEST_SECRETS_KEY,
      // A test's app stops at once unless the test is about stopping.
      shutdownTimeoutMs: 2000,
      ...overrides,
    },
  );
}

/**
 * Gives the account a registered webhook (a row of the notifier's `webhooks`, which no test app
 * without the notifier delivers to), so that its status changes and inbound messages write events;
 * answers the account (a new one when none is given).
 */
export async function listening(db: Database, companyId: string = uid()): Promise<string> {
  await db.sequelize.query(`INSERT INTO webhooks (company_id, callback_url) VALUES ($1, 'https://127.0.0.1:8443/hook')`, { bind: [companyId] });
  return companyId;
}

/**
 * Resolves once the inbox has followed every inbound message tracking's feed holds now (migration
 * 0032: the ingress answers 202 once the message is in the feed; the inbox stores it a round later),
 * or after `timeoutMs` (the test's own checks then fail on what is missing).
 */
export async function inboxFollowed(db: Database, timeoutMs = 10_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const [row] = (await db.sequelize.query(
      `SELECT NOT EXISTS (SELECT 1 FROM inbound_messages_received f, inbox_feed_positions c
                           WHERE c.feed = 'inbound_messages_received' AND (f.tx, f.id) > (c.tx, c.id)) AS done`,
      { type: "SELECT" },
    )) as Array<{ done: boolean }>;
    if (row?.done || Date.now() > until) return;
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** The ingress of an app that runs the inbox: a 202 to an inbound message resolves once the inbox has stored it. */
class InboundWaitingHttp extends Http {
  constructor(
    baseUrl: string,
    private readonly db: Database,
  ) {
    super(baseUrl);
  }
  override async request(...args: Parameters<Http["request"]>): ReturnType<Http["request"]> {
    const res = await super.request(...args);
    if (args[0] === "POST" && args[1].startsWith("/inbound/") && res.status === 202) await inboxFollowed(this.db);
    return res;
  }
}

export async function startTestApp(opts: TestAppOptions = {}): Promise<TestApp> {
  let tdb: TestDatabase | null = null;
  const db = opts.db ?? (tdb = await createTestDatabase()).db;
  const config = testConfig(opts.config);
  const services = opts.services ?? ["gateway", "auth"];
  const app = await startApp(config, {
    services,
    db,
    broker: { namespace: uid("t"), ...opts.broker },
    extraServices: opts.extraServices,
  });
  const base = app.port != null ? `http://127.0.0.1:${app.port}` : "http://127.0.0.1:1";
  if (services.includes("gateway")) await waitForRoutes(base);
  const models = defineAuthModels(db.sequelize);
  return {
    app,
    db,
    config,
    root: new Http(base),
    api: new Http(base + API_PREFIX),
    ingress: services.includes("inbox")
      ? new InboundWaitingHttp(`http://127.0.0.1:${app.internalPort ?? 1}/internal/v1`, db)
      : new Http(`http://127.0.0.1:${app.internalPort ?? 1}/internal/v1`),
    async newAccount(operations, o = {}) {
      const companyId = o.companyId ?? uid();
      const key = await createKey(models, {
        companyId,
        userId: o.userId === undefined ? uid("user") : o.userId,
        operations:
          operations === "ALL"
            ? (["SMS", "RCS", "WHATSAPP", "AUTHENTICATION", "CONTACTS", "CAMPAIGNS", "EXPORTS", "INBOX", "MEDIA", "SOCIAL_PROFILES", "WEBHOOKS"] as Operation[])
            : operations,
        trafficType: o.trafficType ?? "TRANSACTIONAL",
      });
      if (opts.listening) await listening(db, companyId);
      return { companyId, key, api: new Http(base + API_PREFIX, { "x-api-key": key.apiKey }) };
    },
    async stop() {
      await app.stop();
      await tdb?.drop();
    },
  };
}

/** The gateway builds its routes from the registry shortly after start; wait until it is ready. */
export async function waitForRoutes(base: string, timeoutMs = 10000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await fetch(`${base}/healthz/ready`).catch(() => null);
    if (r?.status === 200) return;
    if (Date.now() > deadline) throw new Error(`gateway not ready after ${timeoutMs} ms: ${r ? await r.text() : "no answer"}`);
    await new Promise((res) => setTimeout(res, 50));
  }
}
