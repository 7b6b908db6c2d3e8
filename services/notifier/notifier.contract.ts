/**
 * What other services need of the notifier: the event that wakes it. A service that commits
 * outbox_events rows broadcasts OUTBOX_WRITTEN after the commit, so notifiers claim them at once
 * instead of at their next poll (NOTIFIER_POLL_MS, the safety net: a lost broadcast only delays).
 * And for the admin command (`npm run admin -- secrets:rotate`): re-sealing the webhooks' signing
 * secrets under SECRETS_KEY, straight against the database, with the service running or not.
 */
import type { Sequelize } from "sequelize";
import type { Config } from "../../lib/config";
import { secretBox } from "../../lib/security/secrets";
import { rotateWebhookSecrets, type WebhookRotateOptions, type WebhookRotateResult } from "./notifier.rotate";

export type { WebhookRotateOptions, WebhookRotateResult };

export const OUTBOX_WRITTEN = "notifier.outboxWritten";

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
