/**
 * Every migration, in order. Listed here rather than globbed so that the same list runs under tsx,
 * jest and a compiled build alike. Each is SQL that PostgreSQL and PGlite both accept.
 */
import type { Sequelize } from "sequelize";
import * as m0001 from "./20261122-0001-api-keys";
import * as m0002 from "./20261122-0002-idempotency";
import * as m0003 from "./20261122-0003-contacts";
import * as m0004 from "./20261122-0004-contact-imports";
import * as m0005 from "./20261122-0005-tracking";
import * as m0006 from "./20261123-0006-webhooks";
import * as m0007 from "./20261123-0007-webhook-delivery";
import * as m0008 from "./20261123-0008-exports";
import * as m0009 from "./20261124-0009-key-creator";
import * as m0010 from "./20261125-0010-media";
import * as m0011 from "./20261125-0011-profiles";
import * as m0012 from "./20261125-0012-campaigns";
import * as m0013 from "./20261126-0013-inbox";
import * as m0014 from "./20261126-0014-inbox-live";
import * as m0015 from "./20261126-0015-campaign-claims";
import * as m0016 from "./20261126-0016-campaign-contact-marks";
import * as m0017 from "./20261127-0017-inbox-reply-media";
import * as m0018 from "./20261128-0018-inbox-event-ids";
import * as m0019 from "./20261128-0019-opt-outs";
import * as m0020 from "./20261128-0020-webhook-signing";
import * as m0021 from "./20261128-0021-campaign-skipped";
import * as m0022 from "./20261129-0022-webhook-accounts";
import * as m0023 from "./20261130-0023-message-partitions";
import * as m0024 from "./20261130-0024-contact-channel-refusals";
import * as m0025 from "./20261130-0025-day-partitions";
import * as m0026 from "./20261201-0026-account-keys";
import * as m0027 from "./20261201-0027-message-status-feed";
import * as m0028 from "./20261201-0028-campaign-messages-view";
import * as m0029 from "./20261201-0029-contacts-views";
import * as m0030 from "./20261202-0030-campaign-batches";
import * as m0031 from "./20261203-0031-webhook-feeds";
import * as m0032 from "./20261203-0032-inbound-feed";
import * as m0033 from "./20261203-0033-outbox-key";
import * as m0034 from "./20261204-0034-channel-support-feed";
import * as m0035 from "./20261205-0035-message-keys-by-time";

export interface Migration {
  name: string;
  up(sequelize: Sequelize): Promise<void>;
  down(sequelize: Sequelize): Promise<void>;
}

export const migrations: Migration[] = [
  { name: "20261122-0001-api-keys", ...m0001 },
  { name: "20261122-0002-idempotency", ...m0002 },
  { name: "20261122-0003-contacts", ...m0003 },
  { name: "20261122-0004-contact-imports", ...m0004 },
  { name: "20261122-0005-tracking", ...m0005 },
  { name: "20261123-0006-webhooks", ...m0006 },
  { name: "20261123-0007-webhook-delivery", ...m0007 },
  { name: "20261123-0008-exports", ...m0008 },
  { name: "20261124-0009-key-creator", ...m0009 },
  { name: "20261125-0010-media", ...m0010 },
  { name: "20261125-0011-profiles", ...m0011 },
  { name: "20261125-0012-campaigns", ...m0012 },
  { name: "20261126-0013-inbox", ...m0013 },
  { name: "20261126-0014-inbox-live", ...m0014 },
  { name: "20261126-0015-campaign-claims", ...m0015 },
  { name: "20261126-0016-campaign-contact-marks", ...m0016 },
  { name: "20261127-0017-inbox-reply-media", ...m0017 },
  { name: "20261128-0018-inbox-event-ids", ...m0018 },
  { name: "20261128-0019-opt-outs", ...m0019 },
  { name: "20261128-0020-webhook-signing", ...m0020 },
  { name: "20261128-0021-campaign-skipped", ...m0021 },
  { name: "20261129-0022-webhook-accounts", ...m0022 },
  { name: "20261130-0023-message-partitions", ...m0023 },
  { name: "20261130-0024-contact-channel-refusals", ...m0024 },
  { name: "20261130-0025-day-partitions", ...m0025 },
  { name: "20261201-0026-account-keys", ...m0026 },
  { name: "20261201-0027-message-status-feed", ...m0027 },
  { name: "20261201-0028-campaign-messages-view", ...m0028 },
  { name: "20261201-0029-contacts-views", ...m0029 },
  { name: "20261202-0030-campaign-batches", ...m0030 },
  { name: "20261203-0031-webhook-feeds", ...m0031 },
  { name: "20261203-0032-inbound-feed", ...m0032 },
  { name: "20261203-0033-outbox-key", ...m0033 },
  { name: "20261204-0034-channel-support-feed", ...m0034 },
  { name: "20261205-0035-message-keys-by-time", ...m0035 },
];
