/**
 * API keys on the wire: what the auth service accepts and answers (spec part 5, contract section 3).
 */
import { OPERATIONS, TRAFFIC_TYPES, type Operation, type TrafficType } from "../../lib/http/api";
import { pageSchema, pagingProperties, type Page, type PageIn } from "../../lib/http/paging";
import type { PropertiesOf, SchemaOf } from "../../lib/http/schema-type";
import { UUID_PATTERN } from "../../lib/http/validator";

export const ID_PATTERN = "^[A-Za-z0-9._@:-]{1,128}$";

export interface ApiKeyOut {
  id: string;
  companyId: string;
  userId: string | null;
  username: string | null;
  operations: Operation[];
  trafficType: TrafficType;
  createdAt: string;
  createdByKeyId: string | null;
}
export interface CreatedApiKeyOut extends ApiKeyOut {
  apiKey: string;
}
export interface CreateKeyIn {
  operations: Operation[];
}
export interface ListKeysIn extends PageIn<"createdAt"> {
  userId?: string;
}
export interface KeyIdIn {
  id: string;
}
export interface VerifyIn {
  keyHash: string;
}
/** Who a key is, as the gateway caches it. */
export interface Principal {
  keyId: string;
  companyId: string;
  userId: string | null;
  username: string | null;
  operations: Operation[];
  trafficType: TrafficType;
  keyCreatedAt: string;
  /** The key that created this one (null: made by the admin command). */
  keyCreatedByKeyId: string | null;
}

const operationsSchema = {
  type: "array",
  items: { type: "string", enum: [...OPERATIONS] },
  minItems: 1,
  uniqueItems: true,
  examples: [["SMS", "AUTHENTICATION"]],
} satisfies SchemaOf<Operation[]>;

const apiKeyProperties = {
  id: { type: "string", format: "uuid" },
  companyId: { type: "string", examples: ["acme"] },
  userId: { type: "string", nullable: true, examples: ["user-42"] },
  username: { type: "string", nullable: true, examples: [null] },
  operations: operationsSchema,
  trafficType: { type: "string", enum: [...TRAFFIC_TYPES] },
  createdAt: { type: "string", format: "date-time" },
  createdByKeyId: {
    type: "string",
    format: "uuid",
    nullable: true,
    description: "The key that created this key through POST /authentication; null for keys made by the operator's admin command.",
  },
} satisfies PropertiesOf<ApiKeyOut>;

export const apiKeyOut = {
  $id: "ApiKey",
  type: "object",
  additionalProperties: false,
  required: ["id", "companyId", "userId", "username", "operations", "trafficType", "createdAt", "createdByKeyId"],
  properties: apiKeyProperties,
} satisfies SchemaOf<ApiKeyOut>;

export const createdApiKeyOut = {
  $id: "CreatedApiKey",
  type: "object",
  additionalProperties: false,
  required: [...apiKeyOut.required, "apiKey"],
  properties: {
    ...apiKeyProperties,
    apiKey: {
      type: "string",
      pattern: "^pgw_[A-Za-z0-9_-]{43}$",
      description: "The full key value. Shown only in this answer; store it safely.",
      examples: ["pgw_3q2-7wEvfB4S1u2z0tOaE3wY8yVhQnRk5mN6pL7oJ9c"],
    },
  },
} satisfies SchemaOf<CreatedApiKeyOut>;

export const apiKeyPage = pageSchema("ApiKeyPage", apiKeyOut) satisfies SchemaOf<Page<ApiKeyOut>>;

export const createKeyIn = {
  $id: "CreateApiKeyIn",
  type: "object",
  additionalProperties: false,
  required: ["operations"],
  properties: { operations: { ...operationsSchema, description: "A non-empty subset of the calling key's operations." } },
} satisfies SchemaOf<CreateKeyIn>;

export const listKeysIn = {
  $id: "ListApiKeysIn",
  type: "object",
  additionalProperties: false,
  properties: {
    userId: { type: "string", pattern: ID_PATTERN, description: "Only keys created by or assigned to this user.", examples: ["user-42"] },
    ...pagingProperties(["createdAt"], "createdAt", "desc"),
  },
} satisfies SchemaOf<ListKeysIn>;

export const keyIdIn = {
  $id: "ApiKeyIdIn",
  type: "object",
  additionalProperties: false,
  required: ["id"],
  // A plain pattern: ajv's "uuid" format also takes "urn:uuid:...", which PostgreSQL's uuid does not.
  properties: {
    id: {
      type: "string",
      pattern: UUID_PATTERN,
      examples: ["0b6e4c1e-8a8c-4f5e-9a0e-3d2f1c4b5a69"],
    },
  },
} satisfies SchemaOf<KeyIdIn>;

export const verifyIn = {
  $id: "VerifyApiKeyIn",
  type: "object",
  additionalProperties: false,
  required: ["keyHash"],
  properties: { keyHash: { type: "string", pattern: "^[0-9a-f]{64}$" } },
} satisfies SchemaOf<VerifyIn>;
