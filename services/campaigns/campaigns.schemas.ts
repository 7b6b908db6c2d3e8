/**
 * Campaigns on the wire (spec parts 3 and 4; contract section 4, Campaign).
 */
import { CHANNELS, STATUS_NAMES, type Channel } from "../../lib/messaging/channels";
import { MESSAGE_KEYWORD } from "../../lib/http/schema-messages";
import { YEAR_PATTERN } from "../../lib/messaging/time";
import { pageSchema, pagingProperties, type Page, type PageIn } from "../../lib/http/paging";
import type { PropertiesOf, SchemaOf, Subschema } from "../../lib/http/schema-type";
import { listId, UUID } from "../contacts/contacts.contract";
import { RANGE_RULE } from "../tracking/tracking.contract";
import { MAX_TEXT } from "./campaigns.text";

export const CAMPAIGN_STATUSES = ["DRAFT", "SCHEDULED", "SENDING", "PAUSED", "SENT", "FAILED", "CANCELLED"] as const;
export type CampaignStatus = (typeof CAMPAIGN_STATUSES)[number];
export const FINAL_STATUSES: readonly CampaignStatus[] = ["SENT", "FAILED", "CANCELLED"];
export const CAMPAIGN_SORTS = ["createdAt", "name", "status", "scheduledAt"] as const;
export type CampaignSort = (typeof CAMPAIGN_SORTS)[number];

const id = { type: "string", pattern: UUID, examples: ["3c9a4f1e-7d2b-4a6c-9e8f-1b2c3d4e5f60"] } satisfies SchemaOf<string>;
const dateTime = { type: "string", format: "date-time", maxLength: 40 } satisfies SchemaOf<string>;
const nullableDate = { type: "string", format: "date-time", nullable: true } satisfies SchemaOf<string | null>;
const channel = { type: "string", enum: [...CHANNELS] } satisfies SchemaOf<Channel>;
const mediaId = {
  type: "string",
  minLength: 1,
  maxLength: 100,
  pattern: "^[A-Za-z0-9._:-]+$",
  examples: ["6f1c2a7e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"],
} satisfies SchemaOf<string>;

export interface MessageIn {
  text: string;
  mediaIds?: string[] | null;
}

export interface CampaignIn {
  name: string;
  channel: Channel;
  contactListIds: number[];
  message: MessageIn;
  scheduledAt?: string | null;
  sendRatePerSecond?: number | null;
}

export type UpdateCampaignIn = Partial<CampaignIn> & { id: string };
export type CampaignIdIn = { id: string };

const messageIn = {
  type: "object",
  additionalProperties: false,
  required: ["text"],
  properties: {
    text: {
      type: "string",
      minLength: 1,
      maxLength: Math.max(...Object.values(MAX_TEXT)),
      description: `At most ${MAX_TEXT.SMS} characters on SMS, ${MAX_TEXT.RCS} on RCS, ${MAX_TEXT.WHATSAPP} on WhatsApp. Placeholders: {{firstName}}, {{lastName}}, {{customFields.<key>}}, each with an optional fallback ({{firstName|there}}).`,
      examples: ["Hi {{firstName|there}}, our sale starts today!"],
    },
    mediaIds: {
      type: "array",
      items: mediaId,
      maxItems: 10,
      nullable: true,
      // The document's sample is an SMS campaign: no media.
      examples: [[]],
      description:
        "Media (POST /media) sent with the message: RCS and WhatsApp only. Referenced until the campaign is final, so it cannot be deleted meanwhile.",
    },
  },
} satisfies SchemaOf<MessageIn>;

const campaignFields = {
  name: { type: "string", minLength: 1, maxLength: 200, examples: ["Black Friday"] },
  channel,
  contactListIds: { type: "array", items: listId, minItems: 1, maxItems: 100, description: "The lists whose contacts form the audience (distinct contacts)." },
  message: messageIn,
  scheduledAt: {
    ...dateTime,
    pattern: YEAR_PATTERN,
    nullable: true,
    description: "When to start sending (in the future: else 400); a year from 1970 to 9999, no leap second; null or absent: at confirmation.",
  },
  sendRatePerSecond: {
    type: "integer",
    minimum: 1,
    maximum: 100000,
    nullable: true,
    description: "The most messages sent per second; null: as fast as the upstream takes them.",
  },
} satisfies PropertiesOf<CampaignIn>;

