/**
 * Signed webhooks (contract section 8), in the form of the Standard Webhooks specification, which
 * the `standardwebhooks` and `svix` libraries verify:
 * - A secret is `whsec_` + 32 random bytes in base64; the HMAC key is those 32 bytes. It is sealed
 *   under SECRETS_KEY (lib/security/secrets.ts) bound to its account, and shown to the partner only in the
 *   answer that made it.
 * - A signed delivery carries `webhook-id` (derived from the event's identity: the same on every
 *   attempt, on every notifier), `webhook-timestamp` (Unix seconds of this attempt) and
 *   `webhook-signature`: `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`, one per secret
 *   in force (the current one first; during a rotation's overlap also the one it replaced),
 *   separated by spaces.
 * - The hot path stays cheap: unsigned webhooks cost nothing here, and a notifier keeps an account's
 *   opened keys for KEYS_TTL_MS, trusting them while the claim's `signing_version` is not newer.
 */
import { createHash, createHmac, randomBytes } from "node:crypto";
import type { Service } from "moleculer";
import type { Sequelize } from "sequelize";
import type { Config } from "../../lib/config";
import { packSealed, secretBox, SecretUnreadableError, unpackSealed, type SecretBox } from "../../lib/security/secrets";
import { signingKeys, type SigningKeysRow } from "./notifier.queries";

export const SECRET_PREFIX = "whsec_";
/** How long a notifier keeps an account's opened keys at most (a newer signing_version replaces them at once). */
const KEYS_TTL_MS = 60_000;
const KEYS_MAX = 10_000;

/** A new secret: `whsec_` and 32 random bytes in base64. */
export const newSigningSecret = (): string => SECRET_PREFIX + randomBytes(32).toString("base64");

/** The additional authenticated data binding a sealed secret to its account's webhook. */
export const signingAad = (companyId: string): Buffer => Buffer.from(JSON.stringify(["webhooks", companyId]), "utf8");

/** A secret as the webhooks table keeps it: the sealing key's id, and IV, tag and ciphertext in one column. */
export interface SealedSecret {
  keyId: string;
  sealed: Buffer;
}

/**
 * The webhook-id of an event: `msg_` and a hash of the account and the event's identity (channel,
 * eventType, messageId, numPart: what spec part 6 makes the idempotency key), so every attempt of
 * an event, on any notifier, carries the same one, and no outbox sequence shows through.
 */
export const webhookId = (companyId: string, identity: string): string =>
  "msg_" + createHash("sha256").update(companyId).update("\n").update(identity).digest("base64url").slice(0, 32);

/** What signs one event: its webhook-id and the HMAC keys in force (current first). */
export interface Signing {
  id: string;
  keys: readonly Buffer[];
}

/** The Standard Webhooks headers of one attempt of `body`, at `seconds` (Unix time). */
export function signatureHeaders(s: Signing, body: string, seconds: number = Math.floor(Date.now() / 1000)): Record<string, string> {
  const timestamp = String(seconds);
  const signatures: string[] = [];
  for (const key of s.keys) signatures.push("v1," + createHmac("sha256", key).update(`${s.id}.${timestamp}.`).update(body).digest("base64"));
  return { "webhook-id": s.id, "webhook-timestamp": timestamp, "webhook-signature": signatures.join(" ") };
}

/** An account's opened keys: the current one, and the one a rotation replaced until `previousUntil` (epoch ms). */
interface Keys {
  version: number;
  current: Buffer | null;
  previous: Buffer | null;
  previousUntil: number;
  /** Why the current secret cannot be opened (the attempt is not sent), or null. */
  error: string | null;
  loadedAt: number;
}

/** An event as the claim answers it: `signing` is the webhook's signing_version (null: unsigned), `identity` the event's. */
export interface SignedEvent {
  company_id: string;
  signing: number | null;
  identity: string | null;
}

