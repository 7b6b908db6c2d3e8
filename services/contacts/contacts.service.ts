/**
 * contacts: contacts, custom fields, contact lists, memberships, imports and opt-outs of an account
 * (spec parts 2 and 4, contract sections 4 and 7). Everything is filtered by the caller's account, so another
 * account's ids are simply not found. Imports are parsed on this node's piscina pool.
 */
import type { Context, ServiceSchema } from "moleculer";
import { heavyGateOf } from "../../lib/db/heavy";
import type { ApiServiceSettings } from "../../lib/http/api";
import type { Deps } from "../../lib/deps";
import { contactActions, contactMethods, type ContactsThis } from "./contacts.actions";
import { importActions, type ImportsThis } from "./contacts.imports";
import { listActions } from "./contacts.lists";
import { optOutActions } from "./contacts.optouts";
import { Importer } from "./contacts.runner";
import type { ChannelSupportEvent } from "../tracking/tracking.contract";
import { applyChannelSupport } from "./contacts.support";

export function createContactsService(deps: Deps): ServiceSchema<ApiServiceSettings> {
  return {
    name: "contacts",
    settings: { rest: "/" },
    actions: { ...contactActions, ...optOutActions, ...listActions, ...importActions },
    events: {
      /**
       * RCS or WhatsApp receipts showed numbers reachable (DELIVERED) or not (DISABLED, UNSUPPORTED):
       * the contacts with those numbers gain or lose the channel in communicationSupported.
       */
      async "tracking.channelSupportChanged"(ctx: Context<ChannelSupportEvent>) {
        await applyChannelSupport(deps.db.sequelize, ctx.params.changes);
      },
    },
    methods: contactMethods,
    created() {
      // The action groups (contacts.actions.ts, contacts.optouts.ts, contacts.lists.ts, contacts.imports.ts) reach the database as this.sequelize.
      (this as unknown as ImportsThis).sequelize = deps.db.sequelize;
      (this as unknown as ContactsThis).heavyOpsPerAccount = deps.config.heavyOpsPerAccount;
      (this as unknown as ContactsThis).heavyGate = heavyGateOf(deps.db, deps.config);
      (this as unknown as ImportsThis).importer = new Importer(deps.db.sequelize, deps.config, this.logger);
    },
    async started() {
      await (this as unknown as ImportsThis).importer.start();
    },
    async stopped() {
      await (this as unknown as ImportsThis).importer.stop();
    },
  };
}
