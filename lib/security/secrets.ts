/**
 * Secrets at rest (social-profile access tokens, webhook signing secrets): AES-256-GCM under
 * SECRETS_KEY (32 bytes), a fresh 96-bit IV per sealing, and additional authenticated data naming
 * the row that holds the secret (each owner builds its own), so that a ciphertext copied to another
 * row does not open. Every sealed secret records the id of the key that wrote it (the first 8 bytes
 * of the key's SHA-256, hex); SECRETS_KEY_PREVIOUS only opens, so keys rotate without downtime in
 * two rolls (docs/security.md "Rotating SECRETS_KEY": old + previous new, then new + previous old, then
 * `npm run admin -- secrets:rotate` re-seals under the current key).
 * When SECRETS_KEY is unset (embedded mode only; lib/config.ts refuses a cluster node without it)
 * the key is generated once into DATA_DIR/secrets.key (mode 0600).
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto";
import path from "node:path";
import type { Config } from "../config";
import { keyFileOnce, readKeyFile } from "./key-file";

export const SECRETS_KEY_FILE = "secrets.key";

/** A secret as stored: the key that sealed it and the three parts of the GCM output. */
export interface Sealed {
  keyId: string;
  iv: Buffer;
  tag: Buffer;
  ciphertext: Buffer;
}

/** A sealed secret in one column: IV (12 bytes), tag (16), then the ciphertext; its key id is kept beside it. */
export const packSealed = (s: Sealed): Buffer => Buffer.concat([s.iv, s.tag, s.ciphertext]);

/** The packed column back as a Sealed (a column too short to hold IV and tag opens as not authentic). */
export const unpackSealed = (keyId: string, packed: Buffer): Sealed => ({
  keyId,
  iv: packed.subarray(0, 12),
  tag: packed.subarray(12, 28),
  ciphertext: packed.subarray(28),
});

/** Why a secret cannot be opened; its message never carries the secret, only ids. */
export class SecretUnreadableError extends Error {
  override name = "SecretUnreadableError";
  constructor(
    readonly reason: "UNKNOWN_KEY" | "NOT_AUTHENTIC",
    readonly keyId: string,
  ) {
    super(
      reason === "UNKNOWN_KEY"
        ? `sealed under key ${keyId}, which is neither SECRETS_KEY nor SECRETS_KEY_PREVIOUS`
        : `does not authenticate under key ${keyId} (altered, or copied from another row)`,
    );
  }
}

/** The id recorded with every ciphertext: the first 8 bytes of the key's SHA-256, hex. */
export const keyIdOf = (key: Buffer): string => createHash("sha256").update(key).digest().subarray(0, 8).toString("hex");

/** 32 bytes in standard base64, as SECRETS_KEY and SECRETS_KEY_PREVIOUS are checked by lib/config.ts. */
const KEY_BASE64 = /^[A-Za-z0-9+/]{43}=?$/;

function decodeKey(base64: string, what: string): Buffer {
  if (!KEY_BASE64.test(base64)) throw new Error(`${what} is not 32 bytes in base64 (43 characters of A-Z a-z 0-9 + /, then an optional =)`);
  const key = Buffer.from(base64, "base64");
  if (key.length !== 32) throw new Error(`${what} is not 32 bytes in base64`);
  return key;
}

export class SecretBox {
  readonly currentKeyId: string;
  private readonly keys = new Map<string, Buffer>();

  /** `current` seals and opens; `previous` (a rotation's old key) only opens. */
  constructor(current: Buffer, previous: Buffer | null = null) {
    if (current.length !== 32 || (previous && previous.length !== 32)) throw new Error("AES-256-GCM keys are 32 bytes");
    this.currentKeyId = keyIdOf(current);
    if (previous) this.keys.set(keyIdOf(previous), previous);
    this.keys.set(this.currentKeyId, current);
  }

