/** The profiles service (issue 16): skeleton, filled in by its own change. */
import type { ServiceSchema } from "moleculer";
import type { Deps } from "../../lib/deps";

export function createProfilesService(_deps: Deps): ServiceSchema {
  return { name: "profiles", actions: {} };
}
