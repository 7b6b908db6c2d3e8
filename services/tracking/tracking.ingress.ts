/**
 * The internal ingress (contract section 6): a second moleculer-web listener, on INTERNAL_PORT, run
 * by every tracking node, through which upstream services report what they sent and what happened
 * to it. Partners never reach it (it is not routed by the gateway, and in Kubernetes its port is
 * only a ClusterIP service). It listens on INTERNAL_HOST (127.0.0.1 in embedded mode). With
 * INTERNAL_TOKEN set (a cluster node must set it, unless INTERNAL_TOKEN_DISABLED=true), every call
 * must carry it in X-Internal-Token.
 *
 * Each path takes one object or an array of up to 1000; everything is validated before anything is
 * stored, and the answer (202) comes once the rows are committed.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Service, ServiceSchema } from "moleculer";
import ApiGateway from "moleculer-web";
import type { Deps } from "../../lib/deps";
import { ApiError, type FieldError } from "../../lib/errors";
import { answerClientError, jsonParser, requestIdOf, requireJson, tagRequest, writeProblem } from "../../lib/http/http";
import { addNodeRegistry, HttpMetrics } from "../../lib/observability/http-metrics";
import { withRequestId } from "../../lib/observability/logger";
import { toProblem } from "../../lib/http/problem";
import { isE164, PHONE_ERROR } from "../../lib/messaging/phone";
import { checkText } from "../../lib/http/text";
import { compileSchema, toFieldErrors } from "../../lib/http/validator";
import {
  inboundIn,
  MAX_INGEST_ITEMS,
  optOutReportIn,
  rcsReceiptIn,
  readIn,
  registrationIn,
  smsReceiptIn,
  whatsappReceiptIn,
  type ChannelReceiptIn,
  type InboundIn,
  type OptOutReportIn,
  type ReadIn,
  type RegistrationIn,
  type SmsReceiptIn,
  type IngestOut,
} from "./tracking.schemas";
import { dateError } from "./tracking.contract";
import type { InboundItem, IngestItem } from "./tracking.fold";

export type { InboundItem };
import { IngestMetrics } from "./tracking.metrics";
import { drainOf } from "../../lib/http/drain";
import { closeListener, createListener, listen, requestIdCallOptions, type WebHandler, type WebService } from "../../lib/http/moleculer-web";

/** Bodies up to 8 MiB: 1000 registrations with long texts fit. */
export const MAX_INGEST_BODY = 8 * 1024 * 1024;

interface IngressRequest extends IncomingMessage {
  $requestId: string;
}

type Next = (err?: unknown) => void;

/** X-Internal-Token, compared in constant time, when INTERNAL_TOKEN is set. */
function tokenGuard(token: string | null) {
  const expected = token ? createHash("sha256").update(token).digest() : null;
  return (req: IncomingMessage, _res: ServerResponse, next: Next) => {
    if (!expected) return next();
    const given = req.headers["x-internal-token"];
    const ok = typeof given === "string" && timingSafeEqual(createHash("sha256").update(given).digest(), expected);
    next(ok ? undefined : new ApiError("UNAUTHORIZED", given === undefined ? "The X-Internal-Token header is missing." : "The X-Internal-Token is wrong."));
  };
}

/** An upstream's opt-out report, validated here and handed to contacts (`contacts.applyOptOuts`), which owns opt-outs. */
export interface OptOutItem {
  kind: "optOut";
  report: OptOutReportIn;
}
export type ParsedItem = IngestItem | InboundItem | OptOutItem;

/** What each path takes: its schema and how a valid object becomes an ingest item. */
interface Kind {
  schema: { $id: string };
  toItem(v: unknown): ParsedItem;
  check?(v: unknown): FieldError | null;
}

const iso = (s: string) => new Date(s).toISOString();

