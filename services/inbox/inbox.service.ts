/**
 * inbox: two-way conversations on RCS and WhatsApp (contract section 4 "Conversation"): inbound
 * messages from end users, replies through the upstream adapter, archive and unarchive, and the live
 * view (Server-Sent Events fed from `inbox_events`, inbox.events.ts).
 */
import type { Service, ServiceSchema } from "moleculer";
import type { ApiServiceSettings } from "../../lib/api";
import type { Deps } from "../../lib/deps";

type InboxThis = Service<ApiServiceSettings>;

export function createInboxService(deps: Deps): ServiceSchema<ApiServiceSettings> {
  void deps;
  return {
    name: "inbox",
    settings: { rest: "/" },
    actions: {},
    created(this: InboxThis) {},
  };
}
