/** Opt-outs on the wire (contract section 7): the resource, its page and what the partner API takes. */
import { CHANNELS, type Channel } from "../../lib/messaging/channels";
import { pageSchema, pagingProperties, type Page, type PageIn } from "../../lib/http/paging";
import type { SchemaOf } from "../../lib/http/schema-type";
import { PHONE_NUMBER_SCHEMA } from "../../lib/messaging/phone";
import { OPT_OUT_SOURCES, type OptOutSource } from "./contacts.contract";
import { dateTime } from "./contacts.fields.schemas";

export interface OptOutOut {
  channel: Channel;
  phoneNumber: string;
  source: OptOutSource;
  createdAt: string;
}

export const optOutOut = {
  $id: "OptOut",
  type: "object",
  additionalProperties: false,
  required: ["channel", "phoneNumber", "source", "createdAt"],
  properties: {
    channel: { type: "string", enum: [...CHANNELS] },
    phoneNumber: { type: "string", description: "E.164", examples: ["+351912345678"] },
    source: {
      type: "string",
      enum: [...OPT_OUT_SOURCES],
      description:
        "KEYWORD: the end user wrote STOP (or another opt-out keyword) on RCS or WhatsApp; UPSTREAM: the channel's upstream reported it (an SMS carrier's STOP); API: `POST /contacts/opt-outs`; IMPORT: a contact import's `optedOut` column.",
    },
    createdAt: { ...dateTime, description: "When the opt-out began." },
  },
} satisfies SchemaOf<OptOutOut>;

export const optOutPage = pageSchema("OptOutPage", optOutOut) satisfies SchemaOf<Page<OptOutOut>>;

const channel = { type: "string", enum: [...CHANNELS] } satisfies SchemaOf<Channel>;
const phoneNumber = {
  ...PHONE_NUMBER_SCHEMA,
  description: "International format: `+` or `00` and the country code, then a number valid in that country (any spacing); taken as E.164.",
  examples: ["+351912345678"],
} satisfies SchemaOf<string>;

export type ListOptOutsIn = PageIn<"createdAt"> & { channel?: Channel; phoneNumber?: string };

export const listOptOutsIn = {
  $id: "ListOptOutsIn",
  type: "object",
  additionalProperties: false,
  description: "Filters combine with AND.",
  properties: { channel, phoneNumber, ...pagingProperties(["createdAt"], "createdAt", "desc") },
} satisfies SchemaOf<ListOptOutsIn>;

export interface OptOutIn {
  channel: Channel;
  phoneNumber: string;
}

export const optOutIn = {
  $id: "OptOutIn",
  type: "object",
  additionalProperties: false,
  required: ["channel", "phoneNumber"],
  properties: { channel, phoneNumber },
} satisfies SchemaOf<OptOutIn>;

export const optOutKeyIn = {
  $id: "OptOutKeyIn",
  type: "object",
  additionalProperties: false,
  required: ["channel", "phoneNumber"],
  properties: {
    channel,
    phoneNumber: { ...phoneNumber, description: "The opted-out number, its `+` URL-encoded (`%2B351912345678`)." },
  },
} satisfies SchemaOf<OptOutIn>;
