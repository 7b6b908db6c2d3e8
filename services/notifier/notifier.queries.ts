/** The notifier service's SQL: the account's webhook and its attempts log (delivery's own SQL is in notifier.delivery.ts). */
import { QueryTypes, type Sequelize } from "sequelize";
import { queryPage, type Page } from "../../lib/paging";
import { ATTEMPTS_KEPT_DAYS } from "./notifier.delivery";
import { ATTEMPT_COLUMNS, toAttemptOut, type AttemptRow, type WebhookRow } from "./notifier.models";
import type { AttemptOut, AttemptsIn } from "./notifier.schemas";

async function one(sequelize: Sequelize, sql: string, bind: unknown[]): Promise<WebhookRow | null> {
  return (await sequelize.query<WebhookRow>(sql, { bind, type: QueryTypes.SELECT }))[0] ?? null;
}

export const findWebhook = (sequelize: Sequelize, companyId: string) => one(sequelize, `SELECT * FROM webhooks WHERE company_id = $1`, [companyId]);

/** The new webhook, or null when the account has one already (left unchanged). */
export const insertWebhook = (sequelize: Sequelize, companyId: string, url: string) =>
  one(sequelize, `INSERT INTO webhooks (company_id, callback_url) VALUES ($1, $2) ON CONFLICT (company_id) DO NOTHING RETURNING *`, [companyId, url]);

/** The changed webhook, or null when the account has none. */
export const updateWebhook = (sequelize: Sequelize, companyId: string, url: string) =>
  one(sequelize, `UPDATE webhooks SET callback_url = $2, updated_at = now() WHERE company_id = $1 RETURNING *`, [companyId, url]);

/** The removed webhook, or null when the account had none. */
export const deleteWebhook = (sequelize: Sequelize, companyId: string) => one(sequelize, `DELETE FROM webhooks WHERE company_id = $1 RETURNING *`, [companyId]);

/** A page of the account's attempts of the last ATTEMPTS_KEPT_DAYS days, newest first. */
export function attemptsPage(sequelize: Sequelize, companyId: string, { page, limit, messageId, outcome }: AttemptsIn): Promise<Page<AttemptOut>> {
  const where = `company_id = :companyId AND attempted_at >= now() - interval '${ATTEMPTS_KEPT_DAYS} days'${messageId ? " AND message_id = :messageId" : ""}${outcome ? " AND outcome = :outcome" : ""}`;
  return queryPage<AttemptRow, AttemptOut>(sequelize, {
    select: `SELECT ${ATTEMPT_COLUMNS}
               FROM webhook_attempts WHERE ${where} ORDER BY attempted_at DESC, id DESC LIMIT :limit OFFSET :offset`,
    count: `SELECT count(*) AS total FROM webhook_attempts WHERE ${where}`,
    replacements: { companyId, messageId: messageId ?? null, outcome: outcome ?? null },
    page,
    limit,
    map: toAttemptOut,
  });
}
