/** Every service of the project by name; SERVICES picks among them. */
import type { ServiceSchema } from "moleculer";
import type { ServiceName } from "../lib/config";
import type { Deps } from "../lib/deps";
import { createAuthService } from "./auth/auth.service";
import { createCampaignsService } from "./campaigns/campaigns.service";
import { createContactsService } from "./contacts/contacts.service";
import { createExportsService } from "./exports/exports.service";
import { createGatewayService } from "./gateway/gateway.service";
import { createInboxService } from "./inbox/inbox.service";
import { createMediaService } from "./media/media.service";
import { createNotifierService } from "./notifier/notifier.service";
import { createProfilesService } from "./profiles/profiles.service";
import { createSimulatorService } from "./simulator/simulator.service";
import { createTrackingService } from "./tracking/tracking.service";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export const SERVICE_FACTORIES: Record<ServiceName, (deps: Deps) => ServiceSchema<any, any, any>> = {
  gateway: createGatewayService,
  auth: createAuthService,
  contacts: createContactsService,
  tracking: createTrackingService,
  notifier: createNotifierService,
  exports: createExportsService,
  media: createMediaService,
  profiles: createProfilesService,
  campaigns: createCampaignsService,
  simulator: createSimulatorService,
  inbox: createInboxService,
};
