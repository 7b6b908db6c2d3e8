/**
 * Key values and the one way keys are created, shared by the auth service and the admin command
 * (through auth.contract.ts). A key is `pgw_` + 256 random bits (base64url); only its SHA-256 is
 * stored. A fast hash is right here: the value has 256 bits of entropy, so there is nothing to
 * stretch, and lookups stay O(1).
 */
import { randomBytes, randomUUID } from "node:crypto";
import { API_KEY_PREFIX, hashApiKey } from "../../lib/api-key";
import type { Operation, TrafficType } from "../../lib/api";
import { toApiKeyOut, type AuthModels } from "./auth.models";
import { insertKey } from "./auth.queries";
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

/** Creates a key and returns the 201 body of POST /authentication, the only time the value is seen. */
export async function createKey(models: AuthModels, input: NewKey): Promise<CreatedApiKeyOut> {
  const { value, hash } = generateKey();
  const row = await insertKey(models, {
    id: randomUUID(),
    companyId: input.companyId,
    userId: input.userId,
    username: input.username ?? null,
    operations: input.operations,
    trafficType: input.trafficType,
    keyHash: hash,
    createdByKeyId: input.createdBy ?? null,
  });
  return { ...toApiKeyOut(row), apiKey: value };
}
