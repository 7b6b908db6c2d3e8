import type { Sequelize } from "sequelize";

/**
 * Signed webhooks (contract section 8, issue 31): a webhook with a signing secret signs its
 * deliveries in the Standard Webhooks form. The secret is never stored in clear: `signing_secret`
 * is its AES-256-GCM sealing under the key whose id is `signing_key_id` (lib/security/secrets.ts; IV, tag and
 * ciphertext in one column), bound to the account. A rotation keeps the secret it replaced as
 * `previous_signing_*` until `previous_signing_until` (deliveries carry both signatures meanwhile).
 * `signing_version` is taken from a sequence at every change of the secrets, so it only grows, even
 * across a webhook deleted and registered again: claims read it, so a notifier knows when the keys
 * it holds in memory are stale without reading the secret for every event.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE SEQUENCE webhook_signing_versions AS integer;
    ALTER TABLE webhooks
      ADD COLUMN signing_version integer NOT NULL DEFAULT 0,
      ADD COLUMN signing_key_id text,
      ADD COLUMN signing_secret bytea,
      ADD COLUMN previous_signing_key_id text,
      ADD COLUMN previous_signing_secret bytea,
      ADD COLUMN previous_signing_until timestamptz,
      ADD CONSTRAINT webhooks_signing_sealed CHECK ((signing_key_id IS NULL) = (signing_secret IS NULL)),
      ADD CONSTRAINT webhooks_previous_signing_sealed CHECK (
        (previous_signing_key_id IS NULL) = (previous_signing_secret IS NULL)
        AND (previous_signing_secret IS NULL) = (previous_signing_until IS NULL)
        AND (previous_signing_secret IS NULL OR signing_secret IS NOT NULL));
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    ALTER TABLE webhooks
      DROP CONSTRAINT webhooks_previous_signing_sealed,
      DROP CONSTRAINT webhooks_signing_sealed,
      DROP COLUMN previous_signing_until,
      DROP COLUMN previous_signing_secret,
      DROP COLUMN previous_signing_key_id,
      DROP COLUMN signing_secret,
      DROP COLUMN signing_key_id,
      DROP COLUMN signing_version;
    DROP SEQUENCE webhook_signing_versions;
  `);
}