const KINDS: Record<string, Kind> = {
  messages: {
    schema: registrationIn,
    toItem: (v) => ({ kind: "message", message: v as RegistrationIn }),
    check: (v) => dateError((v as RegistrationIn).sentAt, "sentAt"),
  },
  "receipts/sms": {
    schema: smsReceiptIn,
    toItem: (v) => {
      const r = v as SmsReceiptIn;
      return {
        kind: "receipt",
        channel: "SMS",
        companyId: r.companyId,
        messageId: r.MESSAGE_ID,
        destination: r.DESTINATION,
        code: r.DELIVERY_STATUS,
        date: iso(r.DELIVERY_DATE),
        price: r.PRICE,
        totalParts: r.TOTAL_PARTS ?? null,
        numPart: r.NUM_PART ?? 1,
      };
    },
    check: (v) => {
      const r = v as SmsReceiptIn;
      if (r.NUM_PART !== undefined && r.TOTAL_PARTS !== undefined && r.NUM_PART > r.TOTAL_PARTS)
        return { path: "NUM_PART", message: `must not be above TOTAL_PARTS (${r.TOTAL_PARTS})` };
      return dateError(r.DELIVERY_DATE, "DELIVERY_DATE");
    },
  },
  ...channelKinds("RCS"),
  ...channelKinds("WHATSAPP"),
  "opt-outs": {
    schema: optOutReportIn,
    toItem: (v) => ({ kind: "optOut", report: v as OptOutReportIn }),
    check: (v) => (isE164((v as OptOutReportIn).phoneNumber) ? dateError((v as OptOutReportIn).at, "at") : { path: "phoneNumber", message: PHONE_ERROR }),
  },
};

function channelKinds(channel: "RCS" | "WHATSAPP"): Record<string, Kind> {
  const lower = channel.toLowerCase();
  return {
    [`receipts/${lower}`]: {
      schema: channel === "RCS" ? rcsReceiptIn : whatsappReceiptIn,
      toItem: (v) => {
        const r = v as ChannelReceiptIn;
        return {
          kind: "receipt",
          channel,
          companyId: r.companyId,
          messageId: r.messageId,
          destination: r.destination,
          code: r.statusCode,
          date: iso(r.eventDate),
          totalParts: 1,
          numPart: 1,
        };
      },
      check: (v) => dateError((v as ChannelReceiptIn).eventDate, "eventDate"),
    },
    [`reads/${lower}`]: {
      schema: readIn,
      toItem: (v) => {
        const r = v as ReadIn;
        return { kind: "read", channel, companyId: r.companyId, messageId: r.messageId, destination: r.destination, date: iso(r.eventDate) };
      },
      check: (v) => dateError((v as ReadIn).eventDate, "eventDate"),
    },
    [`inbound/${lower}`]: {
      schema: inboundIn,
      toItem: (v) => ({ kind: "inbound", channel, inbound: v as InboundIn }),
      // The end user's number must be one (libphonenumber), not only look like E.164.
      check: (v) => (isE164((v as InboundIn).source) ? dateError((v as InboundIn).receivedDate, "receivedDate") : { path: "source", message: PHONE_ERROR }),
    },
  };
}

/**
 * Validates a posted body (object or array) against the path's schema and returns its items; any
 * error anywhere rejects the whole body (400, nothing stored), naming each bad field by its path.
 */
export function parseIngest(path: string, body: unknown): ParsedItem[] {
  const kind = KINDS[path];
  // An end user's message on a channel without conversations is a bad body, not a missing route (issue 18).
  if (!kind && path.startsWith("inbound/"))
    throw new ApiError("VALIDATION_ERROR", `Inbound messages come on rcs or whatsapp, not ${path.slice("inbound/".length)}; nothing was stored.`, {
      errors: [{ path: "channel", message: "must be rcs or whatsapp" }],
    });
  if (!kind) throw new ApiError("ROUTE_NOT_FOUND", `No route POST /internal/v1/${path}.`);
  const validate = compileSchema(kind.schema);
  checkText(body); // NUL and unpaired surrogates: a 400 here, not a failed statement later
  const list = Array.isArray(body) ? body : [body];
  if (Array.isArray(body) && body.length === 0) throw new ApiError("VALIDATION_ERROR", "The array is empty.");
  if (list.length > MAX_INGEST_ITEMS)
    throw new ApiError("VALIDATION_ERROR", `An array holds at most ${MAX_INGEST_ITEMS} objects; this one has ${list.length}.`);
  const errors: FieldError[] = [];
  const items: ParsedItem[] = [];
  list.forEach((v, i) => {
    const prefix = Array.isArray(body) ? `[${i}]` : "";
    const at = (p: string) => (prefix ? (p ? `${prefix}.${p}` : prefix) : p);
    if (!validate(v)) {
      for (const e of toFieldErrors(validate.errors)) if (errors.length < 50) errors.push({ path: at(e.path), message: e.message });
      return;
    }
    const bad = kind.check?.(v);
    if (bad) {
      if (errors.length < 50) errors.push({ path: at(bad.path), message: bad.message });
      return;
    }
    items.push(kind.toItem(v));
  });
  if (errors.length > 0)
    throw new ApiError("VALIDATION_ERROR", `The body has ${errors.length === 50 ? "50 or more" : errors.length} invalid field(s); nothing was stored.`, {
      errors,
    });
  return items;
}

