/**
 * contacts: contacts, custom fields, contact lists and memberships of an account (spec parts 2 and
 * 4, contract section 4). Everything is filtered by the caller's account, so another account's ids
 * are simply not found. Imports (CSV, XLSX, vCard) come next.
 */
import type { ServiceSchema } from "moleculer";
import type { ApiServiceSettings } from "../../lib/api";
import type { Deps } from "../../lib/deps";
import { DbMixin } from "../../mixins/db.mixin";
import { contactActions, contactMethods } from "./contacts.actions";
import { listActions } from "./contacts.lists";

export function createContactsService(deps: Deps): ServiceSchema<ApiServiceSettings> {
  return {
    name: "contacts",
    mixins: [DbMixin(deps)],
    settings: { rest: "/" },
    actions: { ...contactActions, ...listActions },
    methods: contactMethods,
  };
}
