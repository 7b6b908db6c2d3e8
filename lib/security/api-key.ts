/**
 * The API key format, once: `pgw_` + 256 random bits (base64url), identified by its SHA-256. The auth
 * service mints and stores keys with it; the gateway recognises and looks them up with it.
 */
import { createHash, hash } from "node:crypto";

export const API_KEY_PREFIX = "pgw_";
export const API_KEY_RE = /^pgw_[A-Za-z0-9_-]{43}$/;

/** SHA-256 of a key's value: the only thing ever stored or sent between services. */
export const hashApiKey = (value: string): Buffer => createHash("sha256").update(value).digest();

/** The same SHA-256 as lowercase hex, in one call (crypto.hash: no Hash object per request). */
export const hashApiKeyHex = (value: string): string => hash("sha256", value, "hex");