/** The ingress paths of contract section 6, for the docs and tests. */
export const INGRESS_PATHS = ["messages", ...Object.keys(KINDS).filter((k) => k !== "messages")];
/** Every path the listener serves: the label of its HTTP metrics (anything else is "unmatched"). */
const KNOWN_PATHS = new Set([...INGRESS_PATHS.map((p) => `/internal/v1/${p}`), "/healthz/live", "/healthz/ready", "/metrics"]);

type IngressThis = Service & {
  server: import("node:http").Server;
  ingestMetrics: IngestMetrics;
  httpMetrics: HttpMetrics;
  ingestBody(path: string, body: unknown): Promise<IngestOut>;
};

/**
 * Any error of a request as a problem; a 503 (a service away, the database unreachable) is an
 * outage the upstream retries, logged as a warning, any other 5xx as an error, once each.
 */
function answerError(svc: IngressThis, req: IngressRequest, res: ServerResponse, err: unknown): void {
  const problem = toProblem(err, req.$requestId ?? requestIdOf(undefined));
  if (problem.status === 503) withRequestId(req.$requestId, () => svc.logger.warn({ err, path: req.url }, "ingress request refused: unavailable"));
  else if (problem.status >= 500) withRequestId(req.$requestId, () => svc.logger.error({ err, path: req.url }, "ingress request failed"));
  const retryAfter = (problem as { retryAfter?: unknown }).retryAfter;
  writeProblem(res, problem, {
    "X-Request-Id": problem.requestId,
    ...(problem.status === 503 && typeof retryAfter === "number" ? { "Retry-After": String(retryAfter) } : {}),
  });
}

/** What moleculer-web does not route: 405 with Allow on a known path, 404 otherwise. */
function answerNoRoute(req: IngressRequest, res: ServerResponse): void {
  const path = ((req as { originalUrl?: string }).originalUrl ?? req.url ?? "").split("?")[0]!;
  const known = INGRESS_PATHS.some((p) => path === `/internal/v1/${p}`) || path === "/healthz/live" || path === "/healthz/ready";
  const err = known
    ? new ApiError("METHOD_NOT_ALLOWED", `${req.method} is not allowed on ${path}; allowed: ${path.startsWith("/healthz") ? "GET" : "POST"}.`)
    : new ApiError("ROUTE_NOT_FOUND", `No route ${req.method} ${path}.`);
  if (known) res.setHeader("Allow", path.startsWith("/healthz") ? "GET" : "POST");
  writeProblem(res, toProblem(err, req.$requestId), { "X-Request-Id": req.$requestId });
}

/**
 * The ingress's own listener (moleculer-web in middleware mode): the request id, the HTTP metrics,
 * then moleculer-web's documented `express()` handler, whose `next` answers what it does not route.
 */
function ingressListener(svc: IngressThis, web: WebHandler, requestTimeoutMs: number) {
  return createListener({}, requestTimeoutMs, (req, res) => {
    const r = req as IngressRequest;
    const requestId = tagRequest(r, res);
    const started = process.hrtime.bigint();
    res.once("finish", () => {
      const path = ((req as { originalUrl?: string }).originalUrl ?? req.url ?? "").split("?")[0]!;
      const route = KNOWN_PATHS.has(path) ? path : "unmatched";
      svc.httpMetrics.observe(req.method ?? "GET", route, res.statusCode, Number(process.hrtime.bigint() - started) / 1e9);
    });
    const next = (err?: unknown) => (err ? answerError(svc, r, res, err) : answerNoRoute(r, res));
    withRequestId(requestId, () => web(req, res, next));
  });
}

