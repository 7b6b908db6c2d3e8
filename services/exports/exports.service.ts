/**
 * exports: asynchronous CSV exports of contacts, delivery reports and the message history (spec
 * parts 1, 2 and 4; contract section 4). Creating a job answers 202 at once; an exports node runs it
 * (exports.runner.ts) and partners poll GET /exports until it is available, then ask GET
 * /exports/{exportId} for a signed, time-limited URL that needs no key.
 *
 * Files stay on the node that wrote them (EXPORT_DIR, a volume). A download answers where the file
 * is (this node, or the writer the job records) and the gateway pulls it from there range by range
 * over Moleculer as the client reads (lib/http/remote-file.ts), so any gateway replica serves any file
 * with flat memory. With a shared EXPORT_DIR every exports node reads the file directly.
 */
import { randomUUID } from "node:crypto";
import { open, stat } from "node:fs/promises";
import path from "node:path";
import type { Context, Service, ServiceSchema } from "moleculer";
import { API_PREFIX, apiAction, type ApiServiceSettings, type AuthMeta } from "../../lib/http/api";
import type { Deps } from "../../lib/deps";
import { ApiError } from "../../lib/errors";
import type { Page } from "../../lib/http/paging";
import { iso } from "../../lib/messaging/time";
import type { RemoteFile } from "../../lib/http/remote-file";
import { callTracking, checkHistoryRange } from "../tracking/tracking.contract";
import { OPS_ROWS, seconds, type OpsTable } from "../../lib/observability/ops";
import { addNodeRegistry } from "../../lib/observability/http-metrics";
import { ExportMetrics } from "./exports.metrics";
import { EXPORT_QUEUED, ExportRunner, FILE_RE, OWNER_WAIT_MS, type ClaimedJob } from "./exports.runner";
import {
  contactExportIn,
  downloadIn,
  downloadOut,
  exportIdIn,
  exportLinkOut,
  exportOut,
  exportPage,
  fileRangeIn,
  fileSizeIn,
  listExportsIn,
  messageExportIn,
  type ContactExportIn,
  type ExportLinkOut,
  type ExportOut,
  type ExportType,
  type FileRangeIn,
  type FileSizeIn,
  type MessageExportIn,
} from "./exports.schemas";
import { signingKey, UrlSigner } from "./exports.signing";
import { callContacts, UUID } from "../contacts/contacts.contract";
import { findJob, insertJob, jobsPage, queuedJobs, requeueJob } from "./exports.queries";
import { available, toExportOut, type JobRow } from "./exports.models";

const FILE_TITLES: Record<ExportType, string> = { CONTACTS: "contacts", DELIVERY_REPORTS: "delivery-reports", MESSAGE_HISTORY: "message-history" };

interface ExportsVars {
  runner: ExportRunner;
  signer: UrlSigner;
  queued(): void;
  createJob(ctx: Context<unknown, AuthMeta & { $location?: string }>, type: ExportType, filters: object): Promise<ExportOut>;
  jobOf(companyId: string | null, id: string): Promise<JobRow | null>;
  locate(ctx: Context, job: JobRow): Promise<RemoteFile>;
}
type ExportsThis = Service<ApiServiceSettings> & ExportsVars;
type Ctx<P> = Context<P, AuthMeta & { $location?: string; $responseType?: string }>;

/** The two message exports: the history filters (dates checked as the history checks them), a 202 with the job. */
const messageExport = (type: "DELIVERY_REPORTS" | "MESSAGE_HISTORY", rest: string, summary: string, description: string) =>
  apiAction({
    rest,
    operation: "EXPORTS",
    summary,
    description,
    params: messageExportIn,
    responses: { 202: exportOut },
    errors: [400],
    async handler(this: ExportsThis, ctx: Ctx<MessageExportIn>) {
      checkHistoryRange(ctx.params);
      return this.createJob(ctx, type, ctx.params);
    },
  });

/** A file of this node's EXPORT_DIR by its name, only when the name is one the runner writes (never a path). */
const localFileIn = (dir: string) => (name: string) => {
  if (!FILE_RE.test(name) || !name.endsWith(".csv.gz")) throw fileGone("No such export file");
  return path.join(dir, name);
};

