/**
 * The exports service's rows (export_jobs) and their wire form.
 */
import { iso } from "../../lib/messaging/time";
import type { ExportOut, ExportStatus, ExportType } from "./exports.schemas";

export interface JobRow {
  id: string;
  company_id: string;
  type: ExportType;
  status: ExportStatus;
  run: number;
  node_id: string | null;
  file_name: string | null;
  row_count: string | null;
  error: string | null;
  created_at: Date;
  completed_at: Date | null;
  expires_at: Date | null;
}

export const JOB_COLUMNS = "id, company_id, type, status, run, node_id, file_name, row_count, error, created_at, completed_at, expires_at";

/** Available: COMPLETED and not past its expiry (the sweeper may not have run yet). */
export const available = (r: JobRow) => r.status === "COMPLETED" && r.expires_at !== null && new Date(r.expires_at).getTime() > Date.now();

export function toExportOut(r: JobRow): ExportOut {
  const ok = available(r);
  return {
    exportId: r.id,
    type: r.type,
    status: r.status === "COMPLETED" && !ok ? "EXPIRED" : r.status,
    isAvailableForDownload: ok,
    rowCount: r.row_count === null ? null : Number(r.row_count),
    createdAt: iso(r.created_at)!,
    completedAt: iso(r.completed_at),
    expiresAt: iso(r.expires_at),
    error: r.error,
  };
}
