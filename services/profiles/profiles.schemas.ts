/**
 * Social profiles on the wire (contract section 4 "Social profile"). The access token is accepted,
 * never answered: `writeOnly`, and no example value anywhere in the OpenAPI document.
 */
import { pageSchema, pagingProperties, type Page, type PageIn } from "../../lib/http/paging";
import type { SchemaOf } from "../../lib/http/schema-type";
import { UUID_PATTERN } from "../../lib/http/validator";

export const NETWORKS = ["FACEBOOK", "INSTAGRAM", "X", "LINKEDIN", "TIKTOK"] as const;
export type Network = (typeof NETWORKS)[number];
export const PROFILE_STATUSES = ["CONNECTED", "REVOKED"] as const;
export type ProfileStatus = (typeof PROFILE_STATUSES)[number];

/** Longest access token accepted (8 KiB of characters; OAuth tokens and JWTs are far shorter). */
export const MAX_TOKEN_LENGTH = 8192;
/** No control characters (C0, DEL, C1) in any text of a profile. */
const PRINTABLE = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$";

export interface ProfileOut {
  id: string;
  network: Network;
  externalId: string;
  displayName: string | null;
  status: ProfileStatus;
  createdAt: string;
  updatedAt: string;
  tokenUpdatedAt: string;
}
export interface CreateProfileIn {
  network: Network;
  externalId: string;
  displayName?: string;
  accessToken: string;
}
export interface TokenIn {
  id: string;
  accessToken: string;
}
export interface ProfileIdIn {
  id: string;
}
export interface ListProfilesIn extends PageIn<"createdAt"> {
  network?: Network;
  status?: ProfileStatus;
}
/** Internal actions name the account explicitly (no gateway meta). */
export interface AccountProfileIn {
  companyId: string;
  id: string;
}

const accessToken = {
  type: "string",
  minLength: 1,
  maxLength: MAX_TOKEN_LENGTH,
  pattern: PRINTABLE,
  writeOnly: true,
  description: `The network's access token for this profile (at most ${MAX_TOKEN_LENGTH} characters, no control characters). Stored encrypted (AES-256-GCM); never returned or logged.`,
} satisfies SchemaOf<string>;
const externalId = {
  type: "string",
  minLength: 1,
  maxLength: 256,
  pattern: PRINTABLE,
  description: "The profile's id on its network.",
  examples: ["17841400008460056"],
} satisfies SchemaOf<string>;
const displayName = {
  type: "string",
  minLength: 1,
  maxLength: 256,
  pattern: PRINTABLE,
  description: "A name to show for the profile (optional: left out, the profile has none, `null` in answers).",
  examples: ["Acme Coffee"],
} satisfies SchemaOf<string>;
const id = { type: "string", pattern: UUID_PATTERN, examples: ["5f0c6a1e-3b7d-4c2a-9e51-8d4f2b6a7c10"] } satisfies SchemaOf<string>;

export const profileOut = {
  $id: "SocialProfile",
  type: "object",
  additionalProperties: false,
  required: ["id", "network", "externalId", "displayName", "status", "createdAt", "updatedAt", "tokenUpdatedAt"],
  properties: {
    id: { type: "string", format: "uuid" },
    network: { type: "string", enum: [...NETWORKS] },
    externalId: { type: "string", examples: ["17841400008460056"] },
    displayName: { type: "string", nullable: true, examples: ["Acme Coffee"] },
    status: {
      type: "string",
      enum: [...PROFILE_STATUSES],
      description: "REVOKED: the network refused the token; PUT /social-profiles/{id}/token with a new one connects the profile again.",
    },
    createdAt: { type: "string", format: "date-time" },
    updatedAt: { type: "string", format: "date-time" },
    tokenUpdatedAt: { type: "string", format: "date-time", description: "When the access token was last given (create or PUT token)." },
  },
} satisfies SchemaOf<ProfileOut>;

export const profilePage = pageSchema("SocialProfilePage", profileOut) satisfies SchemaOf<Page<ProfileOut>>;

export const createProfileIn = {
  $id: "CreateSocialProfileIn",
  type: "object",
  additionalProperties: false,
  required: ["network", "externalId", "accessToken"],
  properties: { network: { type: "string", enum: [...NETWORKS] }, externalId, displayName, accessToken },
} satisfies SchemaOf<CreateProfileIn>;

export const tokenIn = {
  $id: "SocialProfileTokenIn",
  type: "object",
  additionalProperties: false,
  required: ["id", "accessToken"],
  properties: { id, accessToken },
} satisfies SchemaOf<TokenIn>;

export const profileIdIn = {
  $id: "SocialProfileIdIn",
  type: "object",
  additionalProperties: false,
  required: ["id"],
  properties: { id },
} satisfies SchemaOf<ProfileIdIn>;

export const listProfilesIn = {
  $id: "ListSocialProfilesIn",
  type: "object",
  additionalProperties: false,
  properties: {
    network: { type: "string", enum: [...NETWORKS], description: "Only profiles on this network." },
    status: { type: "string", enum: [...PROFILE_STATUSES], description: "Only profiles in this status." },
    ...pagingProperties(["createdAt"], "createdAt", "desc"),
  },
} satisfies SchemaOf<ListProfilesIn>;

export const accountProfileIn = {
  $id: "AccountSocialProfileIn",
  type: "object",
  additionalProperties: false,
  required: ["companyId", "id"],
  properties: { companyId: { type: "string", pattern: "^[A-Za-z0-9._@:-]{1,128}$" }, id },
} satisfies SchemaOf<AccountProfileIn>;

/** `profiles.accessToken` (internal): the profile's token, decrypted. */
export type AccessTokenOut = { accessToken: string };

export const accessTokenOut = {
  $id: "SocialProfileAccessToken",
  type: "object",
  additionalProperties: false,
  required: ["accessToken"],
  properties: { accessToken: { type: "string" } },
} satisfies SchemaOf<AccessTokenOut>;
