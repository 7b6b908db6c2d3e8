/**
 * Download URLs: `PUBLIC_BASE_URL` + `/api/partner-gateway/v1/exports/{id}/download/{expires}/{signature}`,
 * where `signature` is the HMAC-SHA256 (base64url) of the id, the job's run and the expiry (Unix
 * seconds). The run ties a URL to one file: regenerating the export makes every earlier URL invalid.
 * The key is EXPORT_SIGNING_KEY, or one generated once into DATA_DIR (0600) when it is unset.
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import path from "node:path";
import { API_PREFIX } from "../../lib/http/api";
import type { Config } from "../../lib/config";
import { keyFileOnce } from "../../lib/security/key-file";

export const KEY_FILE = "export-signing.key";

/** The configured key, or the one in DATA_DIR (made by whichever process comes first). */
export function signingKey(config: Config): Buffer {
  if (config.exportSigningKey) return Buffer.from(config.exportSigningKey, "utf8");
  const key = keyFileOnce(config.dataDir, KEY_FILE, () => randomBytes(32).toString("base64url"));
  if (key.length < 32) {
    throw new Error(`${path.join(config.dataDir, KEY_FILE)} holds no usable key (fewer than 32 characters); delete it to have one generated`);
  }
  return Buffer.from(key, "utf8");
}

export class UrlSigner {
  constructor(
    private readonly key: Buffer,
    private readonly baseUrl: string,
  ) {}

  private mac(exportId: string, run: number, expires: string): Buffer {
    return createHmac("sha256", this.key).update(`export:${exportId}:${run}:${expires}`).digest();
  }

  /** The URL of run `run` of an export, valid until `expiresAt` (whole seconds). */
  url(exportId: string, run: number, expiresAt: Date): string {
    const expires = String(Math.floor(expiresAt.getTime() / 1000));
    const signature = this.mac(exportId, run, expires).toString("base64url");
    return `${this.baseUrl.replace(/\/+$/, "")}${API_PREFIX}/exports/${exportId}/download/${expires}/${signature}`;
  }

  /** Whether `signature` is this key's for exactly these id, run and expiry (constant time). */
  verify(exportId: string, run: number, expires: string, signature: string): boolean {
    if (!/^\d{1,12}$/.test(expires) || !/^[A-Za-z0-9_-]{43}$/.test(signature)) return false;
    // Compared as text: base64url has spare bits in its last character, so decoding would accept altered signatures.
    const given = Buffer.from(signature, "latin1");
    const expected = Buffer.from(this.mac(exportId, run, expires).toString("base64url"), "latin1");
    return given.length === expected.length && timingSafeEqual(given, expected);
  }
}
