/**
 * profiles: the social-network profiles an account connected (contract section 4 "Social
 * profile"). Access tokens are sealed with AES-256-GCM under SECRETS_KEY (lib/security/secrets.ts) before
 * they reach the database and are never answered or logged; `PUT /social-profiles/{id}/token`
 * replaces one (CONNECTED again). For the publisher to come: `profiles.accessToken` opens a profile's
 * token and `profiles.markRevoked` records that the network refused it.
 */
import { randomUUID } from "node:crypto";
import { type Context, type Service, type ServiceSchema } from "moleculer";
import { API_PREFIX, apiAction, type ApiServiceSettings, type AuthMeta } from "../../lib/http/api";
import type { Deps } from "../../lib/deps";
import { ApiError } from "../../lib/errors";
import type { Page } from "../../lib/http/paging";
import { secretBox, SecretUnreadableError, type SecretBox } from "../../lib/security/secrets";
import { profileAad, toProfileOut, toSealed } from "./profiles.models";
import { deleteProfile, findProfile, findToken, insertProfile, profilesPage, replaceToken, revokeProfile } from "./profiles.queries";
import {
  accessTokenOut,
  accountProfileIn,
  createProfileIn,
  listProfilesIn,
  profileIdIn,
  profileOut,
  profilePage,
  tokenIn,
  type AccountProfileIn,
  type CreateProfileIn,
  type ListProfilesIn,
  type ProfileIdIn,
  type ProfileOut,
  type TokenIn,
} from "./profiles.schemas";

interface ProfilesVars {
  box: SecretBox;
}
type ProfilesThis = Service<ApiServiceSettings> & ProfilesVars;
type Meta = AuthMeta & { $location?: string };

const notFound = (id: string) => new ApiError("PROFILE_NOT_FOUND", `No social profile ${id} in this account.`);
/**
 * A profile id as stored: the schemas accept a UUID in either case, PostgreSQL answers it in lower
 * case, and a token's additional authenticated data names it, so every action lowercases it first.
 */
const profileId = (id: string): string => id.toLowerCase();

