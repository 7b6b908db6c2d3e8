/**
 * auth: API keys (spec part 5, contract section 3). Creates, lists, describes and deletes keys of
 * the caller's account, and verifies key hashes for the gateway. Deleting a key broadcasts
 * `auth.keyDeleted` so that every gateway replica forgets it at once.
 */
import type { Context, Service, ServiceSchema } from "moleculer";
import { API_PREFIX, apiAction, type ApiServiceSettings, type AuthMeta } from "../../lib/http/api";
import type { Deps } from "../../lib/deps";
import { ApiError } from "../../lib/errors";
import { toPage, type Page } from "../../lib/http/paging";
import type { KeyDeletedEvent } from "./auth.contract";
import { createKey } from "./auth.keys";
import { defineAuthModels, toApiKeyOut, toPrincipal, type AuthModels } from "./auth.models";
import { findKeyByHash, findKeys, findOwnKey } from "./auth.queries";
import {
  apiKeyOut,
  apiKeyPage,
  createdApiKeyOut,
  createKeyIn,
  keyIdIn,
  listKeysIn,
  verifyIn,
  type ApiKeyOut,
  type CreatedApiKeyOut,
  type CreateKeyIn,
  type KeyIdIn,
  type ListKeysIn,
  type Principal,
  type VerifyIn,
} from "./auth.schemas";

interface AuthThis {
  models: AuthModels;
  awaitGateways(): Promise<void>;
  findOwnKey(ctx: Context<KeyIdIn, AuthMeta>): Promise<InstanceType<AuthModels["ApiKey"]>>;
}

