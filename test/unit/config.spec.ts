import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ConfigError, loadConfig } from "../../lib/config";
import { natsOptions } from "../../lib/bus/nats-transporter";

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
      services: ["gateway", "auth", "contacts", "tracking", "notifier", "exports", "media", "profiles", "campaigns", "simulator", "inbox"],
      mediaDir: path.resolve("./data/media"),
      secretsKey: null,
      secretsKeyPrevious: null,
      publicBaseUrl: "http://localhost:3000",
      notifierRetryDelaySmsMs: 300000,
      notifierRetryDelayRcsWhatsappMs: 600000,
      webhookAllowPrivateTargets: false,
      webhookSecretOverlapMs: 86400000,
      upstreamMode: "simulator",
      upstreamSmsUrl: null,
      upstreamConnectTimeoutMs: 3000,
      upstreamTimeoutMs: 10000,
      simulatorProfile: "realistic",
      simulatorMaxDelayMs: 3000,
      campaignBatchSize: 500,
      campaignConcurrency: 4,
      campaignLeaseMs: 30000,
      campaignPollMs: 5000,
      logLevel: "info",
      rateLimitRps: 50,
      messageRetentionDays: 400,
      exportDir: path.resolve("./data/exports"),
      exportSigningKey: null,
      exportUrlTtlS: 900,
      exportRetentionS: 86400,
      sseHeartbeatMs: 15000,
      sseMaxStreams: 10000,
      sseMaxStreamsPerAccount: 200,
      inboxEventRetentionHours: 72,
      exportLeaseMs: 60000,
      exportPollMs: 5000,
    });
    expect(c.exportWorkers).toBe(Math.max(1, os.availableParallelism() - 1));
    expect(Object.isFrozen(c)).toBe(true);
  });

  it("reads TRUSTED_PROXIES as CIDRs (a bare address is one host) and MAX_KEYS_PER_ACCOUNT", () => {
    expect(loadConfig({})).toMatchObject({ trustedProxies: [], maxKeysPerAccount: 500 });
    const c = loadConfig({ TRUSTED_PROXIES: " 10.0.0.0/8, 2001:DB8::/32,192.168.1.4 ,::1", MAX_KEYS_PER_ACCOUNT: "20" });
    expect(c.trustedProxies).toEqual(["10.0.0.0/8", "2001:db8::/32", "192.168.1.4/32", "::1/128"]);
    expect(c.maxKeysPerAccount).toBe(20);
  });

  it("reads HEAVY_OPS_PER_ACCOUNT (default 2)", () => {
    expect(loadConfig({}).heavyOpsPerAccount).toBe(2);
    expect(loadConfig({ HEAVY_OPS_PER_ACCOUNT: "5" }).heavyOpsPerAccount).toBe(5);
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
    expect([d.notifierEndpointConcurrency, d.notifierMaxInFlight, d.notifierPollMs, d.notifierLeaseMs, d.extraCaCerts]).toEqual([16, 256, 1000, 60000, null]);
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
    [{ TRUSTED_PROXIES: "10.0.0.0/8,10.0.0.0/33" }, /TRUSTED_PROXIES.*10\.0\.0\.0\/33/],
    [{ TRUSTED_PROXIES: "proxy.internal" }, /TRUSTED_PROXIES/],
    [{ MAX_KEYS_PER_ACCOUNT: "0" }, /MAX_KEYS_PER_ACCOUNT/],
    [{ HEAVY_OPS_PER_ACCOUNT: "0" }, /HEAVY_OPS_PER_ACCOUNT/],
    [{ SSE_HEARTBEAT_MS: "5" }, /SSE_HEARTBEAT_MS/],
    [{ SSE_HEARTBEAT_MS: "soon" }, /SSE_HEARTBEAT_MS/],
    [{ SSE_MAX_STREAMS_PER_ACCOUNT: "0" }, /SSE_MAX_STREAMS_PER_ACCOUNT/],
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

  it("reads the upload disk budgets (spool, import queue, an account's share) and refuses bad ones", () => {
    expect(loadConfig({})).toMatchObject({ spoolMaxBytes: 2 * 1024 ** 3, importQueueMaxBytes: 1024 ** 3, uploadAccountShare: 0.25 });
    const c = loadConfig({ SPOOL_MAX_BYTES: "1048576", IMPORT_QUEUE_MAX_BYTES: "524288", UPLOAD_ACCOUNT_SHARE: "0.5" });
    expect(c).toMatchObject({ spoolMaxBytes: 1048576, importQueueMaxBytes: 524288, uploadAccountShare: 0.5 });
    expect(() => loadConfig({ SPOOL_MAX_BYTES: "0" })).toThrow(/SPOOL_MAX_BYTES="0"/);
    expect(() => loadConfig({ IMPORT_QUEUE_MAX_BYTES: "1.5" })).toThrow(/IMPORT_QUEUE_MAX_BYTES/);
    expect(() => loadConfig({ UPLOAD_ACCOUNT_SHARE: "0" })).toThrow(/UPLOAD_ACCOUNT_SHARE/);
    expect(() => loadConfig({ UPLOAD_ACCOUNT_SHARE: "1.5" })).toThrow(/UPLOAD_ACCOUNT_SHARE/);
  });

  it("ends uploads slower than 16 KiB in 30 s by default, and reads and checks UPLOAD_MIN_BYTES and UPLOAD_MIN_WINDOW_MS", () => {
    expect(loadConfig({})).toMatchObject({ uploadMinBytes: 16 * 1024, uploadMinWindowMs: 30_000 });
    expect(loadConfig({ UPLOAD_MIN_BYTES: "0", UPLOAD_MIN_WINDOW_MS: "500" })).toMatchObject({ uploadMinBytes: 0, uploadMinWindowMs: 500 });
    for (const [name, value] of [
      ["UPLOAD_MIN_BYTES", "-1"],
      ["UPLOAD_MIN_BYTES", "1.5"],
      ["UPLOAD_MIN_BYTES", "16k"],
      ["UPLOAD_MIN_WINDOW_MS", "99"],
      ["UPLOAD_MIN_WINDOW_MS", "3600001"],
      ["UPLOAD_MIN_WINDOW_MS", "soon"],
    ]) {
      expect(() => loadConfig({ [name!]: value })).toThrow(new RegExp(`${name}="${value}"`));
    }
  });

  it("binds the internal ingress to 127.0.0.1 in embedded mode and to every interface in cluster mode, unless INTERNAL_HOST says", () => {
    expect(loadConfig({}).internalHost).toBe("127.0.0.1");
    const cluster = {
      TRANSPORTER: "nats://127.0.0.1:4222",
      DATABASE_URL: "postgres://p@h/db",
      INTERNAL_TOKEN: "t".repeat(16),
      EXPORT_SIGNING_KEY: "k".repeat(32),
      SECRETS_KEY: "s".repeat(43) + "=",
    };
    expect(loadConfig(cluster).internalHost).toBe("0.0.0.0");
    expect(loadConfig({ ...cluster, INTERNAL_HOST: "10.0.0.5" }).internalHost).toBe("10.0.0.5");
    expect(loadConfig({ INTERNAL_HOST: "0.0.0.0" }).internalHost).toBe("0.0.0.0");
  });

  it("refuses a profiles node in a cluster without SECRETS_KEY, never echoing a key, and reads SECRETS_KEY_PREVIOUS", () => {
    const cluster = { TRANSPORTER: "nats://127.0.0.1:4222", DATABASE_URL: "postgres://p@h/db" };
    expect(() => loadConfig({ ...cluster, SERVICES: "profiles" })).toThrow(/Cluster mode refused: TRANSPORTER is set but SECRETS_KEY is not/);
    expect(() => loadConfig({ ...cluster, SERVICES: "gateway,profiles" })).toThrow(/SECRETS_KEY/);
    // Notifiers seal and open webhook signing secrets: every one needs the shared key too.
    expect(() => loadConfig({ ...cluster, SERVICES: "notifier" })).toThrow(/SECRETS_KEY is not; every notifier node must encrypt secrets/);
    // Nodes without profiles need no key; embedded mode generates one into DATA_DIR.
    expect(loadConfig({ ...cluster, SERVICES: "gateway,auth" }).secretsKey).toBeNull();
    expect(loadConfig({ SERVICES: "profiles" }).secretsKey).toBeNull();
    const key = "A".repeat(43) + "=";
    const old = "B".repeat(43);
    expect(loadConfig({ ...cluster, SERVICES: "profiles", SECRETS_KEY: key, SECRETS_KEY_PREVIOUS: old })).toMatchObject({
      secretsKey: key,
      secretsKeyPrevious: old,
    });
    for (const name of ["SECRETS_KEY", "SECRETS_KEY_PREVIOUS"]) {
      let message = "";
      try {
        loadConfig({ [name]: "not-base64-secret-value" });
      } catch (e) {
        message = (e as Error).message;
      }
      expect(message).toMatch(new RegExp(`^Invalid configuration: ${name}=\\(value not shown\\)`));
      expect(message).not.toContain("not-base64-secret-value");
    }
  });

  it("refuses a tracking node in a cluster without INTERNAL_TOKEN, unless INTERNAL_TOKEN_DISABLED=true", () => {
    const cluster = {
      TRANSPORTER: "nats://127.0.0.1:4222",
      DATABASE_URL: "postgres://p@h/db",
      EXPORT_SIGNING_KEY: "k".repeat(32),
      SECRETS_KEY: "s".repeat(43) + "=",
    };
    expect(() => loadConfig(cluster)).toThrow(/INTERNAL_TOKEN is not/);
    expect(() => loadConfig({ ...cluster, SERVICES: "tracking" })).toThrow(/INTERNAL_TOKEN/);
    expect(() => loadConfig({ ...cluster, SERVICES: "tracking", INTERNAL_TOKEN_DISABLED: "false" })).toThrow(/INTERNAL_TOKEN/);
    expect(loadConfig({ ...cluster, SERVICES: "tracking", INTERNAL_TOKEN_DISABLED: "true" })).toMatchObject({
      internalToken: null,
      internalTokenDisabled: true,
    });
    expect(loadConfig({ ...cluster, SERVICES: "tracking", INTERNAL_TOKEN: "t".repeat(16) }).internalToken).toBe("t".repeat(16));
    // Nodes without the ingress need no token; embedded mode binds to 127.0.0.1 instead.
    expect(loadConfig({ ...cluster, SERVICES: "gateway,auth" }).internalToken).toBeNull();
    expect(loadConfig({}).internalTokenDisabled).toBe(false);
  });

  it("reads the NATS credentials, TLS CA and max_payload, never echoing a secret", () => {
    const c = loadConfig({ NATS_USER: "pgw", NATS_PASSWORD: "secret-pass", NATS_TLS_CA: "/etc/nats/ca.pem" });
    expect([c.natsUser, c.natsPassword, c.natsToken, c.natsTlsCa, c.natsMaxPayload]).toEqual(["pgw", "secret-pass", null, "/etc/nats/ca.pem", 8388608]);
    expect(loadConfig({ NATS_TOKEN: "tok", NATS_MAX_PAYLOAD: "2097152" })).toMatchObject({ natsToken: "tok", natsMaxPayload: 2097152 });
    expect(() => loadConfig({ NATS_USER: "pgw" })).toThrow(/NATS_USER and NATS_PASSWORD/);
    expect(() => loadConfig({ NATS_USER: "pgw", NATS_PASSWORD: "p", NATS_TOKEN: "t" })).toThrow(/NATS_TOKEN/);
    expect(() => loadConfig({ NATS_MAX_PAYLOAD: "1000" })).toThrow(/NATS_MAX_PAYLOAD/);
  });

  it("passes NATS credentials from NATS_* or the URL into the client's options, and the CA for TLS", () => {
    const base = loadConfig({ TRANSPORTER: "nats://a:4222,nats://b:4222", DATABASE_URL: "postgres://p@h/db", SERVICES: "gateway" });
    expect(natsOptions(base)).toEqual({ servers: ["a:4222", "b:4222"], maxReconnectAttempts: -1 });
    expect(natsOptions({ ...base, natsUser: "u", natsPassword: "p w" })).toMatchObject({ user: "u", pass: "p w" });
    expect(natsOptions({ ...base, natsToken: "tok" })).toMatchObject({ token: "tok" });
    expect(natsOptions({ ...base, transporter: "nats://u:p%40ss@a:4222" })).toMatchObject({ servers: ["a:4222"], user: "u", pass: "p@ss" });
    expect(natsOptions({ ...base, transporter: "nats://s3cret@a:4222" })).toMatchObject({ token: "s3cret" });
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nats-ca-"));
    fs.writeFileSync(path.join(dir, "ca.pem"), "PEM");
    expect(natsOptions({ ...base, natsTlsCa: path.join(dir, "ca.pem") }).tls).toEqual({ ca: "PEM" });
  });
});

