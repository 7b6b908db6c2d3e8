/**
 * contacts: contacts, custom fields, contact lists, memberships, imports and opt-outs of an account
 * (spec parts 2 and 4, contract sections 4 and 7). Everything is filtered by the caller's account, so another
 * account's ids are simply not found. Imports are parsed on this node's piscina pool.
 */
import type { ServiceSchema } from "moleculer";
import { heavyGateOf } from "../../lib/db/heavy";
import type { ApiServiceSettings } from "../../lib/http/api";
import type { Deps } from "../../lib/deps";
import { contactActions, contactMethods, type ContactsThis } from "./contacts.actions";
import { importActions, type ImportsThis } from "./contacts.imports";
import { listActions } from "./contacts.lists";
import { optOutActions } from "./contacts.optouts";
import { Importer } from "./contacts.runner";
import { FeedLoop } from "../../lib/jobs/follow";
import { STATUS_FEED_VIEW, STATUS_FEED_WRITTEN } from "../tracking/tracking.contract";
import { CONTACTS_FEED_POSITIONS_VIEW } from "./contacts.contract";
import { trackFeedLag } from "../../lib/observability/feed-metrics";
import { followChannelSupport, SUPPORT_FEED_BATCH, SUPPORT_FEED_POLL_MS } from "./contacts.support";

/** The service's follower of tracking's status feed (contacts.support.ts). */
interface SupportThis {
  supportFeed?: FeedLoop;
}

export function createContactsService(deps: Deps): ServiceSchema<ApiServiceSettings> {
  return {
    name: "contacts",
    settings: { rest: "/" },
    actions: { ...contactActions, ...optOutActions, ...listActions, ...importActions },
    events: {
      /**
       * Tracking committed status changes, among them RCS or WhatsApp receipts that showed numbers
       * reachable (DELIVERED) or not (DISABLED, UNSUPPORTED): follow its status feed now, and the
       * contacts with those numbers gain or lose the channel (contacts.support.ts).
       */
      [STATUS_FEED_WRITTEN](this: SupportThis) {
        this.supportFeed?.wake();
      },
    },
    methods: contactMethods,
    created() {
      // The action groups (contacts.actions.ts, contacts.optouts.ts, contacts.lists.ts, contacts.imports.ts) reach the database as this.sequelize.
      (this as unknown as ImportsThis).sequelize = deps.db.sequelize;
      (this as unknown as ContactsThis).heavyOpsPerAccount = deps.config.heavyOpsPerAccount;
      (this as unknown as ContactsThis).heavyGate = heavyGateOf(deps.db, deps.config);
      (this as unknown as ImportsThis).importer = new Importer(deps.db.sequelize, deps.config, this.logger);
      trackFeedLag(this.broker, deps.db.sequelize, "contacts", [{ feed: STATUS_FEED_VIEW, positions: CONTACTS_FEED_POSITIONS_VIEW }]);
    },
    async started() {
      await (this as unknown as ImportsThis).importer.start();
      const self = this as unknown as SupportThis;
      // The followers' loop (lib/jobs/follow.ts): wakes, the poll, again at once after a full batch.
      self.supportFeed = new FeedLoop("tracking's status feed (channels)", this.logger, async () => {
        const round = await followChannelSupport(deps.db.sequelize);
        return { waiting: round.busy || round.held, more: round.read === SUPPORT_FEED_BATCH, progress: round.read > 0 };
      });
      self.supportFeed.start(SUPPORT_FEED_POLL_MS);
    },
    async stopped() {
      await (this as unknown as SupportThis).supportFeed?.close();
      await (this as unknown as ImportsThis).importer.stop();
    },
  };
}
