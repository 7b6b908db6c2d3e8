/** The notifier's rows as the service reads them (webhooks, webhook_attempts) and their mappers. */
import type { AttemptOut, WebhookOut } from "./notifier.schemas";

export interface WebhookRow {
  company_id: string;
  callback_url: string;
  created_at: Date;
  updated_at: Date;
}

export const toWebhookOut = (r: WebhookRow): WebhookOut => ({
  companyId: r.company_id,
  callbackUrl: r.callback_url,
  createdAt: new Date(r.created_at).toISOString(),
  updatedAt: new Date(r.updated_at).toISOString(),
});

/** The columns of webhook_attempts a partner reads. */
export const ATTEMPT_COLUMNS = "event_type, channel, message_id, num_part, attempt, attempted_at, http_status, duration_ms, error, next_attempt_at, outcome";

export interface AttemptRow {
  event_type: AttemptOut["eventType"];
  channel: AttemptOut["channel"];
  message_id: string;
  num_part: number | null;
  attempt: number;
  attempted_at: Date;
  http_status: number | null;
  duration_ms: number | null;
  error: string | null;
  next_attempt_at: Date | null;
  outcome: AttemptOut["outcome"];
}

export const toAttemptOut = (r: AttemptRow): AttemptOut => ({
  eventType: r.event_type,
  channel: r.channel,
  messageId: r.message_id,
  numPart: r.num_part,
  attempt: r.attempt,
  attemptedAt: new Date(r.attempted_at).toISOString(),
  httpStatus: r.http_status,
  durationMs: r.duration_ms,
  error: r.error,
  nextAttemptAt: r.next_attempt_at ? new Date(r.next_attempt_at).toISOString() : null,
  outcome: r.outcome,
});
