/**
 * The only reader of process.env. Builds one configuration object with defaults, validates it
 * once and freezes it; a bad variable stops the process at start with a one-line message naming it.
 */
import Ajv from "ajv";
import ipaddr from "ipaddr.js";
import os from "node:os";
import path from "node:path";

export const ALL_SERVICES = ["gateway", "auth", "contacts", "tracking", "notifier", "exports", "media", "profiles", "campaigns", "simulator", "inbox"] as const;
export type ServiceName = (typeof ALL_SERVICES)[number];

export interface Config {
  readonly port: number;
  readonly host: string;
  readonly internalPort: number;
  readonly internalToken: string | null;
  /** INTERNAL_TOKEN_DISABLED=true: a cluster node runs the ingress without a token (explicitly, never by default). */
  readonly internalTokenDisabled: boolean;
  /** Where the internal ingress listens: 127.0.0.1 in embedded mode, 0.0.0.0 in cluster mode, unless INTERNAL_HOST says. */
  readonly internalHost: string;
  readonly databaseUrl: string | null;
  readonly dataDir: string;
  readonly transporter: string | null;
  /** NATS credentials (user and password, or a token) when TRANSPORTER's URL does not carry them. */
  readonly natsUser: string | null;
  readonly natsPassword: string | null;
  readonly natsToken: string | null;
  /** A PEM file of the CA that signed the NATS server's certificate: the connection then uses TLS. */
  readonly natsTlsCa: string | null;
  /** The NATS max_payload (bytes) the product is sized for; a node warns at start when the server announces less. */
  readonly natsMaxPayload: number;
  readonly services: readonly ServiceName[];
  readonly publicBaseUrl: string;
  readonly notifierRetryDelaySmsMs: number;
  readonly notifierRetryDelayRcsWhatsappMs: number;
  readonly webhookAllowPrivateTargets: boolean;
  /** After a signing secret's rotation, how long deliveries still carry a signature with the secret it replaced. */
  readonly webhookSecretOverlapMs: number;
  /** Most attempts one notifier replica has in flight to one account's endpoint. */
  readonly notifierEndpointConcurrency: number;
  /** Most attempts one notifier replica has in flight in all. */
  readonly notifierMaxInFlight: number;
  /** How often an idle notifier looks for due events. */
  readonly notifierPollMs: number;
  /** How long a claimed event stays with its notifier before another may take it (outlasts the attempt's time-outs). */
  readonly notifierLeaseMs: number;
  /** NODE_EXTRA_CA_CERTS: a PEM file of extra CAs the notifier trusts besides the system's. */
  readonly extraCaCerts: string | null;
  readonly upstreamMode: "simulator" | "http";
  /** UPSTREAM_MODE=http: where each channel's batches are posted (one request per message, Idempotency-Key = its customerMessageId). */
  readonly upstreamSmsUrl: string | null;
  readonly upstreamRcsUrl: string | null;
  readonly upstreamWhatsappUrl: string | null;
  /** UPSTREAM_MODE=http: the longest wait for a connection, and for an answer, per request. */
  readonly upstreamConnectTimeoutMs: number;
  readonly upstreamTimeoutMs: number;
  /** Requests one campaigns node has in flight to the HTTP upstream at once. */
  readonly upstreamConcurrency: number;
  /** The simulator's mix of outcomes: realistic, all-delivered or flaky. */
  readonly simulatorProfile: "realistic" | "all-delivered" | "flaky";
  /** The simulator reports each receipt after a random delay up to this many milliseconds. */
  readonly simulatorMaxDelayMs: number;
  /** Recipients a campaigns node hands the upstream at once. */
  readonly campaignBatchSize: number;
  /** Batches of one campaign a campaigns node has in flight at once (each claimed, sent and recorded on its own). */
  readonly campaignConcurrency: number;
  /** How long a claimed batch of recipients stays with its claim without a heartbeat before any node may claim them again. */
  readonly campaignLeaseMs: number;
  /** How often an idle campaigns node looks for campaigns due. */
  readonly campaignPollMs: number;
  /** How long a campaign keeps one of a node's sending slots while another account's campaign waits for one (every account holding no more than its share). */
  readonly campaignSliceMs: number;
  /** The most recipients a campaigns node hands the upstream per second, all its campaigns together (0: no bound). */
  readonly campaignNodeRate: number;
  readonly logLevel: "fatal" | "error" | "warn" | "info" | "debug" | "trace" | "silent";
  /** LOG_FORMAT: pretty (coloured on a terminal) or JSON lines; unset, pretty when stdout is a terminal. */
  readonly logFormat: "pretty" | "json";
  readonly rateLimitRps: number;
  /** TRUSTED_PROXIES: CIDRs whose X-Forwarded-For the gateway believes when it rate-limits by client address. */
  readonly trustedProxies: readonly string[];
  /** How many live keys an account may hold; POST /authentication past it is a 409. */
  readonly maxKeysPerAccount: number;
  /** Heavy operations (bulk memberships with allContacts, custom-field removal) one account may run at once, cluster-wide; past it, 429. */
  readonly heavyOpsPerAccount: number;
  readonly heavyOpsPerNode: number;
  readonly heavyQueuePerAccount: number;
  readonly heavyQueueWaitMs: number;
  readonly heavyStatementTimeoutMs: number;
  readonly dbStatementTimeoutMs: number;
  readonly authCacheTtlMs: number;
  /** How long the gateway waits for an action that declares no `timeout` of its own. */
  readonly requestTimeoutMs: number;
  /** How long a stopping node waits for its in-flight work (HTTP requests, calls, attempts) before cutting it. */
  readonly shutdownTimeoutMs: number;
  readonly nodeId: string | null;
  /** The cluster's namespace: nodes (and the REPL) see only nodes of the same one on a transporter. */
  readonly namespace: string;
  /** Where Moleculer's tracer sends spans (the trace id is the request id); "none" turns tracing off. */
  readonly tracingExporter: "none" | "console" | "zipkin" | "event";
  /** The Zipkin (or OpenTelemetry collector's Zipkin receiver) base URL for TRACING_EXPORTER=zipkin. */
  readonly tracingZipkinUrl: string;
  /** Where the contacts service keeps uploaded files until they are imported (default DATA_DIR/imports). */
  readonly importDir: string;
  /** Worker threads (piscina) that parse imports on a contacts node. */
  readonly importWorkers: number;
  /** Bytes of upload files a contacts node keeps under IMPORT_DIR for imports not yet ended (beyond: 503). */
  readonly importQueueMaxBytes: number;
  /** Bytes of uploads a gateway node holds in its spool at once (beyond: 503; an account's share beyond: 429). */
  readonly spoolMaxBytes: number;
  /** The part of IMPORT_QUEUE_MAX_BYTES and of SPOOL_MAX_BYTES one account may hold (0 < share <= 1; beyond: 429). */
  readonly uploadAccountShare: number;
  /** An upload whose body brings fewer bytes than this in some UPLOAD_MIN_WINDOW_MS is ended with 408 (0: never). */
  readonly uploadMinBytes: number;
  /** The window of UPLOAD_MIN_BYTES, in milliseconds. */
  readonly uploadMinWindowMs: number;
  /** Messages (and their receipts) older than this many days are removed by the tracking service. */
  readonly messageRetentionDays: number;
  /** Check every answer against its declared schema (a mismatch is a 500); on in tests. */
  readonly validateResponses: boolean;
  /** Where an exports node writes its files (default DATA_DIR/exports); a shared volume lets any exports node serve any file. */
  readonly exportDir: string;
  /** Worker threads (piscina) writing exports on one node; jobs beyond wait QUEUED. */
  readonly exportWorkers: number;
  /** HMAC key of download URLs; null: generated once into DATA_DIR (one node only). */
  readonly exportSigningKey: string | null;
  /** Where a media node keeps uploaded images and videos (default DATA_DIR/media). */
  readonly mediaDir: string;
  /** Bytes of media an account may keep (all its files together); an upload past it is refused (413). */
  readonly mediaAccountMaxBytes: number;
  /** SECRETS_KEY: 32 bytes, base64, encrypting stored tokens (AES-256-GCM); null: generated once into DATA_DIR (embedded only). */
  readonly secretsKey: string | null;
  /** SECRETS_KEY_PREVIOUS: the key being rotated away from, still accepted for reading. */
  readonly secretsKeyPrevious: string | null;
  /** Seconds a download URL stays valid. */
  readonly exportUrlTtlS: number;
  /** Seconds a finished export's file is kept; then it is deleted and the job reads EXPIRED. */
  readonly exportRetentionS: number;
  /** How long a running export stays with its node without a heartbeat before another node runs it again. */
  readonly exportLeaseMs: number;
  readonly exportPollMs: number;
  /** How often an open Server-Sent Events stream carries a comment line when nothing else was written (keeps proxies from closing it). */
  readonly sseHeartbeatMs: number;
  /** Event streams one gateway node holds open at once (beyond: 503). */
  readonly sseMaxStreams: number;
  /** Event streams one account holds open on one gateway node (beyond: 429). */
  readonly sseMaxStreamsPerAccount: number;
  /** Hours the inbox's live-view events are kept (a Last-Event-ID older than that resumes from the oldest kept). */
  readonly inboxEventRetentionHours: number;
}

