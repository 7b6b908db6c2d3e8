import os from "node:os";
import path from "node:path";
import { ConfigError, loadConfig } from "../../lib/config";

describe("loadConfig", () => {
  it("has a working default for every variable", () => {
    const c = loadConfig({});
    expect(c).toMatchObject({
      port: 3000,
      internalPort: 3001,
      internalToken: null,
      databaseUrl: null,
      dataDir: path.resolve("./data"),
      transporter: null,
      services: ["gateway", "auth", "contacts", "tracking", "notifier", "exports"],
      publicBaseUrl: "http://localhost:3000",
      notifierRetryDelaySmsMs: 300000,
      notifierRetryDelayRcsWhatsappMs: 600000,
      webhookAllowPrivateTargets: false,
      upstreamMode: "simulator",
      logLevel: "info",
      rateLimitRps: 50,
      messageRetentionDays: 400,
      exportDir: path.resolve("./data/exports"),
      exportSigningKey: null,
      exportUrlTtlS: 900,
      exportRetentionS: 86400,
      exportLeaseMs: 60000,
    });
    expect(c.exportWorkers).toBe(Math.max(1, os.availableParallelism() - 1));
    expect(Object.isFrozen(c)).toBe(true);
  });

  it("reads and types the environment", () => {
    const c = loadConfig({ PORT: "8080", SERVICES: "auth, gateway,auth", WEBHOOK_ALLOW_PRIVATE_TARGETS: "true", RATE_LIMIT_RPS: "2.5" });
    expect(c.port).toBe(8080);
    expect(c.services).toEqual(["auth", "gateway"]);
    expect(c.webhookAllowPrivateTargets).toBe(true);
    expect(c.rateLimitRps).toBe(2.5);
    expect(c.publicBaseUrl).toBe("http://localhost:8080");
  });

  it("reads the notifier's settings, NODE_EXTRA_CA_CERTS among them", () => {
    const c = loadConfig({
      NOTIFIER_ENDPOINT_CONCURRENCY: "4",
      NOTIFIER_MAX_IN_FLIGHT: "64",
      NOTIFIER_POLL_MS: "50",
      NOTIFIER_LEASE_MS: "15000",
      NODE_EXTRA_CA_CERTS: "/etc/ca.pem",
    });
    expect([c.notifierEndpointConcurrency, c.notifierMaxInFlight, c.notifierPollMs, c.notifierLeaseMs, c.extraCaCerts]).toEqual([
      4,
      64,
      50,
      15000,
      "/etc/ca.pem",
    ]);
    const d = loadConfig({});
    expect([d.notifierEndpointConcurrency, d.notifierMaxInFlight, d.notifierPollMs, d.notifierLeaseMs, d.extraCaCerts]).toEqual([16, 256, 100, 60000, null]);
  });

  it.each([
    [{ PORT: "http" }, /PORT/],
    [{ PORT: "70000" }, /PORT/],
    [{ DATABASE_URL: "mysql://x" }, /DATABASE_URL/],
    [{ TRANSPORTER: "redis://x", DATABASE_URL: "postgres://x" }, /TRANSPORTER/],
    [{ SERVICES: "gateway,billing" }, /SERVICES.*billing/],
    [{ MESSAGE_RETENTION_DAYS: "0" }, /MESSAGE_RETENTION_DAYS/],
    [{ LOG_LEVEL: "loud" }, /LOG_LEVEL/],
    [{ RATE_LIMIT_RPS: "0" }, /RATE_LIMIT_RPS/],
    // A lease shorter than an attempt's own limits (3 s + 5 s) could let a slow attempt be taken twice.
    [{ NOTIFIER_LEASE_MS: "8000" }, /NOTIFIER_LEASE_MS/],
    [{ NOTIFIER_ENDPOINT_CONCURRENCY: "0" }, /NOTIFIER_ENDPOINT_CONCURRENCY/],
  ])("refuses %j naming the variable", (env, re) => {
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(re);
  });

  it("never echoes a secret in its message", () => {
    expect(() => loadConfig({ DATABASE_URL: "mysql://root:hunter2@db/x" })).toThrow(/DATABASE_URL=\(value not shown\)/);
    expect(() => loadConfig({ INTERNAL_TOKEN: "short-secret" })).toThrow(/INTERNAL_TOKEN=\(value not shown\)/);
    try {
      loadConfig({ INTERNAL_TOKEN: "short-secret" });
    } catch (e) {
      expect((e as Error).message).not.toContain("short-secret");
    }
  });

  it("refuses cluster mode without DATABASE_URL", () => {
    expect(() => loadConfig({ TRANSPORTER: "nats://127.0.0.1:4222" })).toThrow(/TRANSPORTER is set but DATABASE_URL is not/);
    expect(loadConfig({ TRANSPORTER: "nats://127.0.0.1:4222", DATABASE_URL: "postgres://p@h/db", SERVICES: "gateway,auth" }).transporter).toBe(
      "nats://127.0.0.1:4222",
    );
  });

  it("refuses an exports node in a cluster without EXPORT_SIGNING_KEY (every node must sign alike)", () => {
    const cluster = { TRANSPORTER: "nats://127.0.0.1:4222", DATABASE_URL: "postgres://p@h/db" };
    expect(() => loadConfig({ ...cluster, SERVICES: "exports" })).toThrow(/EXPORT_SIGNING_KEY/);
    expect(loadConfig({ ...cluster, SERVICES: "gateway" }).exportSigningKey).toBeNull();
    expect(loadConfig({ ...cluster, SERVICES: "exports", EXPORT_SIGNING_KEY: "k".repeat(32) }).exportSigningKey).toBe("k".repeat(32));
    // Embedded (one process): the key is generated into DATA_DIR.
    expect(loadConfig({ SERVICES: "exports" }).exportSigningKey).toBeNull();
  });

  it("reads the exports settings and refuses bad ones, never echoing the signing key", () => {
    const c = loadConfig({ EXPORT_DIR: "/srv/exports", EXPORT_WORKERS: "3", EXPORT_URL_TTL_S: "60", EXPORT_RETENTION_S: "3600", EXPORT_LEASE_MS: "5000" });
    expect([c.exportDir, c.exportWorkers, c.exportUrlTtlS, c.exportRetentionS, c.exportLeaseMs]).toEqual(["/srv/exports", 3, 60, 3600, 5000]);
    for (const [name, value] of [
      ["EXPORT_WORKERS", "0"],
      ["EXPORT_URL_TTL_S", "1"],
      ["EXPORT_LEASE_MS", "100"],
      ["EXPORT_RETENTION_S", "x"],
    ]) {
      expect(() => loadConfig({ [name!]: value })).toThrow(new RegExp(name!));
    }
    expect(() => loadConfig({ EXPORT_SIGNING_KEY: "too-short-secret" })).toThrow(/EXPORT_SIGNING_KEY=\(value not shown\)/);
  });
});
