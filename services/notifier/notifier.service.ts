/**
 * notifier: the account's delivery-status webhook (spec parts 2, 4 and 6; contract section 4).
 * Registration validates the callback URL by the rules of spec part 6 (notifier.url.ts); every
 * replica delivers events from the outbox (notifier.delivery.ts) through the pinned-address client
 * (notifier.client.ts), and partners read the attempts log. The outbox is the notifier's own
 * schedule: it follows tracking's and the inbox's webhook-event feeds into it (notifier.feed.ts). A webhook may sign its deliveries
 * (contract section 8, notifier.signing.ts): its secret is shown once, sealed at rest, rotated with
 * an overlap (WEBHOOK_SECRET_OVERLAP_MS).
 */
import type { Context, Service, ServiceSchema } from "moleculer";
import { API_PREFIX, apiAction, type ApiServiceSettings, type AuthMeta } from "../../lib/http/api";
import type { Deps } from "../../lib/deps";
import { ApiError, badRequest } from "../../lib/errors";
import { addNodeRegistry } from "../../lib/observability/http-metrics";
import { seconds, type OpsTable } from "../../lib/observability/ops";
import type { Page } from "../../lib/http/paging";
import { INBOX_EVENTS_WRITTEN } from "../inbox/inbox.contract";
import { CallbackClient } from "./notifier.client";
import { FEED_POSITIONS_VIEW, OUTBOX_WRITTEN } from "./notifier.contract";
import { Deliverer } from "./notifier.delivery";
import { feedFollower, WEBHOOK_FEEDS } from "./notifier.feed";
import type { FeedLoop } from "../../lib/jobs/follow";
import { NotifierMetrics } from "./notifier.metrics";
import { toWebhookOut } from "./notifier.models";
import {
  ATTEMPTS_KEPT_DAYS,
  attemptsPage,
  deleteWebhook,
  findWebhook,
  insertWebhook,
  outboxByChannel,
  rotateSigningSecret,
  updateWebhook,
} from "./notifier.queries";
import {
  attemptPage,
  attemptsIn,
  housekeepIn,
  rotateSecretIn,
  webhookIn,
  webhookOut,
  type AttemptOut,
  type AttemptsIn,
  type WebhookIn,
  type WebhookOut,
} from "./notifier.schemas";
import { newSigningSecret, Signer } from "./notifier.signing";
import { CallbackUrlError, validateCallbackUrl } from "./notifier.url";
import { ensureDays } from "../../lib/db/partitions";
import { trackFeedLag } from "../../lib/observability/feed-metrics";

interface NotifierVars {
  deliverer: Deliverer;
  follower: FeedLoop;
  client: CallbackClient;
  signer: Signer;
}
type NotifierThis = Service<ApiServiceSettings> & NotifierVars;

const notConfigured = () => new ApiError("WEBHOOK_NOT_FOUND", "No delivery-status webhook is configured for this account.");

