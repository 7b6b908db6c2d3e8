/**
 * Access tokens at rest: AES-256-GCM under SECRETS_KEY (32 bytes), a fresh 96-bit IV per sealing,
 * and additional authenticated data naming the row (account and profile id), so that a ciphertext
 * copied to another row does not open. Every sealed token records the id of the key that wrote it
 * (the first 8 bytes of the key's SHA-256, hex); SECRETS_KEY_PREVIOUS still opens what it wrote,
 * so keys rotate without downtime (`npm run admin -- secrets:rotate` re-seals under the current key).
 * When SECRETS_KEY is unset (embedded mode only; lib/config.ts refuses a cluster node without it)
 * the key is generated once into DATA_DIR/secrets.key (mode 0600).
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto";
import path from "node:path";
import type { Config } from "../../lib/config";
import { keyFileOnce } from "../../lib/key-file";

export const SECRETS_KEY_FILE = "secrets.key";

/** A token as stored: the key that sealed it and the three parts of the GCM output. */
export interface Sealed {
  keyId: string;
  iv: Buffer;
  tag: Buffer;
  ciphertext: Buffer;
}

/** Why a token cannot be opened; its message never carries the token, only ids. */
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

/** The additional authenticated data binding a token to its row. */
export const profileAad = (companyId: string, profileId: string): Buffer => Buffer.from(JSON.stringify(["social_profiles", companyId, profileId]), "utf8");

function decodeKey(base64: string, what: string): Buffer {
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

  /** The token, or SecretUnreadableError (unknown key id, or not authentic under its key and AAD). */
  open(sealed: Sealed, aad: Buffer): string {
    const key = this.keys.get(sealed.keyId);
    if (!key) throw new SecretUnreadableError("UNKNOWN_KEY", sealed.keyId);
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

/** SECRETS_KEY (or the key generated once into DATA_DIR) and SECRETS_KEY_PREVIOUS, as a SecretBox. */
export function secretBox(config: Pick<Config, "secretsKey" | "secretsKeyPrevious" | "dataDir">): SecretBox {
  const current = config.secretsKey
    ? decodeKey(config.secretsKey, "SECRETS_KEY")
    : decodeKey(
        keyFileOnce(config.dataDir, SECRETS_KEY_FILE, () => randomBytes(32).toString("base64")),
        path.join(config.dataDir, SECRETS_KEY_FILE),
      );
  const previous = config.secretsKeyPrevious ? decodeKey(config.secretsKeyPrevious, "SECRETS_KEY_PREVIOUS") : null;
  return new SecretBox(current, previous);
}
