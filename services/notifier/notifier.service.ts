/**
 * notifier: the account's delivery-status webhook (spec parts 2, 4 and 6; contract section 4).
 * Registration validates the callback URL by the rules of spec part 6 (notifier.url.ts).
 * Delivery from the outbox comes next (issue 6, items 2-5).
 */
import type { Context, ServiceSchema } from "moleculer";
import { QueryTypes } from "sequelize";
import { apiAction, type ApiServiceSettings, type AuthMeta } from "../../lib/api";
import type { Deps } from "../../lib/deps";
import { ApiError, badRequest } from "../../lib/errors";
import { DbMixin } from "../../mixins/db.mixin";
import { webhookIn, webhookOut, type WebhookIn, type WebhookOut } from "./notifier.schemas";
import { CallbackUrlError, validateCallbackUrl } from "./notifier.url";

interface WebhookRow {
  company_id: string;
  callback_url: string;
  created_at: Date;
  updated_at: Date;
}

const toWebhookOut = (r: WebhookRow): WebhookOut => ({
  companyId: r.company_id,
  callbackUrl: r.callback_url,
  createdAt: new Date(r.created_at).toISOString(),
  updatedAt: new Date(r.updated_at).toISOString(),
});

const notConfigured = () => new ApiError("WEBHOOK_NOT_FOUND", "No delivery-status webhook is configured for this account.");

export function createNotifierService(deps: Deps): ServiceSchema<ApiServiceSettings> {
  const { config, db } = deps;
  const sequelize = db.sequelize;
  const one = async (sql: string, bind: unknown[]) => (await sequelize.query<WebhookRow>(sql, { bind, type: QueryTypes.SELECT }))[0] ?? null;

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
    mixins: [DbMixin(deps)],
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
          const row = await one(`SELECT * FROM webhooks WHERE company_id = $1`, [ctx.meta.companyId]);
          if (!row) throw notConfigured();
          return toWebhookOut(row);
        },
      }),

      /** Registers the account's webhook; 409 (the existing one unchanged) when there is one. */
      createWebhook: apiAction({
        rest: "POST /webhooks/delivery-status",
        operation: "WEBHOOKS",
        summary: "Register the delivery-status webhook",
        description: "One webhook per account. The URL must use https on port 443 or 8443, carry no credentials and no fragment, and its host must resolve only to publicly reachable addresses.",
        tag: "webhooks",
        params: webhookIn,
        responses: { 201: webhookOut },
        errors: [400, 409],
        async handler(ctx: Context<WebhookIn, AuthMeta & { $statusCode?: number }>): Promise<WebhookOut> {
          const url = await checked(ctx.params.callbackUrl);
          const row = await one(`INSERT INTO webhooks (company_id, callback_url) VALUES ($1, $2) ON CONFLICT (company_id) DO NOTHING RETURNING *`, [ctx.meta.companyId, url]);
          if (!row) throw new ApiError("WEBHOOK_EXISTS", "A delivery-status webhook is already configured; change it with PUT or remove it with DELETE.");
          ctx.meta.$statusCode = 201;
          return toWebhookOut(row);
        },
      }),

      /** Replaces the callback URL of the account's webhook. */
      updateWebhook: apiAction({
        rest: "PUT /webhooks/delivery-status",
        operation: "WEBHOOKS",
        summary: "Change the delivery-status webhook's URL",
        tag: "webhooks",
        params: webhookIn,
        responses: { 200: webhookOut },
        errors: [400, 404],
        async handler(ctx: Context<WebhookIn, AuthMeta>): Promise<WebhookOut> {
          const url = await checked(ctx.params.callbackUrl);
          const row = await one(`UPDATE webhooks SET callback_url = $2, updated_at = now() WHERE company_id = $1 RETURNING *`, [ctx.meta.companyId, url]);
          if (!row) throw notConfigured();
          return toWebhookOut(row);
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
          const row = await one(`DELETE FROM webhooks WHERE company_id = $1 RETURNING *`, [ctx.meta.companyId]);
          if (!row) throw notConfigured();
          ctx.meta.$statusCode = 204;
        },
      }),
    },
  };
}