describe("the upstream adapter's settings", () => {
  it("refuses UPSTREAM_MODE=http on a campaigns node without every channel's URL, naming the missing", () => {
    expect(() => loadConfig({ UPSTREAM_MODE: "http", SERVICES: "campaigns", UPSTREAM_SMS_URL: "http://u/sms" })).toThrow(
      /UPSTREAM_RCS_URL, UPSTREAM_WHATSAPP_URL/,
    );
    expect(loadConfig({ UPSTREAM_MODE: "http", SERVICES: "gateway" }).upstreamMode).toBe("http");
    expect(() => loadConfig({ SIMULATOR_PROFILE: "chaotic" })).toThrow(/SIMULATOR_PROFILE/);
  });
});

describe("LOG_FORMAT", () => {
  it("is pretty or json as set, and json by default when stdout is not a terminal", () => {
    expect(loadConfig({ LOG_FORMAT: "pretty" }).logFormat).toBe("pretty");
    expect(loadConfig({ LOG_FORMAT: "json" }).logFormat).toBe("json");
    expect(process.stdout.isTTY).toBeFalsy(); // jest's workers write to a pipe
    expect(loadConfig({}).logFormat).toBe("json");
  });

  it("refuses another value, naming the variable", () => {
    expect(() => loadConfig({ LOG_FORMAT: "colour" })).toThrow(ConfigError);
    expect(() => loadConfig({ LOG_FORMAT: "colour" })).toThrow(/LOG_FORMAT="colour"/);
  });
});
