/**
 * The retry policy of callback delivery (contract "Event delivery"): attempt n failed -> the next
 * is due base * 2^(n-1) plus 0-20 % jitter later, at most 5 attempts, none more than 10 days after
 * the message was sent; and the shapes of a claimed event and of an attempt's outcome row.
 */
import type { Outcome } from "./notifier.metrics";
import type { SignedEvent } from "./notifier.signing";

export const MAX_ATTEMPTS = 5;
export const RETRY_WINDOW_MS = 10 * 24 * 3600 * 1000;
const JITTER = 0.2;
export interface ClaimedEvent extends SignedEvent {
  id: string;
  company_id: string;
  channel: string;
  /** The event JSON as stored (fields without a value already omitted). */
  payload: string;
  attempts: number;
  /** When the message was sent (the event's creation when unknown), epoch ms. */
  sent_at_ms: number;
  created_at_ms: number;
  callback_url: string;
}

export interface OutcomeRow {
  id: string;
  /** The event's account (with `id`, the schedule's key). */
  c: string;
  token: string;
  n: number;
  at: string;
  hs: number | null;
  ms: number | null;
  err: string | null;
  /** RETRYING: ms after the outcome is written (the database's clock) that the next attempt is due. */
  delay: number | null;
  outcome: Outcome;
}

/** When attempt `n` (1-based) failed at `failedAt`, the next is due at this time (contract: base * 2^(n-1), plus 0-20 % jitter). */
export function nextAttemptAt(n: number, failedAt: number, baseMs: number, random = Math.random): number {
  return failedAt + baseMs * 2 ** (n - 1) * (1 + JITTER * random());
}

/** What a failed attempt `n` leads to: another attempt at `next`, or none. */
export function afterFailure(n: number, failedAt: number, sentAt: number, baseMs: number, random = Math.random): { outcome: Outcome; next: number | null } {
  if (n >= MAX_ATTEMPTS) return { outcome: "FAILED", next: null };
  const next = nextAttemptAt(n, failedAt, baseMs, random);
  if (next - sentAt > RETRY_WINDOW_MS) return { outcome: "EXPIRED", next: null };
  return { outcome: "RETRYING", next };
}

/** An account's endpoint on this replica: attempts running, and claimed events waiting for a slot. */
export interface Endpoint {
  active: number;
  queue: { ev: ClaimedEvent; token: string; claimedAt: number }[];
}

/** An account endpoint's recent pace: attempts ended since `since` (performance.now()), smoothed attempts a second. */
export interface Pace {
  ended: number;
  since: number;
  pace: number;
}
