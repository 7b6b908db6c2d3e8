/**
 * Key values and the one way keys are created, shared by the auth service and the admin command
 * (through auth.contract.ts). A key is `pgw_` + 256 random bits (base64url); only its SHA-256 is
 * stored. A fast hash is right here: the value has 256 bits of entropy, so there is nothing to
 * stretch, and lookups stay O(1).
 */
import { randomBytes, randomUUID } from "node:crypto";
import { API_KEY_PREFIX, hashApiKey } from "../../lib/security/api-key";
import type { Operation, TrafficType } from "../../lib/http/api";
import { toApiKeyOut, type AuthModels } from "./auth.models";
import { ApiError } from "../../lib/errors";
import { insertKey, insertKeyWithin } from "./auth.queries";
import type { CreatedApiKeyOut } from "./auth.schemas";

export function generateKey(): { value: string; hash: Buffer } {
  const value = API_KEY_PREFIX + randomBytes(32).toString("base64url");
  return { value, hash: hashApiKey(value) };
}

export interface NewKey {
  companyId: string;
  userId: string | null;
  username?: string | null;
  operations: Operation[];
  trafficType: TrafficType;
  /** The key making this one (POST /authentication); null or absent for the admin command. */
  createdBy?: string | null;
}

/**
 * Creates a key and returns the 201 body of POST /authentication, the only time the value is seen.
 * With `maxKeys` (MAX_KEYS_PER_ACCOUNT), an account that already holds that many is refused: KEY_LIMIT_REACHED.
 */
export async function createKey(models: AuthModels, input: NewKey, maxKeys?: number): Promise<CreatedApiKeyOut> {
  const { value, hash } = generateKey();
  const values = {
    id: randomUUID(),
    companyId: input.companyId,
    userId: input.userId,
    username: input.username ?? null,
    operations: input.operations,
    trafficType: input.trafficType,
    keyHash: hash,
    createdByKeyId: input.createdBy ?? null,
  };
  const row = maxKeys === undefined ? await insertKey(models, values) : await insertKeyWithin(models, values, maxKeys);
  if (!row) {
    throw new ApiError("KEY_LIMIT_REACHED", `The account holds ${maxKeys} API keys, as many as it may; delete one to create another.`);
  }
  return { ...toApiKeyOut(row), apiKey: value };
}
