import type { Sequelize } from "sequelize";

/**
 * Campaigns and their recipients (issue 17).
 *
 * `campaigns`: one row per campaign; the row is also the send job of lib/jobs/jobs.ts (`node_id` holds
 * it, `leased_until` ends the hold), so any campaigns node starts a SCHEDULED campaign when due and
 * takes over a SENDING one whose node died. `sent`/`failed` are the progress counters, kept in the
 * same statement that records the recipients' outcomes.
 *
 * `campaign_recipients`: the audience snapshot, one row per (campaign, contact), written by one
 * INSERT ... SELECT at confirm. It carries what the message needs (number, the placeholder values
 * the text names, whether it goes with simulation: true), so sending never reads contacts again.
 * PENDING rows are served by a partial index in the order the sender takes them (due time, contact).
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE TABLE campaigns (
      id                    uuid PRIMARY KEY,
      company_id            text NOT NULL,
      name                  text NOT NULL,
      channel               text NOT NULL CHECK (channel IN ('SMS', 'RCS', 'WHATSAPP')),
      status                text NOT NULL DEFAULT 'DRAFT' CHECK (status IN ('DRAFT', 'SCHEDULED', 'SENDING', 'PAUSED', 'SENT', 'FAILED', 'CANCELLED')),
      contact_list_ids      bigint[] NOT NULL,
      text                  text NOT NULL,
      media_ids             text[] NOT NULL DEFAULT '{}',
      scheduled_at          timestamptz,
      send_rate_per_second  integer,
      audience              integer NOT NULL DEFAULT 0,
      sent                  integer NOT NULL DEFAULT 0,
      failed                integer NOT NULL DEFAULT 0,
      pause_reason          text,
      media_released        boolean NOT NULL DEFAULT true,
      node_id               text,
      leased_until          timestamptz,
      created_at            timestamptz NOT NULL DEFAULT now(),
      updated_at            timestamptz NOT NULL DEFAULT now(),
      confirmed_at          timestamptz,
      completed_at          timestamptz
    );
    CREATE INDEX campaigns_company ON campaigns (company_id, created_at, id);
    CREATE INDEX campaigns_due ON campaigns (scheduled_at) WHERE status IN ('SCHEDULED', 'SENDING');
    CREATE INDEX campaigns_unreleased ON campaigns (id) WHERE NOT media_released;

    CREATE TABLE campaign_recipients (
      campaign_id   uuid NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
      contact_id    uuid NOT NULL,
      destination   text NOT NULL,
      vars          jsonb NOT NULL DEFAULT '{}'::jsonb,
      simulation    boolean NOT NULL DEFAULT false,
      status        text NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'SENT', 'FAILED')),
      attempts      smallint NOT NULL DEFAULT 0,
      due_at        timestamptz NOT NULL DEFAULT now(),
      error         text,
      sent_at       timestamptz,
      PRIMARY KEY (campaign_id, contact_id)
    );
    CREATE INDEX campaign_recipients_pending ON campaign_recipients (campaign_id, due_at, contact_id) WHERE status = 'PENDING';
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`DROP TABLE campaign_recipients; DROP TABLE campaigns;`);
}