export function createProfilesService(deps: Deps): ServiceSchema<ApiServiceSettings, Record<string, never>, ProfilesVars> {
  const sequelize = deps.db.sequelize;

  return {
    name: "profiles",
    settings: { rest: "/" },

    actions: {
      /** Lists the account's profiles, newest first, optionally of one network or status. */
      list: apiAction({
        rest: "GET /social-profiles",
        operation: "SOCIAL_PROFILES",
        summary: "Find social profiles",
        tag: "profiles",
        params: listProfilesIn,
        responses: { 200: profilePage },
        async handler(ctx: Context<ListProfilesIn, Meta>): Promise<Page<ProfileOut>> {
          return profilesPage(sequelize, ctx.meta.companyId, ctx.params);
        },
      }),

      /** Describes one profile of the account (never its token). */
      get: apiAction({
        rest: "GET /social-profiles/:id",
        operation: "SOCIAL_PROFILES",
        summary: "Describe a social profile",
        tag: "profiles",
        params: profileIdIn,
        responses: { 200: profileOut },
        errors: [404],
        async handler(ctx: Context<ProfileIdIn, Meta>): Promise<ProfileOut> {
          const id = profileId(ctx.params.id);
          const row = await findProfile(sequelize, ctx.meta.companyId, id);
          if (!row) throw notFound(id);
          return toProfileOut(row);
        },
      }),

      /** Connects a profile with its access token (stored encrypted); 409 naming the existing one for a repeated network and externalId. */
      create: apiAction({
        rest: "POST /social-profiles",
        operation: "SOCIAL_PROFILES",
        summary: "Connect a social profile",
        description:
          "The access token is stored encrypted (AES-256-GCM) and is never returned. A second profile of the account with the same network and externalId is a 409 whose body names the existing one (`existingId`).",
        tag: "profiles",
        params: createProfileIn,
        responses: { 201: profileOut },
        errors: [400, 409],
        async handler(this: ProfilesThis, ctx: Context<CreateProfileIn, Meta>): Promise<ProfileOut> {
          const { companyId } = ctx.meta;
          const id = randomUUID();
          const { network } = ctx.params;
          // One id however its accents are encoded ("café" precomposed or as e + combining accent): NFC, as it is stored and compared.
          const externalId = ctx.params.externalId.normalize("NFC");
          const token = this.box.seal(ctx.params.accessToken, profileAad(companyId, id));
          const res = await insertProfile(sequelize, { id, companyId, network, externalId, displayName: ctx.params.displayName ?? null, token });
          if ("existingId" in res) {
            throw new ApiError("PROFILE_EXISTS", `Social profile ${res.existingId} of this account has this network and externalId.`, {
              existingId: res.existingId,
            });
          }
          ctx.meta.$statusCode = 201;
          ctx.meta.$location = `${API_PREFIX}/social-profiles/${id}`;
          return toProfileOut(res.row);
        },
      }),

      /** Replaces a profile's access token; the profile is CONNECTED again. */
      replaceToken: apiAction({
        rest: "PUT /social-profiles/:id/token",
        operation: "SOCIAL_PROFILES",
        summary: "Replace a social profile's access token",
        description: "Re-connects the profile: its status is CONNECTED again and tokenUpdatedAt is now. The token is stored encrypted and never returned.",
        tag: "profiles",
        params: tokenIn,
        responses: { 200: profileOut },
        errors: [400, 404],
        async handler(this: ProfilesThis, ctx: Context<TokenIn, Meta>): Promise<ProfileOut> {
          const { companyId } = ctx.meta;
          const id = profileId(ctx.params.id);
          const row = await replaceToken(sequelize, companyId, id, (rowCompanyId, rowId) =>
            this.box.seal(ctx.params.accessToken, profileAad(rowCompanyId, rowId)),
          );
          if (!row) throw notFound(id);
          return toProfileOut(row);
        },
      }),

      /** Deletes a profile and its token for good. */
      remove: apiAction({
        rest: "DELETE /social-profiles/:id",
        operation: "SOCIAL_PROFILES",
        summary: "Delete a social profile",
        tag: "profiles",
        params: profileIdIn,
        responses: { 204: null },
        errors: [404],
        async handler(ctx: Context<ProfileIdIn, Meta>): Promise<null> {
          const id = profileId(ctx.params.id);
          if (!(await deleteProfile(sequelize, ctx.meta.companyId, id))) throw notFound(id);
          ctx.meta.$statusCode = 204;
          return null;
        },
      }),

      /** Internal (the publisher): marks a profile REVOKED once its network refused the token; PUT token connects it again. */
      markRevoked: apiAction({
        visibility: "public",
        params: accountProfileIn,
        responses: { 200: profileOut },
        async handler(ctx: Context<AccountProfileIn>): Promise<ProfileOut> {
          const id = profileId(ctx.params.id);
          const row = await revokeProfile(sequelize, ctx.params.companyId, id);
          if (!row) throw notFound(id);
          return toProfileOut(row);
        },
      }),

      /** Internal (the publisher): a profile's access token in clear; an unreadable one is a logged 500 naming only ids. */
      accessToken: apiAction({
        visibility: "public",
        params: accountProfileIn,
        responses: { 200: accessTokenOut },
        async handler(this: ProfilesThis, ctx: Context<AccountProfileIn>): Promise<{ accessToken: string }> {
          const id = profileId(ctx.params.id);
          const row = await findToken(sequelize, ctx.params.companyId, id);
          if (!row) throw notFound(id);
          try {
            return { accessToken: this.box.open(toSealed(row), profileAad(row.company_id, row.id)) };
          } catch (err) {
            if (!(err instanceof SecretUnreadableError)) throw err;
            this.logger.error(
              { profileId: row.id, companyId: row.company_id, keyId: err.keyId, reason: err.reason },
              `access token unreadable: ${err.message}`,
            );
            throw new ApiError("PROFILE_TOKEN_UNREADABLE", `The access token of social profile ${row.id} cannot be read: ${err.message}.`, {
              id: row.id,
              keyId: err.keyId,
            });
          }
        },
      }),
    },

    created(this: ProfilesThis) {
      this.box = secretBox(deps.config);
    },
  };
}