/** The text's limit and whether media may go with it, per channel: in the schema, so the document says it. */
const perChannel = {
  allOf: (Object.keys(MAX_TEXT) as Channel[]).map((ch) => ({
    if: { properties: { channel: { const: ch } }, required: ["channel"] },
    then: {
      properties: {
        message: {
          type: "object",
          properties: {
            text: { type: "string", maxLength: MAX_TEXT[ch], [MESSAGE_KEYWORD]: `must have at most ${MAX_TEXT[ch]} characters on ${ch}` },
            ...(ch === "SMS"
              ? {
                  mediaIds: {
                    type: "array",
                    items: {},
                    nullable: true,
                    maxItems: 0,
                    [MESSAGE_KEYWORD]: "must be empty on SMS (media go with RCS and WhatsApp)",
                  },
                }
              : {}),
          },
        },
      },
    },
  })),
} satisfies Subschema<CampaignIn>;

export const createCampaignIn = {
  $id: "CreateCampaignIn",
  type: "object",
  additionalProperties: false,
  required: ["name", "channel", "contactListIds", "message"],
  properties: campaignFields,
  ...perChannel,
} satisfies SchemaOf<CampaignIn>;

export const updateCampaignIn = {
  $id: "UpdateCampaignIn",
  type: "object",
  additionalProperties: false,
  required: ["id"],
  properties: { id, ...campaignFields },
  // An update names at least one field to change.
  anyOf: (Object.keys(campaignFields) as (keyof CampaignIn)[]).map((k) => ({ required: [k] })),
  [MESSAGE_KEYWORD]: "an update names at least one field to change",
  ...perChannel,
} satisfies SchemaOf<UpdateCampaignIn>;

export const campaignIdIn = {
  $id: "CampaignIdIn",
  type: "object",
  additionalProperties: false,
  required: ["id"],
  properties: { id },
} satisfies SchemaOf<CampaignIdIn>;

export interface CampaignOut {
  id: string;
  name: string;
  channel: Channel;
  status: CampaignStatus;
  contactListIds: number[];
  message: { text: string; mediaIds: string[] };
  scheduledAt: string | null;
  sendRatePerSecond: number | null;
  progress: { audience: number; sent: number; failed: number; skipped: number };
  pauseReason: string | null;
  createdAt: string;
  updatedAt: string;
  confirmedAt: string | null;
  completedAt: string | null;
}

const count = { type: "integer", minimum: 0 } satisfies SchemaOf<number>;

export const campaignOut = {
  $id: "Campaign",
  type: "object",
  additionalProperties: false,
  required: [
    "id",
    "name",
    "channel",
    "status",
    "contactListIds",
    "message",
    "scheduledAt",
    "sendRatePerSecond",
    "progress",
    "pauseReason",
    "createdAt",
    "updatedAt",
    "confirmedAt",
    "completedAt",
  ],
  properties: {
    id,
    name: { type: "string" },
    channel,
    status: {
      type: "string",
      enum: [...CAMPAIGN_STATUSES],
      description:
        "DRAFT -> SCHEDULED (confirmed, waiting for scheduledAt) -> SENDING -> SENT; PAUSED (by PUT .../pause, or by itself when most of a batch failed: see pauseReason), CANCELLED, FAILED (every recipient failed).",
    },
    contactListIds: { type: "array", items: { type: "integer" } },
    message: {
      type: "object",
      additionalProperties: false,
      required: ["text", "mediaIds"],
      properties: { text: { type: "string" }, mediaIds: { type: "array", items: { type: "string" } } },
    },
    scheduledAt: nullableDate,
    sendRatePerSecond: { type: "integer", nullable: true },
    progress: {
      type: "object",
      additionalProperties: false,
      required: ["audience", "sent", "failed", "skipped"],
      properties: {
        audience: { ...count, description: "Recipients snapshotted at confirmation (0 while DRAFT)." },
        sent: { ...count, description: "Recipients handed to the upstream." },
        failed: { ...count, description: "Recipients the upstream refused 3 times." },
        skipped: {
          ...count,
          description:
            "Recipients never sent to: their number opted out of the channel (at the confirm, or before their batch was sent), or their contact was deleted after the confirm. Once the campaign ends, audience = sent + failed + skipped.",
        },
      },
    },
    pauseReason: { type: "string", nullable: true },
    createdAt: { type: "string", format: "date-time" },
    updatedAt: { type: "string", format: "date-time" },
    confirmedAt: nullableDate,
    completedAt: nullableDate,
  },
} satisfies SchemaOf<CampaignOut>;

export const campaignPage = pageSchema("CampaignPage", campaignOut) satisfies SchemaOf<Page<CampaignOut>>;

export type ListCampaignsIn = PageIn<CampaignSort> & { status?: CampaignStatus; channel?: Channel; search?: string };

