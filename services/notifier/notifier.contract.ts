/**
 * What other services need of the notifier (migration 0031). The notifier follows the webhook-event
 * feeds of tracking (`message_webhook_events`) and of the inbox (`inbound_webhook_events`): each owner
 * appends {@link WebhookEvent} rows to a table of its own in the transaction of the change, only for
 * the accounts of the view {@link WEBHOOK_ACCOUNTS_VIEW}, and broadcasts OUTBOX_WRITTEN after the commit
 * (the inbox's INBOX_EVENTS_WRITTEN does it for the inbox), so a notifier follows at once instead of at
 * its next poll (NOTIFIER_POLL_MS, the safety net: a lost broadcast only delays). The notifier copies
 * the events into its own schedule (`outbox_events`, which it alone writes) with its cursor, in one
 * transaction. An owner drops a day of its feed only once {@link FEED_POSITIONS_VIEW} shows the whole
 * day read (`dayReadBy`, lib/db/feeds.ts).
 * And for the admin command (`npm run admin -- secrets:rotate`): re-sealing the webhooks' signing
 * secrets under SECRETS_KEY, straight against the database, with the service running or not.
 */
import type { Sequelize } from "sequelize";
import type { Config } from "../../lib/config";
import type { Channel } from "../../lib/messaging/channels";
import { secretBox } from "../../lib/security/secrets";
import { rotateWebhookSecrets, type WebhookRotateOptions, type WebhookRotateResult } from "./notifier.rotate";

export type { WebhookRotateOptions, WebhookRotateResult };

export const OUTBOX_WRITTEN = "notifier.outboxWritten";

/** The accounts that have a webhook (a read-only view the notifier publishes, migration 0022): events of other accounts are not written. */
export const WEBHOOK_ACCOUNTS_VIEW = "webhook_accounts";

/** How far the notifier has followed each feed: `feed` (the view's name), `tx`, `id` (a read-only view, migration 0031). */
export const FEED_POSITIONS_VIEW = "webhook_feed_positions";

/**
 * A webhook event as a feed the notifier follows holds it (spec part 6's payload in `payload`).
 * RETRACT (tracking's feed only) takes back the DELIVERY and READ events of its message written since
 * `message_sent_at` (a simulated message whose receipt came before its registration): those not sent
 * yet are never sent.
 */
export interface WebhookEvent {
  company_id: string;
  channel: Channel;
  event_type: "DELIVERY" | "READ" | "INBOUND" | "RETRACT";
  message_id: string;
  num_part: number | null;
  payload: Record<string, unknown> | null;
  message_sent_at: string | null;
}

/** Fields without a value are omitted (spec part 6). */
export function withoutEmpty(payload: Record<string, unknown>): Record<string, unknown> {
  for (const k of Object.keys(payload)) if (payload[k] === undefined || payload[k] === null) delete payload[k];
  return payload;
}

/**
 * Re-encrypts every webhook signing secret (current and replaced) not already under SECRETS_KEY
 * (reading with SECRETS_KEY or SECRETS_KEY_PREVIOUS), in bounded batches under row locks. Never
 * creates a key (see rotationKeyProblem of lib/security/secrets.ts).
 */
export function rotateSigningSecrets(
  sequelize: Sequelize,
  config: Pick<Config, "secretsKey" | "secretsKeyPrevious" | "dataDir">,
  batchSize?: number,
  opts: Omit<WebhookRotateOptions, "batchSize"> = {},
): Promise<WebhookRotateResult> {
  return rotateWebhookSecrets(sequelize, secretBox(config, { create: false }), { ...opts, batchSize });
}