/** One row per variable: its name, the config field, its JSON schema and its default (docs/configuration.md, .env.example and k8s follow it; test/unit/config-docs.spec.ts). */
export const VARIABLES = {
  PORT: { field: "port", schema: { type: "integer", minimum: 0, maximum: 65535 }, default: 3000 },
  HOST: { field: "host", schema: { type: "string", minLength: 1 }, default: "0.0.0.0" },
  INTERNAL_PORT: { field: "internalPort", schema: { type: "integer", minimum: 0, maximum: 65535 }, default: 3001 },
  INTERNAL_TOKEN: { field: "internalToken", schema: { type: ["string", "null"], minLength: 16 }, default: null },
  INTERNAL_TOKEN_DISABLED: { field: "internalTokenDisabled", schema: { type: "boolean" }, default: false },
  // null: 127.0.0.1 without TRANSPORTER (one process, nobody else needs it), 0.0.0.0 with it.
  INTERNAL_HOST: { field: "internalHost", schema: { type: ["string", "null"], minLength: 1 }, default: null },
  DATABASE_URL: { field: "databaseUrl", schema: { type: ["string", "null"], pattern: "^postgres(ql)?://" }, default: null },
  DATA_DIR: { field: "dataDir", schema: { type: "string", minLength: 1 }, default: "./data" },
  TRANSPORTER: { field: "transporter", schema: { type: ["string", "null"], pattern: "^nats://[^\\s]+$" }, default: null },
  NATS_USER: { field: "natsUser", schema: { type: ["string", "null"], minLength: 1 }, default: null },
  NATS_PASSWORD: { field: "natsPassword", schema: { type: ["string", "null"], minLength: 1 }, default: null },
  NATS_TOKEN: { field: "natsToken", schema: { type: ["string", "null"], minLength: 1 }, default: null },
  NATS_TLS_CA: { field: "natsTlsCa", schema: { type: ["string", "null"], minLength: 1 }, default: null },
  // 8 MiB: the largest answers (a 1000-row page, 1000 history rows with long texts, an 8 MiB ingress body) fit.
  NATS_MAX_PAYLOAD: { field: "natsMaxPayload", schema: { type: "integer", minimum: 1048576, maximum: 67108864 }, default: 8388608 },
  SERVICES: { field: "services", schema: { type: "string", pattern: "^[a-z, ]+$" }, default: ALL_SERVICES.join(",") },
  PUBLIC_BASE_URL: { field: "publicBaseUrl", schema: { type: ["string", "null"], pattern: "^https?://" }, default: null },
  NOTIFIER_RETRY_DELAY_SMS_MS: { field: "notifierRetryDelaySmsMs", schema: { type: "integer", minimum: 1 }, default: 300000 },
  NOTIFIER_RETRY_DELAY_RCS_WHATSAPP_MS: { field: "notifierRetryDelayRcsWhatsappMs", schema: { type: "integer", minimum: 1 }, default: 600000 },
  WEBHOOK_ALLOW_PRIVATE_TARGETS: { field: "webhookAllowPrivateTargets", schema: { type: "boolean" }, default: false },
  // 24 h (contract section 8); at most 30 days.
  WEBHOOK_SECRET_OVERLAP_MS: { field: "webhookSecretOverlapMs", schema: { type: "integer", minimum: 0, maximum: 2592000000 }, default: 86400000 },
  NOTIFIER_ENDPOINT_CONCURRENCY: { field: "notifierEndpointConcurrency", schema: { type: "integer", minimum: 1, maximum: 1024 }, default: 16 },
  NOTIFIER_MAX_IN_FLIGHT: { field: "notifierMaxInFlight", schema: { type: "integer", minimum: 1, maximum: 10000 }, default: 256 },
  NOTIFIER_POLL_MS: { field: "notifierPollMs", schema: { type: "integer", minimum: 10, maximum: 60000 }, default: 1000 },
  // At least the attempt's own limits (3 s connect + 5 s answer) and a margin, so a slow attempt is never taken twice.
  NOTIFIER_LEASE_MS: { field: "notifierLeaseMs", schema: { type: "integer", minimum: 10000, maximum: 3600000 }, default: 60000 },
  NODE_EXTRA_CA_CERTS: { field: "extraCaCerts", schema: { type: ["string", "null"], minLength: 1 }, default: null },
  UPSTREAM_MODE: { field: "upstreamMode", schema: { enum: ["simulator", "http"] }, default: "simulator" },
  UPSTREAM_SMS_URL: { field: "upstreamSmsUrl", schema: { type: ["string", "null"], pattern: "^https?://[^\\s]+$" }, default: null },
  UPSTREAM_RCS_URL: { field: "upstreamRcsUrl", schema: { type: ["string", "null"], pattern: "^https?://[^\\s]+$" }, default: null },
  UPSTREAM_WHATSAPP_URL: { field: "upstreamWhatsappUrl", schema: { type: ["string", "null"], pattern: "^https?://[^\\s]+$" }, default: null },
  UPSTREAM_CONNECT_TIMEOUT_MS: { field: "upstreamConnectTimeoutMs", schema: { type: "integer", minimum: 100, maximum: 60000 }, default: 3000 },
  UPSTREAM_TIMEOUT_MS: { field: "upstreamTimeoutMs", schema: { type: "integer", minimum: 100, maximum: 300000 }, default: 10000 },
  UPSTREAM_CONCURRENCY: { field: "upstreamConcurrency", schema: { type: "integer", minimum: 1, maximum: 1024 }, default: 32 },
  SIMULATOR_PROFILE: { field: "simulatorProfile", schema: { enum: ["realistic", "all-delivered", "flaky"] }, default: "realistic" },
  SIMULATOR_MAX_DELAY_MS: { field: "simulatorMaxDelayMs", schema: { type: "integer", minimum: 0, maximum: 600000 }, default: 3000 },
  CAMPAIGN_BATCH_SIZE: { field: "campaignBatchSize", schema: { type: "integer", minimum: 1, maximum: 1000 }, default: 500 },
  CAMPAIGN_CONCURRENCY: { field: "campaignConcurrency", schema: { type: "integer", minimum: 1, maximum: 64 }, default: 4 },
  CAMPAIGN_LEASE_MS: { field: "campaignLeaseMs", schema: { type: "integer", minimum: 1000, maximum: 3600000 }, default: 30000 },
  // The safety net: campaigns nodes are woken by the campaigns.due broadcast and at a campaign's scheduled time.
  CAMPAIGN_POLL_MS: { field: "campaignPollMs", schema: { type: "integer", minimum: 10, maximum: 60000 }, default: 5000 },
  CAMPAIGN_SLICE_MS: { field: "campaignSliceMs", schema: { type: "integer", minimum: 1000, maximum: 86400000 }, default: 60000 },
  // Bulk sending's share of the machine: what it registers at tracking and writes in PostgreSQL follows this rate.
  CAMPAIGN_NODE_RATE: { field: "campaignNodeRate", schema: { type: "integer", minimum: 0, maximum: 1000000 }, default: 0 },
  LOG_LEVEL: { field: "logLevel", schema: { enum: ["fatal", "error", "warn", "info", "debug", "trace", "silent"] }, default: "info" },
  // null: pretty when stdout is a terminal, JSON otherwise (a pipe, a file, a container's log).
  LOG_FORMAT: { field: "logFormat", schema: { enum: ["pretty", "json", null] }, default: null },
  RATE_LIMIT_RPS: { field: "rateLimitRps", schema: { type: "number", exclusiveMinimum: 0 }, default: 50 },
  // Comma-separated CIDRs (a bare address is one host); parsed and checked below.
  TRUSTED_PROXIES: { field: "trustedProxies", schema: { type: ["string", "null"] }, default: null },
  MAX_KEYS_PER_ACCOUNT: { field: "maxKeysPerAccount", schema: { type: "integer", minimum: 1, maximum: 1000000 }, default: 500 },
  HEAVY_OPS_PER_ACCOUNT: { field: "heavyOpsPerAccount", schema: { type: "integer", minimum: 1, maximum: 1000 }, default: 2 },
  // A node's database pool holds 10 connections: heavy reads of every account together take at most 4.
  HEAVY_OPS_PER_NODE: { field: "heavyOpsPerNode", schema: { type: "integer", minimum: 1, maximum: 1000 }, default: 4 },
  HEAVY_QUEUE_PER_ACCOUNT: { field: "heavyQueuePerAccount", schema: { type: "integer", minimum: 0, maximum: 10000 }, default: 8 },
  HEAVY_QUEUE_WAIT_MS: { field: "heavyQueueWaitMs", schema: { type: "integer", minimum: 0, maximum: 600000 }, default: 5000 },
  // Every statement of a service's pool ends by then (background batches included); heavy reads have their own, lower limit.
  DB_STATEMENT_TIMEOUT_MS: { field: "dbStatementTimeoutMs", schema: { type: "integer", minimum: 1000, maximum: 86400000 }, default: 300000 },
  HEAVY_STATEMENT_TIMEOUT_MS: { field: "heavyStatementTimeoutMs", schema: { type: "integer", minimum: 100, maximum: 3600000 }, default: 20000 },
  REQUEST_TIMEOUT_MS: { field: "requestTimeoutMs", schema: { type: "integer", minimum: 100 }, default: 30000 },
  SHUTDOWN_TIMEOUT_MS: { field: "shutdownTimeoutMs", schema: { type: "integer", minimum: 0, maximum: 600000 }, default: 20000 },
  AUTH_CACHE_TTL_MS: { field: "authCacheTtlMs", schema: { type: "integer", minimum: 0 }, default: 60000 },
  VALIDATE_RESPONSES: { field: "validateResponses", schema: { type: "boolean" }, default: false },
  NODE_ID: { field: "nodeId", schema: { type: ["string", "null"], pattern: "^[A-Za-z0-9._-]{1,64}$" }, default: null },
  TRACING_EXPORTER: { field: "tracingExporter", schema: { enum: ["none", "console", "zipkin", "event"] }, default: "none" },
  TRACING_ZIPKIN_URL: { field: "tracingZipkinUrl", schema: { type: "string", pattern: "^https?://" }, default: "http://127.0.0.1:9411" },
  NAMESPACE: { field: "namespace", schema: { type: "string", pattern: "^[A-Za-z0-9_-]{1,64}$" }, default: "pgw" },
  IMPORT_DIR: { field: "importDir", schema: { type: ["string", "null"], minLength: 1 }, default: null },
  IMPORT_WORKERS: { field: "importWorkers", schema: { type: "integer", minimum: 1, maximum: 64 }, default: 1 },
  IMPORT_QUEUE_MAX_BYTES: { field: "importQueueMaxBytes", schema: { type: "integer", minimum: 1 }, default: 1073741824 },
  SPOOL_MAX_BYTES: { field: "spoolMaxBytes", schema: { type: "integer", minimum: 1 }, default: 2147483648 },
  // A quarter: one account cannot hold the spool (or the import queue) against the others.
  UPLOAD_ACCOUNT_SHARE: { field: "uploadAccountShare", schema: { type: "number", exclusiveMinimum: 0, maximum: 1 }, default: 0.25 },
  // 16 KiB in any 30 s: an upload that trickles (holding its spool reservation) is ended with 408.
  UPLOAD_MIN_BYTES: { field: "uploadMinBytes", schema: { type: "integer", minimum: 0, maximum: 1073741824 }, default: 16384 },
  UPLOAD_MIN_WINDOW_MS: { field: "uploadMinWindowMs", schema: { type: "integer", minimum: 100, maximum: 3600000 }, default: 30000 },
  MESSAGE_RETENTION_DAYS: { field: "messageRetentionDays", schema: { type: "integer", minimum: 1, maximum: 36500 }, default: 400 },
  EXPORT_DIR: { field: "exportDir", schema: { type: ["string", "null"], minLength: 1 }, default: null },
  // null: the cores of this machine but one (at least one), leaving a core to the service's own thread.
  EXPORT_WORKERS: { field: "exportWorkers", schema: { type: ["integer", "null"], minimum: 1, maximum: 64 }, default: null },
  EXPORT_SIGNING_KEY: { field: "exportSigningKey", schema: { type: ["string", "null"], minLength: 32 }, default: null },
  MEDIA_DIR: { field: "mediaDir", schema: { type: ["string", "null"], minLength: 1 }, default: null },
  MEDIA_ACCOUNT_MAX_BYTES: { field: "mediaAccountMaxBytes", schema: { type: "integer", minimum: 1 }, default: 1073741824 },
  // 32 bytes in base64 (44 characters with padding, 43 without).
  SECRETS_KEY: { field: "secretsKey", schema: { type: ["string", "null"], pattern: "^[A-Za-z0-9+/]{43}=?$" }, default: null },
  SECRETS_KEY_PREVIOUS: { field: "secretsKeyPrevious", schema: { type: ["string", "null"], pattern: "^[A-Za-z0-9+/]{43}=?$" }, default: null },
  EXPORT_URL_TTL_S: { field: "exportUrlTtlS", schema: { type: "integer", minimum: 10, maximum: 604800 }, default: 900 },
  EXPORT_RETENTION_S: { field: "exportRetentionS", schema: { type: "integer", minimum: 10, maximum: 31536000 }, default: 86400 },
  // The safety net: exports nodes are woken by the exports.jobQueued broadcast when a job is queued.
  EXPORT_POLL_MS: { field: "exportPollMs", schema: { type: "integer", minimum: 10, maximum: 60000 }, default: 5000 },
  EXPORT_LEASE_MS: { field: "exportLeaseMs", schema: { type: "integer", minimum: 3000, maximum: 3600000 }, default: 60000 },
  SSE_HEARTBEAT_MS: { field: "sseHeartbeatMs", schema: { type: "integer", minimum: 10, maximum: 300000 }, default: 15000 },
  SSE_MAX_STREAMS: { field: "sseMaxStreams", schema: { type: "integer", minimum: 1, maximum: 1000000 }, default: 10000 },
  SSE_MAX_STREAMS_PER_ACCOUNT: { field: "sseMaxStreamsPerAccount", schema: { type: "integer", minimum: 1, maximum: 100000 }, default: 200 },
  INBOX_EVENT_RETENTION_HOURS: { field: "inboxEventRetentionHours", schema: { type: "integer", minimum: 1, maximum: 8760 }, default: 72 },
} as const;

