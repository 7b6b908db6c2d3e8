/** The notifier's rows as the service reads them (webhooks, webhook_attempts) and their mappers. */
import type { AttemptOut, WebhookOut } from "./notifier.schemas";

/** The columns of webhooks a partner reads: never a sealed secret, only whether there is one. */
export const WEBHOOK_COLUMNS = "company_id, callback_url, created_at, updated_at, signing_secret IS NOT NULL AS signed";

export interface WebhookRow {
  company_id: string;
  callback_url: string;
  created_at: Date;
  updated_at: Date;
  signed: boolean;
}

/** The webhook; `signingSecret` only in the answer that made the secret (never read back). */
export const toWebhookOut = (r: WebhookRow, signingSecret?: string): WebhookOut => ({
  companyId: r.company_id,
  callbackUrl: r.callback_url,
  signed: r.signed,
  ...(signingSecret ? { signingSecret } : {}),
  createdAt: new Date(r.created_at).toISOString(),
  updatedAt: new Date(r.updated_at).toISOString(),
});

/** A webhook's sealed signing secrets (migrations/20261128-0020-webhook-signing), as a notifier opens them. */
export interface SigningKeysRow {
  signing_version: number;
  signing_key_id: string | null;
  signing_secret: Buffer | null;
  previous_signing_key_id: string | null;
  previous_signing_secret: Buffer | null;
  /** previous_signing_until, epoch ms. */
  previous_until: number | null;
}

/** A webhook's sealed secrets as SECRETS_KEY rotation reads them (notifier.rotate.ts). */
export interface SealedSecretsRow {
  company_id: string;
  signing_key_id: string | null;
  signing_secret: Buffer | null;
  previous_signing_key_id: string | null;
  previous_signing_secret: Buffer | null;
}

/** The two places a webhook keeps a sealed secret, the current one and the one a rotation replaced: its key id column and its secret column. */
export const SECRET_SLOTS = [
  { keyId: "signing_key_id", secret: "signing_secret" },
  { keyId: "previous_signing_key_id", secret: "previous_signing_secret" },
] as const;
export type SecretSlot = (typeof SECRET_SLOTS)[number];

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