/** Stores the posted body and answers 202 `{ accepted }` once it is committed. */
async function answer(svc: IngressThis, path: string, req: IngressRequest, res: ServerResponse): Promise<void> {
  const out = await svc.ingestBody(path, (req as { body?: unknown }).body);
  const body = JSON.stringify(out);
  res.writeHead(202, { "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(body) });
  res.end(body);
}

/** moleculer-web configured as the internal listener; mixed into the tracking service. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function IngressMixin({ config, db }: Deps): Partial<ServiceSchema<any, any, Omit<IngressThis, keyof Service>>> {
  return {
    mixins: [ApiGateway as unknown as ServiceSchema],
    settings: {
      // Middleware mode: the listener is the ingress's own (ingressListener), calling moleculer-web's express() handler.
      server: false,
      rootCallOptions: requestIdCallOptions,
      port: config.internalPort,
      ip: config.internalHost,
      logRequest: null,
      logResponse: null,
      logRequestParams: null,
      logRouteRegistration: "debug",
      routes: [
        {
          name: "internal",
          logging: false, // moleculer-web's request lines are off (logRequest/logResponse null); this skips formatting them
          path: "/internal/v1",
          mappingPolicy: "restrict",
          autoAliases: false,
          bodyParsers: false,
          mergeParams: false,
          use: [tokenGuard(config.internalToken), requireJson, jsonParser(MAX_INGEST_BODY)],
          // Function aliases: the hot path goes straight to the writer, without a second action
          // call per request (`tracking.ingest` does the same for the REPL and other nodes).
          aliases: {
            // Their errors are answered here (answerError), not passed on to moleculer-web, which would log every 5xx first.
            "POST /messages"(this: IngressThis, req: IngressRequest, res: ServerResponse) {
              answer(this, "messages", req, res).catch((err: unknown) => answerError(this, req, res, err));
            },
            "POST /opt-outs"(this: IngressThis, req: IngressRequest, res: ServerResponse) {
              answer(this, "opt-outs", req, res).catch((err: unknown) => answerError(this, req, res, err));
            },
            "POST /:kind/:channel"(this: IngressThis, req: IngressRequest, res: ServerResponse) {
              const p = (req as { $params?: { params?: Record<string, string> } }).$params?.params ?? {};
              answer(this, `${p.kind}/${p.channel}`, req, res).catch((err: unknown) => answerError(this, req, res, err));
            },
          },
        },
        {
          // Probes for the nodes that run tracking (in Kubernetes, nothing else of theirs speaks HTTP); no token.
          name: "health",
          path: "/healthz",
          mappingPolicy: "restrict",
          bodyParsers: false,
          aliases: {
            "GET /live"(_req: IngressRequest, res: ServerResponse) {
              res.writeHead(200, { "Content-Type": "application/json; charset=utf-8" });
              res.end(JSON.stringify({ status: "live" }));
            },
            async "GET /ready"(this: IngressThis, req: IngressRequest, res: ServerResponse) {
              if (drainOf(this.broker).draining) {
                return writeProblem(
                  res,
                  toProblem(new ApiError("SERVICE_UNAVAILABLE", "Not ready: node stopping", { checks: { node: "stopping" } }), req.$requestId),
                );
              }
              const ok = await db.ping(1000).then(
                () => true,
                () => false,
              );
              if (!ok) return writeProblem(res, toProblem(new ApiError("SERVICE_UNAVAILABLE", "Not ready: database unreachable"), req.$requestId));
              res.writeHead(200, { "Content-Type": "application/json; charset=utf-8" });
              res.end(JSON.stringify({ status: "ready", checks: { database: "ok" } }));
            },
          },
        },
        {
          name: "metrics",
          path: "/metrics",
          mappingPolicy: "restrict",
          bodyParsers: false,
          aliases: {
            async "GET /"(this: IngressThis, _req: IngressRequest, res: ServerResponse) {
              const text = await this.httpMetrics.render();
              res.writeHead(200, { "Content-Type": this.httpMetrics.contentType });
              res.end(text);
            },
          },
        },
      ],
      onError(this: IngressThis, req: IngressRequest, res: ServerResponse, err: unknown) {
        answerError(this, req, res, err);
      },
    },
    actions: {
      listAliases: false,
      addRoute: false,
      removeRoute: false,
    },
    created(this: IngressThis) {
      const web = (this as unknown as WebService).express();
      this.server = ingressListener(this, web, (this.settings as { requestTimeout?: number }).requestTimeout ?? 300_000);
      this.server.on("clientError", answerClientError);
      drainOf(this.broker).track(this.server);
      this.ingestMetrics = new IngestMetrics();
      addNodeRegistry(this.broker, this.ingestMetrics.registry);
      this.httpMetrics = new HttpMetrics(this.broker);
    },
    started(this: IngressThis) {
      return listen(this.server, config.internalPort, config.internalHost);
    },
    stopped(this: IngressThis) {
      return closeListener(this.server);
    },
  };
}
