import type { Sequelize } from "sequelize";

/**
 * Webhook delivery (issue 6).
 *
 * `outbox_events` becomes the durable schedule: a row is due at `due_at`; a notifier claims it by
 * setting `leased_until` past the attempt's time-outs (the lease) and stamping `claim_token`, under
 * `FOR UPDATE SKIP LOCKED`, so replicas never claim one row twice and a row whose claimant died
 * becomes due again when the lease runs out. `attempts` counts the attempts made. A delivered,
 * exhausted or expired event is deleted; the outbox holds only what is still to be sent. The lease
 * columns are in no index and pages keep 20 % free, so a claim is a HOT update (no index writes).
 * Claims walk the accounts that have a webhook and, per account, its earliest due rows: the index
 * (company_id, due_at, id) serves that (it replaces (due_at, id), which nothing reads).
 *
 * `webhook_attempts`: one row per attempt, what a partner sees at GET
 * /webhooks/delivery-status/attempts (newest first), kept 7 days (BRIN on attempted_at).
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    ALTER TABLE outbox_events ADD COLUMN claim_token text, ADD COLUMN leased_until timestamptz;
    ALTER TABLE outbox_events SET (fillfactor = 80);
    DROP INDEX outbox_events_due;
    CREATE INDEX outbox_events_company_due ON outbox_events (company_id, due_at, id);

    CREATE TABLE webhook_attempts (
      id              bigserial PRIMARY KEY,
      company_id      text NOT NULL,
      channel         text NOT NULL,
      event_type      text NOT NULL,
      message_id      text NOT NULL,
      num_part        smallint,
      attempt         smallint NOT NULL,
      attempted_at    timestamptz NOT NULL,
      http_status     smallint,
      duration_ms     integer,
      error           text,
      next_attempt_at timestamptz,
      outcome         text NOT NULL CHECK (outcome IN ('DELIVERED', 'RETRYING', 'FAILED', 'EXPIRED'))
    );
    CREATE INDEX webhook_attempts_company ON webhook_attempts (company_id, attempted_at DESC, id DESC);
    CREATE INDEX webhook_attempts_attempted ON webhook_attempts USING brin (attempted_at);
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    DROP TABLE webhook_attempts;
    DROP INDEX outbox_events_company_due;
    CREATE INDEX outbox_events_due ON outbox_events (due_at, id);
    ALTER TABLE outbox_events RESET (fillfactor);
    ALTER TABLE outbox_events DROP COLUMN claim_token, DROP COLUMN leased_until;
  `);
}
