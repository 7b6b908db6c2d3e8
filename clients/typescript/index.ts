/**
 * A typed client of the Partner Messaging Platform API: openapi-fetch over the types that
 * openapi-typescript generates from openapi.json (schema.ts, rewritten by `npm run openapi`).
 * Paths, parameters, bodies and answers are checked by the compiler; errors are the API's RFC 9457
 * problems, typed as `Problem`.
 */
import createClient, { type Client, type ClientOptions } from "openapi-fetch";
import type { components, operations, paths } from "./schema.js";

export type { components, operations, paths };
/** Every schema of the document by name: `Schemas["Contact"]`, `Schemas["ContactListIn"]`, ... */
export type Schemas = components["schemas"];
/** The body of every 4xx/5xx answer. */
export type Problem = Schemas["Problem"];
export type PartnerClient = Client<paths>;

/** Where the API lives under the gateway's address. */
export const API_PREFIX = "/api/partner-gateway/v1";

export interface PartnerClientOptions extends Omit<ClientOptions, "baseUrl"> {
  /** The gateway's address, e.g. `http://localhost:3000` (the API prefix is added). */
  baseUrl: string;
  /** An API key (`pgw_...`), sent as `X-API-Key` with every request. */
  apiKey: string;
}

/** A client whose every request carries the key. */
export function createPartnerClient({ baseUrl, apiKey, headers, ...options }: PartnerClientOptions): PartnerClient {
  return createClient<paths>({
    ...options,
    baseUrl: `${baseUrl.replace(/\/+$/, "")}${API_PREFIX}`,
    headers: { ...(headers as Record<string, string> | undefined), "X-API-Key": apiKey },
  });
}
