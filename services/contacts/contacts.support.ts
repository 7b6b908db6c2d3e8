/**
 * communicationSupported from delivery receipts (contract section 4): a number gains RCS or
 * WhatsApp once a message on that channel was DELIVERED to it, and loses it after an UNSUPPORTED or
 * DISABLED receipt. Applied in one statement per channel, the last word per number winning (the
 * statement is in contacts.channels.queries.ts).
 */
import type { Sequelize } from "sequelize";
import type { ChannelSupportEvent } from "../tracking/tracking.contract";
import { applyChannelSupportChanges } from "./contacts.channels.queries";

export async function applyChannelSupport(sequelize: Sequelize, changes: ChannelSupportEvent["changes"]): Promise<void> {
  // The last word per (account, channel, number) wins, as it came last.
  const last = new Map<string, ChannelSupportEvent["changes"][number]>();
  for (const c of changes) last.set(`${c.companyId}\u0000${c.channel}\u0000${c.destination}`, c);
  // One statement per channel: within one, a contact (one number) meets at most one change.
  for (const channel of ["RCS", "WHATSAPP"] as const) {
    const changes = [...last.values()].filter((c) => c.channel === channel);
    if (changes.length === 0) continue;
    await applyChannelSupportChanges(sequelize, changes);
  }
}