export type EnvName = keyof typeof VARIABLES;

/** Never echoed in an error message (they may carry passwords or tokens). */
const SECRET_VARIABLES = new Set<string>([
  "INTERNAL_TOKEN",
  "DATABASE_URL",
  "TRANSPORTER",
  "EXPORT_SIGNING_KEY",
  "SECRETS_KEY",
  "SECRETS_KEY_PREVIOUS",
  "NATS_PASSWORD",
  "NATS_TOKEN",
]);

export class ConfigError extends Error {
  override name = "ConfigError";
}

const ajv = new Ajv({ coerceTypes: true, allErrors: false, strict: false });
const validate = ajv.compile({
  type: "object",
  properties: Object.fromEntries(Object.entries(VARIABLES).map(([k, v]) => [k, v.schema])),
});

/** Reads the environment (or the object given, for tests), validates it and freezes the result. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, overrides: Partial<Config> = {}, opts: { runsServices?: boolean } = {}): Config {
  const raw: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(VARIABLES)) {
    const value = env[name];
    raw[name] = value === undefined || value === "" ? spec.default : value;
  }
  if (!validate(raw)) {
    const e = validate.errors![0]!;
    const name = e.instancePath.replace(/^\//, "");
    const shown = SECRET_VARIABLES.has(name) ? "(value not shown)" : JSON.stringify(env[name]);
    throw new ConfigError(`Invalid configuration: ${name}=${shown} ${e.message}`);
  }
  const out: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(VARIABLES)) out[spec.field] = raw[name];

  const services = String(out.services)
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  const unknown = services.filter((s) => !(ALL_SERVICES as readonly string[]).includes(s));
  if (unknown.length > 0 || services.length === 0) {
    throw new ConfigError(`Invalid configuration: SERVICES names unknown service(s) ${unknown.join(", ") || "(none)"}; known: ${ALL_SERVICES.join(", ")}`);
  }
  out.services = [...new Set(services)];
  out.dataDir = path.resolve(String(out.dataDir));
  out.importDir = path.resolve(out.importDir == null ? path.join(String(out.dataDir), "imports") : String(out.importDir));
  out.mediaDir = path.resolve(out.mediaDir == null ? path.join(String(out.dataDir), "media") : String(out.mediaDir));
  out.exportDir = path.resolve(out.exportDir == null ? path.join(String(out.dataDir), "exports") : String(out.exportDir));
  if (out.exportWorkers == null) out.exportWorkers = Math.max(1, os.availableParallelism() - 1);
  if (out.publicBaseUrl == null) out.publicBaseUrl = `http://localhost:${out.port}`;
  if (out.logFormat == null) out.logFormat = process.stdout.isTTY ? "pretty" : "json";
  out.trustedProxies = parseTrustedProxies(out.trustedProxies as string | null);
  if (out.internalHost == null) out.internalHost = out.transporter ? "0.0.0.0" : "127.0.0.1";
  if (out.natsUser && out.natsToken)
    throw new ConfigError("Invalid configuration: NATS_USER and NATS_TOKEN are both set; NATS takes a user and password or a token");
  if (Boolean(out.natsUser) !== Boolean(out.natsPassword)) throw new ConfigError("Invalid configuration: NATS_USER and NATS_PASSWORD go together");
  const config = { ...(out as unknown as Config), ...overrides };
  if (config.transporter && !config.databaseUrl && opts.runsServices !== false) {
    throw new ConfigError(
      "Cluster mode refused: TRANSPORTER is set but DATABASE_URL is not; every node of a cluster must share one PostgreSQL (set DATABASE_URL=postgres://...)",
    );
  }
  if (config.transporter && !config.exportSigningKey && config.services.includes("exports") && opts.runsServices !== false) {
    throw new ConfigError(
      "Cluster mode refused: TRANSPORTER is set but EXPORT_SIGNING_KEY is not; every exports node must sign download URLs with the same key (set EXPORT_SIGNING_KEY to 32 or more random characters)",
    );
  }
  const sealing = config.services.filter((s) => s === "profiles" || s === "notifier");
  if (config.transporter && !config.secretsKey && sealing.length > 0 && opts.runsServices !== false) {
    throw new ConfigError(
      `Cluster mode refused: TRANSPORTER is set but SECRETS_KEY is not; every ${sealing.join(" and ")} node must encrypt secrets (profile tokens, webhook signing secrets) with the same key (set SECRETS_KEY to 32 random bytes in base64, e.g. \`openssl rand -base64 32\`)`,
    );
  }
  if (config.upstreamMode === "http" && (config.services.includes("campaigns") || config.services.includes("inbox")) && opts.runsServices !== false) {
    const missing = (["UPSTREAM_SMS_URL", "UPSTREAM_RCS_URL", "UPSTREAM_WHATSAPP_URL"] as const).filter((n) => !config[VARIABLES[n].field]);
    if (missing.length) throw new ConfigError(`Invalid configuration: UPSTREAM_MODE=http needs ${missing.join(", ")}`);
  }
  // A tracking node put in cluster mode by its environment runs the ingress on the network: it needs
  // a token, or an operator's explicit word that something else guards it.
  if (out.transporter && !config.internalToken && !config.internalTokenDisabled && config.services.includes("tracking") && opts.runsServices !== false) {
    throw new ConfigError(
      "Cluster mode refused: TRANSPORTER is set but INTERNAL_TOKEN is not; the internal ingress would accept anyone (set INTERNAL_TOKEN to 16 or more random characters, or INTERNAL_TOKEN_DISABLED=true if something else guards it)",
    );
  }
  return Object.freeze(config);
}

/** TRUSTED_PROXIES as normalised CIDRs (`10.0.0.0/8`, `2001:db8::/32`); a bare address is a /32 or /128. */
function parseTrustedProxies(value: string | null): string[] {
  const entries = (value ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  return entries.map((entry) => {
    try {
      const [addr, bits] = entry.includes("/") ? ipaddr.parseCIDR(entry) : ((a) => [a, a.kind() === "ipv4" ? 32 : 128] as const)(ipaddr.parse(entry));
      return `${addr.toString()}/${bits}`;
    } catch {
      throw new ConfigError(
        `Invalid configuration: TRUSTED_PROXIES=${JSON.stringify(value)} has ${JSON.stringify(entry)}, which is not a CIDR (e.g. 10.0.0.0/8)`,
      );
    }
  });
}