  seal(plaintext: string, aad: Buffer): Sealed {
    const iv = randomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", this.keys.get(this.currentKeyId)!, iv);
    cipher.setAAD(aad);
    const ciphertext = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
    return { keyId: this.currentKeyId, iv, tag: cipher.getAuthTag(), ciphertext };
  }

  /** The secret, or SecretUnreadableError (unknown key id, or not authentic under its key and AAD). */
  open(sealed: Sealed, aad: Buffer): string {
    const key = this.keys.get(sealed.keyId);
    if (!key) throw new SecretUnreadableError("UNKNOWN_KEY", sealed.keyId);
    if (sealed.iv.length !== 12) throw new SecretUnreadableError("NOT_AUTHENTIC", sealed.keyId);
    try {
      const decipher = createDecipheriv("aes-256-gcm", key, sealed.iv, { authTagLength: 16 });
      decipher.setAAD(aad);
      decipher.setAuthTag(sealed.tag);
      return Buffer.concat([decipher.update(sealed.ciphertext), decipher.final()]).toString("utf8");
    } catch {
      throw new SecretUnreadableError("NOT_AUTHENTIC", sealed.keyId);
    }
  }

  isCurrent(keyId: string): boolean {
    return keyId === this.currentKeyId;
  }
}

type KeyConfig = Pick<Config, "secretsKey" | "secretsKeyPrevious" | "dataDir">;

/**
 * SECRETS_KEY (or the key generated once into DATA_DIR) and SECRETS_KEY_PREVIOUS, as a SecretBox.
 * With `create: false` (the admin command) a missing key file is an error, never a new key.
 */
export function secretBox(config: KeyConfig, opts: { create?: boolean } = {}): SecretBox {
  const file = path.join(config.dataDir, SECRETS_KEY_FILE);
  let current: Buffer;
  if (config.secretsKey) current = decodeKey(config.secretsKey, "SECRETS_KEY");
  else {
    const stored = opts.create === false ? readKeyFile(file) : keyFileOnce(config.dataDir, SECRETS_KEY_FILE, () => randomBytes(32).toString("base64"));
    if (stored === null) throw new Error(`SECRETS_KEY is not set and ${file} does not exist`);
    current = decodeKey(stored, file);
  }
  const previous = config.secretsKeyPrevious ? decodeKey(config.secretsKeyPrevious, "SECRETS_KEY_PREVIOUS") : null;
  return new SecretBox(current, previous);
}

/**
 * Why `secrets:rotate` must not run with these settings, or null. It never creates a key: SECRETS_KEY
 * is required with DATABASE_URL or SECRETS_KEY_PREVIOUS (a key generated here would re-encrypt every
 * secret under a key no node has); otherwise (embedded) DATA_DIR's key file must already exist. The
 * two keys must differ.
 */
export function rotationKeyProblem(config: KeyConfig & Pick<Config, "databaseUrl">): string | null {
  if (!config.secretsKey) {
    if (config.databaseUrl)
      return "SECRETS_KEY is not set; with DATABASE_URL, secrets:rotate needs the key every profiles and notifier node uses (SECRETS_KEY, and SECRETS_KEY_PREVIOUS)";
    if (config.secretsKeyPrevious) return "SECRETS_KEY_PREVIOUS is set but SECRETS_KEY is not; set SECRETS_KEY to the new key";
    let stored: string | null;
    try {
      stored = readKeyFile(path.join(config.dataDir, SECRETS_KEY_FILE));
    } catch (err) {
      return (err as Error).message;
    }
    if (stored === null) return `SECRETS_KEY is not set and ${path.join(config.dataDir, SECRETS_KEY_FILE)} does not exist; secrets:rotate never creates a key`;
    return null;
  }
  if (config.secretsKeyPrevious && Buffer.from(config.secretsKey, "base64").equals(Buffer.from(config.secretsKeyPrevious, "base64"))) {
    return "SECRETS_KEY and SECRETS_KEY_PREVIOUS are the same key; SECRETS_KEY must be the new key, SECRETS_KEY_PREVIOUS the old one";
  }
  return null;
}
