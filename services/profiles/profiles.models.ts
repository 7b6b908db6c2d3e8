/** The profiles service's rows (social_profiles, migrations/20261125-0011-profiles) and their mapper. */
import type { Sealed } from "../../lib/security/secrets";
import type { Network, ProfileOut, ProfileStatus } from "./profiles.schemas";

/** The columns a partner reads (never the sealed token). */
export const PROFILE_COLUMNS = "id, company_id, network, external_id, display_name, status, created_at, updated_at, token_updated_at";
/** The sealed token's columns. */
export const TOKEN_COLUMNS = "token_key_id, token_iv, token_tag, token_ciphertext";

export interface ProfileRow {
  id: string;
  company_id: string;
  network: Network;
  external_id: string;
  display_name: string | null;
  status: ProfileStatus;
  created_at: Date;
  updated_at: Date;
  token_updated_at: Date;
}

export interface TokenRow {
  id: string;
  company_id: string;
  token_key_id: string;
  token_iv: Buffer;
  token_tag: Buffer;
  token_ciphertext: Buffer;
}

/** The additional authenticated data binding a token to its row (lib/security/secrets.ts seals it). */
export const profileAad = (companyId: string, profileId: string): Buffer => Buffer.from(JSON.stringify(["social_profiles", companyId, profileId]), "utf8");

export const toProfileOut = (r: ProfileRow): ProfileOut => ({
  id: r.id,
  network: r.network,
  externalId: r.external_id,
  displayName: r.display_name,
  status: r.status,
  createdAt: new Date(r.created_at).toISOString(),
  updatedAt: new Date(r.updated_at).toISOString(),
  tokenUpdatedAt: new Date(r.token_updated_at).toISOString(),
});

export const toSealed = (r: TokenRow): Sealed => ({ keyId: r.token_key_id, iv: r.token_iv, tag: r.token_tag, ciphertext: r.token_ciphertext });
