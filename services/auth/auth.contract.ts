/**
 * What other services and the scripts may know of auth: the `auth.keyDeleted` event, who a key is
 * (the answer of `auth.verify`, as the gateway caches it) and the one way to create a key without
 * an API key (the admin command: the first key of an account, recovery).
 */
import type { Sequelize } from "sequelize";
import { createKey, type NewKey } from "./auth.keys";
import { defineAuthModels } from "./auth.models";
import type { CreatedApiKeyOut } from "./auth.schemas";
import { callerOf, type Action } from "../../lib/bus/calls";
import type { Principal, VerifyIn } from "./auth.schemas";

/** Payload of `auth.keyDeleted`, broadcast when a key is deleted: every gateway forgets it at once. */
export interface KeyDeletedEvent {
  keyId: string;
  companyId: string;
}

export type { Principal } from "./auth.schemas";
export type { CreatedApiKeyOut, NewKey };

/**
 * Creates a key straight in the database (no caller, no scope check); answers the 201 body of POST
 * /authentication. With `maxKeys`, an account already holding that many is refused (KEY_LIMIT_REACHED).
 */
export function createKeyAsAdmin(sequelize: Sequelize, input: NewKey, maxKeys?: number): Promise<CreatedApiKeyOut> {
  return createKey(defineAuthModels(sequelize), input, maxKeys);
}

/** What other services call of auth (lib/bus/calls.ts): `auth.verify`, who a key hash is (null: no such key). */
export interface AuthActions {
  "auth.verify": Action<VerifyIn, Principal | null>;
}
export const callAuth = callerOf<AuthActions>();
