/**
 * The start-up banner of `npm start`: where to reach what this node serves (API, docs, metrics,
 * the internal ingress), how to create the first key and how to open the REPL. On a pretty log it
 * is a short block of text; on a JSON log it is one record whose fields carry the same (a log
 * collector reads it like any other line).
 */
import type { Config } from "../lib/config";
import { API_PREFIX } from "../lib/http/api";

export interface BannerInput {
  config: Config;
  /** The gateway's port, when this node runs it. */
  port: number | null;
  /** The internal ingress's port, when this node runs tracking. */
  internalPort: number | null;
  /** The operator's listener (health, metrics) of a node with neither. */
  opsPort: number | null;
}

export interface Banner {
  title: string;
  /** label -> value, in the order shown. */
  rows: Array<[string, string]>;
  urls: Partial<Record<"api" | "docs" | "metrics" | "ingress" | "health", string>>;
  firstKey: string;
  repl: string;
}

/** A wildcard bind address is reached as localhost. */
const shownHost = (host: string) => (host === "0.0.0.0" || host === "::" ? "localhost" : host.includes(":") ? `[${host}]` : host);

export function startupBanner({ config, port, internalPort, opsPort }: BannerInput): Banner {
  const urls: Banner["urls"] = {};
  const rows: Banner["rows"] = [];
  if (port != null) {
    const base = `http://${shownHost(config.host)}:${port}`;
    urls.api = `${base}${API_PREFIX}`;
    urls.docs = `${base}/docs`;
    urls.metrics = `${base}/metrics`;
    rows.push(["API", urls.api], ["Docs", urls.docs], ["Metrics", urls.metrics]);
  }
  if (internalPort != null) {
    urls.ingress = `http://${shownHost(config.internalHost)}:${internalPort}/internal/v1`;
    rows.push(["Ingress", `${urls.ingress}  (internal; ${config.internalToken ? "X-Internal-Token required" : "no INTERNAL_TOKEN"})`]);
  }
  if (opsPort != null) {
    const base = `http://${shownHost(config.host)}:${opsPort}`;
    urls.health = `${base}/healthz/ready`;
    urls.metrics = `${base}/metrics`;
    rows.push(["Health", urls.health], ["Metrics", urls.metrics]);
  }
  const firstKey = "npm run admin -- keys:create --company <companyId> --operations ALL";
  const repl = config.transporter ? "TRANSPORTER=<the same URL> npm run repl" : "npm run repl";
  rows.push(["First key", firstKey], ["REPL", `${repl}  (in another terminal)`]);
  // Never the TRANSPORTER URL itself: it may carry NATS credentials.
  const title = config.transporter
    ? `Partner gateway cluster node ${config.nodeId ?? ""} running ${config.services.join(", ")}`.replace("  ", " ")
    : `Partner gateway running: all services in one process, ${config.databaseUrl ? "PostgreSQL at DATABASE_URL" : `PGlite in ${config.dataDir}`}`;
  return { title, rows, urls, firstKey, repl };
}

/** The banner as lines of plain text (pino-pretty colours the record; escape codes in it would be stripped). */
export function bannerText(banner: Banner): string {
  const width = Math.max(...banner.rows.map(([label]) => label.length));
  const lines = [banner.title, ...banner.rows.map(([label, value]) => `  ${label.padEnd(width)}  ${value}`)];
  return `${lines.join("\n")}\n`;
}

/** The banner as one log line's message. */
export function bannerMessage(banner: Banner): string {
  return `${banner.title}: ${banner.rows.map(([label, value]) => `${label} ${value}`).join("; ")}`;
}