const UNREADABLE = "not sent: the webhook's signing secret cannot be read on our side; a new one is made with POST /webhooks/delivery-status/secret";

export class Signer {
  private boxValue: SecretBox | null = null;
  private readonly keys = new Map<string, Keys | Promise<Keys>>();

  constructor(private readonly o: { config: Config; sequelize: Sequelize; logger: Service["logger"] }) {}

  /** SECRETS_KEY's box, made on first use (a notifier that never meets a signed webhook never touches the key file). */
  private get box(): SecretBox {
    return (this.boxValue ??= secretBox(this.o.config));
  }

  seal(companyId: string, secret: string): SealedSecret {
    const s = this.box.seal(secret, signingAad(companyId));
    return { keyId: s.keyId, sealed: packSealed(s) };
  }

  /**
   * How to sign `ev`: null for an unsigned event (or a webhook no longer signed), `{ error }` when its
   * secret cannot be opened. Answered at once from the keys held when they are fresh enough.
   */
  signing(ev: SignedEvent): Signing | null | { error: string } | Promise<Signing | null | { error: string }> {
    if (ev.signing === null) return null;
    const held = this.keys.get(ev.company_id);
    if (held && !(held instanceof Promise) && held.version >= ev.signing && Date.now() - held.loadedAt < KEYS_TTL_MS) return this.of(ev, held);
    return this.load(ev.company_id, held instanceof Promise ? held : null).then((k) => this.of(ev, k));
  }

  private of(ev: SignedEvent, k: Keys): Signing | null | { error: string } {
    if (k.error) return { error: k.error };
    if (!k.current) return null;
    const keys = k.previous && Date.now() < k.previousUntil ? [k.current, k.previous] : [k.current];
    return { id: webhookId(ev.company_id, ev.identity ?? ""), keys };
  }

  /** Reads and opens the account's secrets (one read at a time per account). */
  private load(companyId: string, pending: Promise<Keys> | null): Promise<Keys> {
    if (pending) return pending;
    const p = signingKeys(this.o.sequelize, companyId).then(
      (row) => {
        const k = this.open(companyId, row);
        if (this.keys.size >= KEYS_MAX) this.keys.clear();
        this.keys.set(companyId, k);
        return k;
      },
      (err) => {
        this.keys.delete(companyId);
        throw err;
      },
    );
    this.keys.set(companyId, p);
    return p;
  }

  private open(companyId: string, row: SigningKeysRow | null): Keys {
    const k: Keys = { version: row?.signing_version ?? 0, current: null, previous: null, previousUntil: 0, error: null, loadedAt: Date.now() };
    if (!row?.signing_secret || !row.signing_key_id) return k;
    try {
      k.current = this.key(companyId, row.signing_key_id, row.signing_secret);
    } catch (err) {
      if (!(err instanceof SecretUnreadableError)) throw err;
      this.o.logger.error({ companyId, keyId: err.keyId, reason: err.reason }, `webhook signing secret unreadable: ${err.message}`);
      k.error = UNREADABLE;
      return k;
    }
    if (row.previous_signing_secret && row.previous_signing_key_id && row.previous_until !== null) {
      try {
        k.previous = this.key(companyId, row.previous_signing_key_id, row.previous_signing_secret);
        k.previousUntil = row.previous_until;
      } catch (err) {
        if (!(err instanceof SecretUnreadableError)) throw err;
        // The new secret still signs; only the old one's signature is missing.
        this.o.logger.warn({ companyId, keyId: err.keyId, reason: err.reason }, `previous webhook signing secret unreadable: ${err.message}`);
      }
    }
    return k;
  }

  /** The HMAC key of a sealed secret: the 32 bytes after `whsec_`. */
  private key(companyId: string, keyId: string, sealed: Buffer): Buffer {
    const secret = this.box.open(unpackSealed(keyId, sealed), signingAad(companyId));
    return Buffer.from(secret.slice(SECRET_PREFIX.length), "base64");
  }
}