export function createNotifierService(deps: Deps): ServiceSchema<ApiServiceSettings, Record<string, never>, NotifierVars> {
  const { config, db } = deps;
  const sequelize = db.sequelize;

  /** The URL rules of spec part 6; a failure is a 400 naming callbackUrl. */
  async function checked(url: string): Promise<string> {
    try {
      await validateCallbackUrl(url, config.webhookAllowPrivateTargets);
      return url;
    } catch (err) {
      if (!(err instanceof CallbackUrlError)) throw err;
      throw badRequest(`The callback URL is refused (${err.message}).`, [{ path: "callbackUrl", message: err.message }]);
    }
  }

  return {
    name: "notifier",
    settings: { rest: "/" },

    actions: {
      /** The account's webhook. */
      getWebhook: apiAction({
        rest: "GET /webhooks/delivery-status",
        operation: "WEBHOOKS",
        summary: "The delivery-status webhook",
        tag: "webhooks",
        responses: { 200: webhookOut },
        errors: [404],
        async handler(ctx: Context<unknown, AuthMeta>): Promise<WebhookOut> {
          const row = await findWebhook(sequelize, ctx.meta.companyId);
          if (!row) throw notConfigured();
          return toWebhookOut(row);
        },
      }),

      /** Registers the account's webhook; 409 (the existing one unchanged) when there is one. */
      createWebhook: apiAction({
        rest: "POST /webhooks/delivery-status",
        operation: "WEBHOOKS",
        summary: "Register the delivery-status webhook",
        description:
          "One webhook per account. The URL must use https on port 443 or 8443, carry no credentials and no fragment, and its host must resolve only to publicly reachable addresses. With `signed: true` deliveries carry Standard Webhooks signatures and the answer carries `signingSecret`, shown only this once.",
        tag: "webhooks",
        params: webhookIn,
        responses: { 201: webhookOut },
        errors: [400, 409],
        async handler(this: NotifierThis, ctx: Context<WebhookIn, AuthMeta & { $statusCode?: number; $location?: string }>): Promise<WebhookOut> {
          const { companyId } = ctx.meta;
          const url = await checked(ctx.params.callbackUrl);
          const secret = ctx.params.signed === true ? newSigningSecret() : null;
          const row = await insertWebhook(sequelize, companyId, url, secret ? this.signer.seal(companyId, secret) : null);
          if (!row) throw new ApiError("WEBHOOK_EXISTS", "A delivery-status webhook is already configured; change it with PUT or remove it with DELETE.");
          ctx.meta.$statusCode = 201;
          ctx.meta.$location = `${API_PREFIX}/webhooks/delivery-status`;
          return toWebhookOut(row, secret ?? undefined);
        },
      }),

      /** Replaces the account's webhook: its callback URL, and whether it signs (a secret made when it starts, dropped when it stops). */
      updateWebhook: apiAction({
        rest: "PUT /webhooks/delivery-status",
        operation: "WEBHOOKS",
        summary: "Change the delivery-status webhook",
        description:
          "Replaces the webhook's URL and `signed`. `signed: true` on a webhook that did not sign makes a secret and answers it as `signingSecret` (shown only this once); on one that signs already it keeps the secret (no `signingSecret` in the answer). `signed: false`, or no `signed`, stops signing and discards the secrets.",
        tag: "webhooks",
        params: webhookIn,
        responses: { 200: webhookOut },
        errors: [400, 404],
        async handler(this: NotifierThis, ctx: Context<WebhookIn, AuthMeta>): Promise<WebhookOut> {
          const { companyId } = ctx.meta;
          const url = await checked(ctx.params.callbackUrl);
          let secret: string | null = null;
          const seal = () => this.signer.seal(companyId, (secret = newSigningSecret()));
          const res = await updateWebhook(sequelize, companyId, url, ctx.params.signed === true ? seal : null);
          if (!res) throw notConfigured();
          return toWebhookOut(res.row, res.fresh && secret ? secret : undefined);
        },
      }),

      /** Rotates the signing secret: answers the new one; the one it replaces still signs for WEBHOOK_SECRET_OVERLAP_MS. */
      rotateSigningSecret: apiAction({
        rest: "POST /webhooks/delivery-status/secret",
        operation: "WEBHOOKS",
        summary: "Rotate the webhook's signing secret",
        description:
          "Makes a new signing secret and answers it as `signingSecret` (shown only this once). For 24 h deliveries carry two signatures, with the new and with the replaced secret, so receivers can switch at their pace; then only the new one. Rotating again within that time drops the older secret at once. 404 when the account has no webhook, 409 when its webhook does not sign (turn signing on with `PUT` and `signed: true`).",
        tag: "webhooks",
        params: rotateSecretIn,
        responses: { 200: webhookOut },
        errors: [404, 409],
        async handler(this: NotifierThis, ctx: Context<unknown, AuthMeta>): Promise<WebhookOut> {
          const { companyId } = ctx.meta;
          const secret = newSigningSecret();
          const row = await rotateSigningSecret(sequelize, companyId, this.signer.seal(companyId, secret), config.webhookSecretOverlapMs);
          if (row) return toWebhookOut(row, secret);
          if (!(await findWebhook(sequelize, companyId))) throw notConfigured();
          throw new ApiError("WEBHOOK_NOT_SIGNED", "The delivery-status webhook does not sign its deliveries; turn signing on with PUT and signed: true.");
        },
      }),

      /** Removes the account's webhook. */
      deleteWebhook: apiAction({
        rest: "DELETE /webhooks/delivery-status",
        operation: "WEBHOOKS",
        summary: "Remove the delivery-status webhook",
        tag: "webhooks",
        responses: { 204: null },
        errors: [404],
        async handler(ctx: Context<unknown, AuthMeta & { $statusCode?: number }>): Promise<void> {
          const row = await deleteWebhook(sequelize, ctx.meta.companyId);
          if (!row) throw notConfigured();
          ctx.meta.$statusCode = 204;
        },
      }),

      /** The account's webhook attempts of the last 7 days, newest first. */
      listAttempts: apiAction({
        rest: "GET /webhooks/delivery-status/attempts",
        operation: "WEBHOOKS",
        summary: "Webhook delivery attempts",
        description: `Every attempt to deliver an event to the account's callback URL in the last ${ATTEMPTS_KEPT_DAYS} days, newest first: what your endpoint answered (or why there was no answer) and what happens next.`,
        tag: "webhooks",
        params: attemptsIn,
        responses: { 200: attemptPage },
        async handler(ctx: Context<AttemptsIn, AuthMeta>): Promise<Page<AttemptOut>> {
          return attemptsPage(sequelize, ctx.meta.companyId, ctx.params);
        },
      }),

      /** The REPL's `outbox`: per channel, events waiting, claimed by a notifier now, and how long the oldest due one has waited. */
      opsOutbox: {
        visibility: "public",
        async handler(): Promise<OpsTable> {
          const rows = await outboxByChannel(sequelize);
          return {
            columns: ["channel", "depth", "claimed", "oldest due"],
            rows: rows.map((r) => [r.channel, r.depth, r.claimed, seconds(r.oldest)]),
          };
        },
      },

      /** Housekeeping now (the REPL; it also runs every minute): the attempts log's days (ahead; past 7 days dropped), events of accounts whose webhook was deleted. */
      housekeep: {
        visibility: "public",
        params: housekeepIn,
        async handler(this: NotifierThis) {
          return this.deliverer.housekeeping();
        },
      },
    },

    events: {
      /** Tracking committed webhook events to its feed (receipts and reads): follow it now. */
      [OUTBOX_WRITTEN](this: NotifierThis) {
        this.follower.wake();
      },
      /** The inbox committed (inbound messages write their INBOUND events to its feed with them). */
      [INBOX_EVENTS_WRITTEN](this: NotifierThis) {
        this.follower.wake();
      },
    },

    created(this: NotifierThis) {
      const metrics = new NotifierMetrics(sequelize);
      this.signer = new Signer({ config, sequelize, logger: this.logger });
      addNodeRegistry(this.broker, metrics.registry);
      trackFeedLag(
        this.broker,
        sequelize,
        "notifier",
        WEBHOOK_FEEDS.map((feed) => ({ feed, positions: FEED_POSITIONS_VIEW })),
      );
      this.client = new CallbackClient({
        allowPrivate: config.webhookAllowPrivateTargets,
        extraCaFile: config.extraCaCerts,
        connections: config.notifierEndpointConcurrency,
      });
      this.deliverer = new Deliverer({ config, sequelize, client: this.client, signer: this.signer, metrics, logger: this.logger });
      this.follower = feedFollower({ sequelize, logger: this.logger, onCopied: () => this.deliverer.wake() });
    },

    async started(this: NotifierThis) {
      // Today's partition of the attempts log before the first attempt (migration 0025; then from the housekeeping).
      await ensureDays(sequelize, "webhook_attempts").catch((err: unknown) =>
        this.logger.warn({ err }, "could not make the days of the attempts log now; tried again by the housekeeping"),
      );
      this.deliverer.start();
      this.follower.start(config.notifierPollMs);
    },

    async stopped(this: NotifierThis) {
      await this.follower.close();
      await this.deliverer.stop();
      await this.client.close();
    },
  };
}
