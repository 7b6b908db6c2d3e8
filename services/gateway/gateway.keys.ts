/**
 * API-key authentication: the key's hash, the principal cache (cleared by `auth.keyDeleted`), the
 * lookup through `auth.verify`, and the check of the operation an action requires.
 */
import type { Context } from "moleculer";
import { API_KEY_RE, hashApiKeyHex } from "../../lib/security/api-key";
import type { ApiAction, AuthMeta, Operation } from "../../lib/http/api";
import { CHANNELS } from "../../lib/messaging/channels";
import { ApiError } from "../../lib/errors";
import { callAuth, type Principal } from "../auth/auth.contract";

/** Principals kept at most; the oldest goes first. */
const MAX_CACHED = 10000;
/** How long a deleted key is remembered: longer than a lookup started before the deletion could take. */
const DELETED_KEPT_MS = 60_000;

/** The hex SHA-256 of an X-API-Key header, or null when there is no well-formed key. */
export const keyHashOf = (raw: string | string[] | undefined): string | null => (typeof raw === "string" && API_KEY_RE.test(raw) ? hashApiKeyHex(raw) : null);

/** Who keys are, by the hex SHA-256 of their value, for `ttlMs` (0: not cached). */
export class PrincipalCache {
  private readonly byHash = new Map<string, { principal: Principal; expires: number }>();
  private readonly hashByKeyId = new Map<string, string>();
  private readonly deleted = new Map<string, number>();

  constructor(private readonly ttlMs: number) {}

  /** Keys held now (some may have expired and not yet been dropped). */
  get size(): number {
    return this.byHash.size;
  }

  /** The principal of a key while it is cached. */
  get(hash: string): Principal | null {
    const hit = this.byHash.get(hash);
    return hit && hit.expires > Date.now() ? hit.principal : null;
  }

  /** Takes the answer of a lookup: null when the key was deleted while the lookup was on its way. */
  remember(hash: string, principal: Principal | null): Principal | null {
    if (!principal || this.deleted.has(principal.keyId)) return null;
    if (this.ttlMs > 0) {
      if (this.byHash.size >= MAX_CACHED) {
        const oldest = this.byHash.keys().next().value!;
        this.byHash.delete(oldest);
      }
      this.byHash.set(hash, { principal, expires: Date.now() + this.ttlMs });
      this.hashByKeyId.set(principal.keyId, hash);
    }
    return principal;
  }

  /** Forgets a deleted key, and remembers it for as long as a lookup started before could still answer. */
  evict(keyId: string): void {
    const hash = this.hashByKeyId.get(keyId);
    if (hash) this.byHash.delete(hash);
    this.hashByKeyId.delete(keyId);
    const now = Date.now();
    this.deleted.set(keyId, now + DELETED_KEPT_MS);
    if (this.deleted.size > 1000) for (const [id, until] of this.deleted) if (until < now) this.deleted.delete(id);
  }
}

/** Lookups on their way, by key hash: requests with the same key meanwhile wait for that one. */
const inFlight = new WeakMap<PrincipalCache, Map<string, Promise<Principal | null>>>();

/** The lookup of this key already on its way, if any (its answer will be the cache's). */
export function lookupInFlight(cache: PrincipalCache, hash: string): Promise<Principal | null> | undefined {
  return inFlight.get(cache)?.get(hash);
}

/** Asks `auth` who the key with this hex SHA-256 is, and caches the answer; one lookup per key at a time. */
export function lookupPrincipal(ctx: Context, cache: PrincipalCache, hash: string): Promise<Principal | null> {
  let pending = inFlight.get(cache);
  if (!pending) inFlight.set(cache, (pending = new Map()));
  const running = pending.get(hash);
  if (running) return running;
  const lookup = callAuth(ctx, "auth.verify", { keyHash: hash })
    .then((principal) => cache.remember(hash, principal))
    .finally(() => pending.delete(hash));
  pending.set(hash, lookup);
  return lookup;
}

/**
 * 401 unless the principal has the operation the action requires. `"CHANNEL"`: the channel named
 * by the `channel` query parameter (when it names one; a bad value is the action's 400), and at
 * least one channel in any case.
 */
export function requireOperation(operation: NonNullable<ApiAction["operation"]>, principal: Principal, channel: unknown): void {
  if (operation === "CHANNEL") {
    if (typeof channel === "string" && (CHANNELS as readonly string[]).includes(channel) && !principal.operations.includes(channel as Operation)) {
      throw new ApiError("UNAUTHORIZED", `The API key is not authorized for ${channel}.`);
    }
    if (!CHANNELS.some((c) => principal.operations.includes(c))) {
      throw new ApiError("UNAUTHORIZED", "The API key is not authorized for any channel (SMS, RCS, WHATSAPP).");
    }
  } else if (!principal.operations.includes(operation)) {
    throw new ApiError("UNAUTHORIZED", `The API key is not authorized for ${operation}.`);
  }
}

type PrincipalMeta = Omit<AuthMeta, "$statusCode" | "$responseHeaders">;
const metaOfPrincipal = new WeakMap<Principal, PrincipalMeta>();

/** What every service reads of the caller (ctx.meta), from the key: made once per cached principal (it is copied into each request's meta). */
export function authMetaOf(principal: Principal): PrincipalMeta {
  let meta = metaOfPrincipal.get(principal);
  if (!meta) metaOfPrincipal.set(principal, (meta = Object.freeze(principalMeta(principal))));
  return meta;
}

const principalMeta = (principal: Principal): PrincipalMeta => ({
  companyId: principal.companyId,
  userId: principal.userId,
  username: principal.username,
  keyId: principal.keyId,
  keyCreatedAt: principal.keyCreatedAt,
  keyCreatedByKeyId: principal.keyCreatedByKeyId,
  operations: principal.operations,
  trafficType: principal.trafficType,
});