const UUID_RE = new RegExp(UUID);

/** 202 with the job, and where to read it. */
function accepted(ctx: Ctx<unknown>, job: JobRow): ExportOut {
  ctx.meta.$statusCode = 202;
  ctx.meta.$location = `${API_PREFIX}/exports/${job.id}`;
  return toExportOut(job);
}

const fileGone = (why = "The export file is no longer on its node") => new ApiError("EXPORT_FILE_GONE", `${why}; POST /exports/{exportId} runs it again.`);

export function createExportsService(deps: Deps): ServiceSchema<ApiServiceSettings, Record<string, never>, ExportsVars> {
  const { config, db } = deps;
  const sequelize = db.sequelize;
  const notFound = (id: string) => new ApiError("EXPORT_NOT_FOUND", `No export ${id} in this account.`);
  const refused = (why: string) => new ApiError("DOWNLOAD_REFUSED", why);
  const localFile = localFileIn(config.exportDir);

  return {
    name: "exports",
    settings: { rest: "/" },

    actions: {
      contacts: apiAction({
        rest: "POST /exports/contacts",
        operation: "EXPORTS",
        summary: "Export contacts (CSV)",
        description:
          "Queues an export of the account's contacts: every contact field, then one `customFields.<key>` column per declared custom field. The body takes the filters and sort of GET /contacts. Answers 202 with the job; poll GET /exports.",
        params: contactExportIn,
        responses: { 202: exportOut },
        errors: [400],
        async handler(this: ExportsThis, ctx: Ctx<ContactExportIn>) {
          // Checked now by contacts (unknown custom fields, bad values: 400), asked again when the job runs.
          await callContacts(ctx, "contacts.exportStatement", ctx.params);
          return this.createJob(ctx, "CONTACTS", ctx.params);
        },
      }),

      deliveryReports: messageExport(
        "DELIVERY_REPORTS",
        "POST /exports/delivery-reports",
        "Export delivery reports (CSV)",
        "Queues an export of the messages that have a receipt (final status), newest receipt first, with their status fields, parts, price and campaign. The body takes the filters of GET /messages/history, on every channel. Answers 202 with the job.",
      ),

      history: messageExport(
        "MESSAGE_HISTORY",
        "POST /messages/history/export",
        "Export the message history (CSV)",
        "Queues an export of the sent messages with their status fields, text and campaign, newest first, as GET /messages/history lists them (its filters, every channel). Answers 202 with a job of type MESSAGE_HISTORY.",
      ),

      list: apiAction({
        rest: "GET /exports",
        operation: "EXPORTS",
        summary: "Export jobs",
        description:
          "The account's export jobs, newest first. Poll every 5 to 10 seconds until `isAvailableForDownload` is true, then call GET /exports/{exportId}.",
        params: listExportsIn,
        responses: { 200: exportPage },
        errors: [400],
        async handler(ctx: Ctx<{ page: number; limit: number }>): Promise<Page<ExportOut>> {
          return jobsPage(sequelize, ctx.meta.companyId, ctx.params.page, ctx.params.limit);
        },
      }),

      get: apiAction({
        rest: "GET /exports/:exportId",
        operation: "EXPORTS",
        summary: "Download URL of an export",
        description: `Once the export is available: a signed URL of its file, valid ${config.exportUrlTtlS} s (EXPORT_URL_TTL_S) and never past the file's expiry; each call gives a fresh one. 409 while the export is queued, running, failed or expired.`,
        params: exportIdIn,
        responses: { 200: exportLinkOut },
        errors: [400, 404, 409],
        async handler(this: ExportsThis, ctx: Ctx<{ exportId: string }>): Promise<ExportLinkOut> {
          const job = await this.jobOf(ctx.meta.companyId, ctx.params.exportId);
          if (!job) throw notFound(ctx.params.exportId);
          if (!available(job)) {
            const status = toExportOut(job).status;
            const why =
              status === "FAILED"
                ? `The export failed: ${job.error ?? "see its error"}`
                : status === "EXPIRED"
                  ? "The export's file has expired; POST /exports/{exportId} runs it again."
                  : `The export is ${status}; poll GET /exports until isAvailableForDownload is true.`;
            throw new ApiError("EXPORT_NOT_READY", why, { status });
          }
          // Whole seconds (the URL carries seconds), never past the file's own expiry.
          const until = Math.min(Date.now() + config.exportUrlTtlS * 1000, new Date(job.expires_at!).getTime());
          const expiresAt = new Date(Math.floor(until / 1000) * 1000);
          return { exportId: job.id, downloadUrl: this.signer.url(job.id, job.run, expiresAt), expiresAt: expiresAt.toISOString() };
        },
      }),

      regenerate: apiAction({
        rest: "POST /exports/:exportId",
        operation: "EXPORTS",
        summary: "Run an export again",
        description:
          "Starts a fresh run of the same export (same type and filters, today's data) and answers 202 with the job; URLs of the earlier file stop working. A job still queued or running is answered as it is (that run is the fresh one).",
        params: exportIdIn,
        responses: { 202: exportOut },
        errors: [400, 404],
        async handler(this: ExportsThis, ctx: Ctx<{ exportId: string }>): Promise<ExportOut> {
          const { companyId } = ctx.meta;
          const row = await requeueJob(sequelize, companyId, ctx.params.exportId);
          const job = row ?? (await this.jobOf(companyId, ctx.params.exportId));
          if (!job) throw notFound(ctx.params.exportId);
          if (row) this.queued();
          return accepted(ctx, job);
        },
      }),

      /** The signed download: no key; 403 for an altered or expired URL; the file streamed as stored (gzip). */
      download: apiAction({
        rest: "GET /exports/:exportId/download/:expires/:signature",
        operation: null,
        summary: "Download an export file (signed URL)",
        description:
          "The URL given by GET /exports/{exportId}; needs no key. 403 once it has expired or when any part of it was changed. The CSV (UTF-8, header row) is sent gzip-encoded to clients that accept gzip, plain otherwise.",
        params: downloadIn,
        responses: { 200: downloadOut },
        errors: [403, 404, 503],
        async handler(this: ExportsThis, ctx: Ctx<{ exportId: string; expires: string; signature: string }>): Promise<RemoteFile> {
          const { exportId, expires, signature } = ctx.params;
          // Nothing about the export is told before the signature holds: every refusal looks alike.
          const job = UUID_RE.test(exportId) ? await this.jobOf(null, exportId.toLowerCase()) : null;
          if (!job || exportId !== job.id || !this.signer.verify(job.id, job.run, expires, signature)) throw refused("The download URL is not valid.");
          if (Number(expires) * 1000 <= Date.now()) throw refused("The download URL has expired; GET /exports/{exportId} gives a fresh one.");
          if (!available(job)) throw refused("The export's file has expired; POST /exports/{exportId} runs it again.");
          const file = await this.locate(ctx, job);
          const day = iso(job.completed_at)!.slice(0, 10);
          ctx.meta.$responseType = "text/csv; charset=utf-8";
          ctx.meta.$responseHeaders = {
            "Content-Disposition": `attachment; filename="${FILE_TITLES[job.type]}-${day}-${job.id.slice(0, 8)}.csv"`,
            "Content-Encoding": "gzip",
            "Content-Length": String(file.$remoteFile.size),
            "Cache-Control": "private, no-store",
            "X-Content-Type-Options": "nosniff",
          };
          return file;
        },
      }),

      /** The size of a file this node holds (404 when it does not): checked before a download is answered. */
      fileSize: {
        visibility: "public",
        params: fileSizeIn,
        async handler(ctx: Context<FileSizeIn>): Promise<number> {
          const st = await stat(localFile(ctx.params.fileName)).catch(() => null);
          if (!st) throw fileGone();
          return st.size;
        },
      },

      /** A range of a file this node holds, base64: what the gateway pulls as the client reads (lib/http/remote-file.ts). */
      range: {
        visibility: "public",
        params: fileRangeIn,
        async handler(ctx: Context<FileRangeIn>): Promise<string> {
          const fh = await open(localFile(ctx.params.fileName), "r");
          try {
            const buf = Buffer.allocUnsafe(ctx.params.length);
            const { bytesRead } = await fh.read(buf, 0, ctx.params.length, ctx.params.offset);
            return buf.subarray(0, bytesRead).toString("base64");
          } finally {
            await fh.close();
          }
        },
      },

      /** The REPL's `exports`: the jobs waiting and running (oldest first, at most 50), with their age and node. */
      opsQueue: {
        visibility: "public",
        async handler(): Promise<OpsTable> {
          const rows = await queuedJobs(sequelize, OPS_ROWS);
          const total = rows[0]?.total ?? 0;
          return {
            columns: ["exportId", "account", "type", "status", "age", "node"],
            rows: rows.map((r) => [r.id, r.company_id, r.type, r.status, seconds(r.age), r.node_id]),
            note: total > rows.length ? `and ${total - rows.length} more` : undefined,
          };
        },
      },

      /** REPL: `call exports.sweep` expires and deletes what is due now. */
      sweep: {
        visibility: "public",
        async handler(this: ExportsThis) {
          await this.runner.sweep();
          return { ok: true };
        },
      },
    },

    events: {
      /** A job was queued (on any exports node): claim now. */
      [EXPORT_QUEUED](this: ExportsThis) {
        this.runner.kick();
      },
    },

    methods: {
      /** A job was queued here: this node claims at once, every other exports node on the broadcast. */
      queued(this: ExportsThis) {
        this.runner.kick();
        Promise.resolve(this.broker.broadcast(EXPORT_QUEUED)).catch((err: unknown) => this.logger.warn({ err }, "could not wake the exports nodes"));
      },

      async createJob(this: ExportsThis, ctx: Ctx<unknown>, type: ExportType, filters: object): Promise<ExportOut> {
        const row = await insertJob(sequelize, randomUUID(), ctx.meta.companyId, type, filters);
        this.queued();
        return accepted(ctx, row);
      },

      /** One job (of the account, when `companyId` is given). */
      jobOf(companyId: string | null, id: string): Promise<JobRow | null> {
        return findJob(sequelize, companyId, id);
      },

      /** Where the file is: here (this node wrote it, or EXPORT_DIR is shared), else on the node that wrote it. */
      async locate(this: ExportsThis, ctx: Context, job: JobRow): Promise<RemoteFile> {
        const fileName = job.file_name;
        const gone = () => fileGone("The export file is not reachable (its node is gone)");
        if (!fileName || !FILE_RE.test(fileName)) throw gone();
        const here = await stat(localFile(fileName)).catch(() => null);
        if (here) return { $remoteFile: { action: "exports.range", nodeID: this.broker.nodeID, params: { fileName }, size: here.size } };
        if (!job.node_id || job.node_id === this.broker.nodeID || !this.broker.registry.nodes.get(job.node_id)?.available) throw gone();
        const size = (await ctx.call("exports.fileSize", { fileName }, { nodeID: job.node_id })) as number;
        return { $remoteFile: { action: "exports.range", nodeID: job.node_id, params: { fileName }, size } };
      },
    },

    created(this: ExportsThis) {
      this.signer = new UrlSigner(signingKey(config), config.publicBaseUrl);
      const metrics = new ExportMetrics(sequelize);
      addNodeRegistry(this.broker, metrics.registry);
      // The statement is its data's owner's (issue 33 item 1), asked with the job's account.
      const statementOf = async (job: ClaimedJob): Promise<string> => {
        // A node just started may not have discovered the owner's node yet: wait for it a little.
        await this.broker.waitForServices(job.type === "CONTACTS" ? "contacts" : "tracking", OWNER_WAIT_MS, 100);
        const answer =
          job.type === "CONTACTS"
            ? await callContacts(this.broker, "contacts.exportStatement", job.filters as ContactExportIn, { meta: { companyId: job.company_id } })
            : await callTracking(this.broker, "tracking.exportStatement", {
                companyId: job.company_id,
                type: job.type,
                filters: job.filters as MessageExportIn,
              });
        return answer.sql;
      };
      this.runner = new ExportRunner(config, sequelize, db.url, this.broker.nodeID, this.logger, metrics, statementOf);
    },

    async started(this: ExportsThis) {
      await this.runner.start();
    },

    async stopped(this: ExportsThis) {
      await this.runner.stop();
    },
  };
}