export const listCampaignsIn = {
  $id: "ListCampaignsIn",
  type: "object",
  additionalProperties: false,
  properties: {
    ...pagingProperties(CAMPAIGN_SORTS, "createdAt", "desc"),
    status: { type: "string", enum: [...CAMPAIGN_STATUSES] },
    channel,
    search: { type: "string", minLength: 1, maxLength: 200, description: "Case-insensitive part of the name." },
  },
} satisfies SchemaOf<ListCampaignsIn>;

export interface PreviewOut {
  audience: number;
  messages: number;
  tooLong: number;
  excluded: { optedOut: number };
  parts: number | null;
  encodings: { GSM7: number; UCS2: number } | null;
  samples: Array<{ contactId: string; destination: string; text: string; encoding: "GSM7" | "UCS2" | null; parts: number | null }>;
}

export const previewOut = {
  $id: "CampaignPreview",
  type: "object",
  additionalProperties: false,
  required: ["audience", "messages", "tooLong", "excluded", "parts", "encodings", "samples"],
  properties: {
    audience: { ...count, description: "Recipients if the campaign were confirmed now (the snapshot once confirmed)." },
    messages: { ...count, description: "Messages to send: one per recipient not opted out whose text fits the channel." },
    excluded: {
      type: "object",
      additionalProperties: false,
      required: ["optedOut"],
      properties: {
        optedOut: {
          ...count,
          description: "Recipients whose number opted out of the channel (GET /contacts/opt-outs): never sent to, counted in progress.skipped.",
        },
      },
    },
    tooLong: {
      ...count,
      description:
        "Recipients whose placeholder values push their text past the channel's maximum (in characters: Unicode code points): never cut, the sender records them FAILED.",
    },
    parts: { ...count, nullable: true, description: "SMS: parts in all (GSM-7: 160, or 153 per part; UCS-2: 70, or 67 per part). Null on RCS and WhatsApp." },
    encodings: {
      type: "object",
      nullable: true,
      additionalProperties: false,
      required: ["GSM7", "UCS2"],
      properties: { GSM7: count, UCS2: count },
      description: "SMS: recipients whose text is GSM-7 and UCS-2.",
    },
    samples: {
      type: "array",
      maxItems: 5,
      description: "The text rendered for the first few recipients (by contact id).",
      items: {
        type: "object",
        additionalProperties: false,
        required: ["contactId", "destination", "text", "encoding", "parts"],
        properties: {
          contactId: { type: "string" },
          destination: { type: "string" },
          text: { type: "string" },
          encoding: { type: "string", enum: ["GSM7", "UCS2", null], nullable: true },
          parts: { ...count, nullable: true },
        },
      },
    },
  },
} satisfies SchemaOf<PreviewOut>;

export interface StatsIn {
  campaignId?: string;
  channel?: Channel;
  from?: string;
  to?: string;
}

export const statsIn = {
  $id: "CampaignStatsIn",
  type: "object",
  additionalProperties: false,
  properties: {
    campaignId: id,
    channel,
    from: { ...dateTime, pattern: YEAR_PATTERN, description: `Messages sent at or after this instant. ${RANGE_RULE}` },
    to: { ...dateTime, pattern: YEAR_PATTERN, description: `Messages sent before this instant. ${RANGE_RULE}` },
  },
} satisfies SchemaOf<StatsIn>;

export interface StatsOut {
  total: number;
  byStatus: Record<string, number>;
  read: number;
  pending: number;
  parts: number;
  price: number;
  responded: number;
}

export const statsOut = {
  $id: "CampaignStats",
  type: "object",
  additionalProperties: false,
  required: ["total", "byStatus", "read", "pending", "parts", "price", "responded"],
  properties: {
    total: { ...count, description: "Campaign messages sent (simulated ones are not counted)." },
    byStatus: {
      type: "object",
      additionalProperties: false,
      properties: Object.fromEntries(STATUS_NAMES.map((n) => [n, count])),
      description: "Messages by their current delivery status (only statuses that occur).",
    },
    read: { ...count, description: "RCS and WhatsApp messages read." },
    pending: { ...count, description: "Messages still in flight (ACCEPTED on SMS, UNKNOWN on RCS and WhatsApp)." },
    parts: { ...count, description: "SMS parts (each message counts its parts; RCS and WhatsApp count 1)." },
    price: { type: "number", minimum: 0, description: "Sum of the prices the SMS receipts carried." },
    responded: {
      ...count,
      description: "Distinct recipients (per campaign) of RCS and WhatsApp messages who wrote back within 24 hours of their message.",
    },
  },
} satisfies SchemaOf<StatsOut>;
