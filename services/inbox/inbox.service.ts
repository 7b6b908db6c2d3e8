/**
 * inbox: two-way conversations on RCS and WhatsApp (contract section 4 "Conversation"): inbound
 * messages from end users, replies through the upstream adapter, archive and unarchive, and the live
 * view (Server-Sent Events fed from `inbox_events`, inbox.events.ts and inbox.live.ts).
 */
import type { Service, ServiceSchema } from "moleculer";
import type { ApiServiceSettings } from "../../lib/api";
import type { Deps } from "../../lib/deps";
import { InboxLiveMixin } from "./inbox.live";

type InboxThis = Service<ApiServiceSettings>;

export function createInboxService(deps: Deps): ServiceSchema<ApiServiceSettings> {
  return {
    name: "inbox",
    mixins: [InboxLiveMixin(deps) as ServiceSchema],
    settings: { rest: "/" },
    actions: {},
    created(this: InboxThis) {},
  };
}