export function createAuthService(deps: Deps): ServiceSchema<ApiServiceSettings> {
  return {
    name: "auth",
    settings: { rest: "/" },

    actions: {
      /** Creates a key whose operations are a subset of the caller's; answers its value once. */
      create: apiAction({
        rest: "POST /authentication",
        tag: "keys",
        operation: "AUTHENTICATION",
        summary: "Create an API key",
        description:
          "The new key's operations must be a subset of the calling key's (otherwise 403). It belongs to the caller's account, user and traffic type. The full value is in this answer only. An account holds at most MAX_KEYS_PER_ACCOUNT keys (default 500): one more is a 409.",
        params: createKeyIn,
        responses: { 201: createdApiKeyOut },
        errors: [403, 409],
        async handler(this: AuthThis, ctx: Context<CreateKeyIn, AuthMeta>): Promise<CreatedApiKeyOut> {
          const extra = ctx.params.operations.filter((op) => !ctx.meta.operations.includes(op));
          if (extra.length > 0) {
            throw new ApiError(
              "KEY_SCOPE_EXCEEDED",
              `The calling key does not have ${extra.join(", ")}; a key can only create keys within its own operations.`,
              {
                errors: extra.map((op) => ({ path: "operations", message: `${op} is not an operation of the calling key` })),
              },
            );
          }
          const created = await createKey(
            this.models,
            {
              companyId: ctx.meta.companyId,
              userId: ctx.meta.userId,
              operations: ctx.params.operations,
              trafficType: ctx.meta.trafficType,
              createdBy: ctx.meta.keyId,
            },
            deps.config.maxKeysPerAccount,
          );
          ctx.meta.$statusCode = 201;
          (ctx.meta as AuthMeta & { $location?: string }).$location = `${API_PREFIX}/authentication/${created.id}`;
          return created;
        },
      }),

      /** Lists the account's keys, optionally those of one user; never the key values. */
      list: apiAction({
        rest: "GET /authentication",
        tag: "keys",
        operation: "AUTHENTICATION",
        summary: "Find API keys",
        params: listKeysIn,
        responses: { 200: apiKeyPage },
        async handler(this: AuthThis, ctx: Context<ListKeysIn, AuthMeta>): Promise<Page<ApiKeyOut>> {
          const { page, limit, sortOrder, userId } = ctx.params;
          const { rows, count } = await findKeys(this.models, { companyId: ctx.meta.companyId, userId, sortOrder, page, limit });
          return toPage(rows.map(toApiKeyOut), count, page, limit);
        },
      }),

      /** Describes the calling key. */
      me: apiAction({
        rest: "GET /authentication/me",
        tag: "keys",
        operation: "AUTHENTICATION",
        summary: "Describe the calling key",
        responses: { 200: apiKeyOut },
        // The gateway has just verified the key and passes all of it on (its cache forgets a deleted
        // key on every replica at once): no database read. A call without the gateway reads the row.
        async handler(this: AuthThis, ctx: Context<unknown, AuthMeta>): Promise<ApiKeyOut> {
          const m = ctx.meta;
          if (m.keyCreatedByKeyId !== undefined) {
            return {
              id: m.keyId,
              companyId: m.companyId,
              userId: m.userId,
              username: m.username,
              operations: m.operations,
              trafficType: m.trafficType,
              createdAt: m.keyCreatedAt,
              createdByKeyId: m.keyCreatedByKeyId,
            };
          }
          const row = await findOwnKey(this.models, ctx.meta.companyId, ctx.meta.keyId);
          // Deleted between the gateway's check and here: as if the gateway had already forgotten it.
          if (!row) throw new ApiError("UNAUTHORIZED", "The API key is not valid.");
          return toApiKeyOut(row);
        },
      }),

      /** Describes one key of the account. */
      get: apiAction({
        rest: "GET /authentication/:id",
        tag: "keys",
        operation: "AUTHENTICATION",
        summary: "Describe an API key",
        params: keyIdIn,
        responses: { 200: apiKeyOut },
        errors: [404],
        async handler(this: AuthThis, ctx: Context<KeyIdIn, AuthMeta>): Promise<ApiKeyOut> {
          return toApiKeyOut(await this.findOwnKey(ctx));
        },
      }),

      /** Deletes a key of the account for good; emits auth.keyDeleted (broadcast). */
      remove: apiAction({
        rest: "DELETE /authentication/:id",
        tag: "keys",
        operation: "AUTHENTICATION",
        summary: "Delete an API key",
        description: "Takes effect at once on every gateway replica: the next request with the key is a 401. Cannot be undone.",
        params: keyIdIn,
        responses: { 204: null },
        errors: [404],
        async handler(this: AuthThis, ctx: Context<KeyIdIn, AuthMeta>): Promise<null> {
          const row = await this.findOwnKey(ctx);
          await row.destroy();
          await ctx.broadcast("auth.keyDeleted", { keyId: row.id, companyId: row.companyId } satisfies KeyDeletedEvent);
          await this.awaitGateways();
          ctx.meta.$statusCode = 204;
          return null;
        },
      }),

      /** For the gateway: who the key with this SHA-256 is, or null. */
      verify: apiAction({
        visibility: "public",
        params: verifyIn,
        async handler(this: AuthThis, ctx: Context<VerifyIn>): Promise<Principal | null> {
          const row = await findKeyByHash(this.models, Buffer.from(ctx.params.keyHash, "hex"));
          return row ? toPrincipal(row) : null;
        },
      }),
    },

    methods: {
      /**
       * Round trip to every remote gateway replica after the broadcast: packets from one node reach
       * another in order, so once a replica answers, it has handled auth.keyDeleted, and the 204
       * goes out only when no replica can still accept the key from its cache.
       */
      async awaitGateways(this: AuthThis & Service) {
        const local = this.broker.nodeID;
        const nodes = (this.broker.registry.getServiceList({ onlyAvailable: true }) as Array<{ name: string; nodeID: string }>)
          .filter((s) => s.name === "gateway" && s.nodeID !== local)
          .map((s) => s.nodeID);
        if (nodes.length > 0) await this.broker.ping([...new Set(nodes)], 2000).catch(() => undefined);
      },
      async findOwnKey(this: AuthThis, ctx: Context<KeyIdIn, AuthMeta>) {
        const row = await findOwnKey(this.models, ctx.meta.companyId, ctx.params.id);
        if (!row) throw new ApiError("KEY_NOT_FOUND", `No API key ${ctx.params.id} in this account.`);
        return row;
      },
    },

    created() {
      (this as unknown as AuthThis).models = defineAuthModels(deps.db.sequelize);
    },
  };
}
