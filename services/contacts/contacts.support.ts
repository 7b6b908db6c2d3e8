/**
 * communicationSupported from delivery receipts (contract section 4): a number gains RCS or
 * WhatsApp once a message on that channel was DELIVERED to it, and loses it after an UNSUPPORTED or
 * DISABLED receipt. Applied in one statement per event, in the order the receipts came.
 */
import type { Sequelize } from "sequelize";
import type { ChannelSupportEvent } from "../tracking/tracking.contract";

export async function applyChannelSupport(sequelize: Sequelize, changes: ChannelSupportEvent["changes"]): Promise<void> {
  // The last word per (account, channel, number) wins, as it came last.
  const last = new Map<string, ChannelSupportEvent["changes"][number]>();
  for (const c of changes) last.set(`${c.companyId}\u0000${c.channel}\u0000${c.destination}`, c);
  // One statement per channel: within one, a contact (one number) meets at most one change.
  for (const channel of ["RCS", "WHATSAPP"] as const) {
    const changes = [...last.values()].filter((c) => c.channel === channel);
    if (changes.length === 0) continue;
    await sequelize.query(
      `UPDATE contacts AS c
          SET communication_supported = CASE
                WHEN x.supported THEN array_append(c.communication_supported, x.channel)
                ELSE array_remove(c.communication_supported, x.channel) END,
              updated_at = now()
         FROM jsonb_to_recordset($1::jsonb) AS x("companyId" text, channel text, destination text, supported boolean)
        WHERE c.company_id = x."companyId" AND c.phone_number = x.destination
          AND (x.channel = ANY (c.communication_supported)) IS DISTINCT FROM x.supported`,
      { bind: [JSON.stringify(changes)] },
    );
  }
}
