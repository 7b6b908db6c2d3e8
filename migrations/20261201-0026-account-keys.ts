import type { Sequelize } from "sequelize";

/**
 * Every primary, unique and foreign key carries `company_id` (issue 33 item 3), so that the schema can
 * run on Citus with `company_id` as the distribution column (docs/scaling.md gives the calls). Rows
 * stay where they are: keys are rebuilt around them.
 *
 * - Tables keyed by `id` alone get a key of `id` and `company_id`. Where a background job addresses a
 *   row by its id alone (a claim, a heartbeat, a release: the job tables, the inbox's, media,
 *   profiles' rotation), the key is `(id, company_id)`: the key's own index serves a lookup by id, as
 *   before. A separate index on `id` would cost the outbox a fifth of its notifier throughput
 *   (bench:notifier). On Citus such a statement fans out to every shard, as docs/scaling.md says.
 *   `contacts` and `contact_lists` are keyed `(company_id, id)`, because every statement on them
 *   names the account. A foreign key matches a key by its set of columns, so either order serves.
 * - `outbox_events` keeps its key `(id)`. Keyed `(id, company_id)` or `(company_id, id)`, the notifier
 *   delivered a 100,000-event backlog at half the rate, with PostgreSQL's CPU per event four times
 *   as high (bench:notifier, same run; the cause is not found yet). docs/scaling.md lists it as the
 *   one key still to change before Citus.
 * - `contact_list_members`: unique `(company_id, list_id, contact_id)`, its foreign keys on
 *   `(company_id, list_id)` and `(company_id, contact_id)`.
 * - `campaign_recipients` gains `company_id` (filled from its campaign), its key becomes
 *   `(campaign_id, contact_id, company_id)`: the sender's claims, heartbeats and give-backs and a
 *   confirmed campaign's preview address recipients by campaign (and contact), and the key's own
 *   index serves them as before.
 * - The foreign keys of recipients, contact marks, thread messages and media references name the
 *   account too (same ON DELETE rules).
 */
const BY_ID = [
  "contact_imports",
  "export_jobs",
  "media",
  "social_profiles",
  "conversations",
  "conversation_messages",
  "campaigns",
  "campaign_contact_marks",
  "contact_list_members",
] as const;
const BY_ACCOUNT_ONLY = ["contacts", "contact_lists"] as const;

/** The foreign keys that point at a rekeyed table, as they were and as they become. */
const FOREIGN = [
  { table: "contact_list_members", name: "contact_list_members_contact_id_fkey", column: "contact_id", to: "contacts", rule: "CASCADE" },
  { table: "contact_list_members", name: "contact_list_members_list_id_fkey", column: "list_id", to: "contact_lists", rule: "CASCADE" },
  { table: "media_references", name: "media_references_media_id_fkey", column: "media_id", to: "media", rule: "RESTRICT" },
  { table: "campaign_recipients", name: "campaign_recipients_campaign_id_fkey", column: "campaign_id", to: "campaigns", rule: "CASCADE" },
  { table: "conversation_messages", name: "conversation_messages_conversation_id_fkey", column: "conversation_id", to: "conversations", rule: "CASCADE" },
  { table: "campaign_contact_marks", name: "campaign_contact_marks_campaign_id_fkey", column: "campaign_id", to: "campaigns", rule: "CASCADE" },
] as const;

export async function up(sequelize: Sequelize): Promise<void> {
  const sql: string[] = [];
  for (const f of FOREIGN) sql.push(`ALTER TABLE ${f.table} DROP CONSTRAINT ${f.name}`);
  sql.push(
    `ALTER TABLE campaign_recipients ADD COLUMN company_id text`,
    `UPDATE campaign_recipients r SET company_id = c.company_id FROM campaigns c WHERE c.id = r.campaign_id`,
    `ALTER TABLE campaign_recipients ALTER COLUMN company_id SET NOT NULL`,
    `ALTER TABLE campaign_recipients DROP CONSTRAINT campaign_recipients_pkey`,
    `ALTER TABLE campaign_recipients ADD PRIMARY KEY (campaign_id, contact_id, company_id)`,
    `ALTER TABLE contact_list_members DROP CONSTRAINT contact_list_members_list_id_contact_id_key`,
    `ALTER TABLE contact_list_members ADD CONSTRAINT contact_list_members_key UNIQUE (company_id, list_id, contact_id)`,
  );
  for (const t of BY_ID) sql.push(`ALTER TABLE ${t} DROP CONSTRAINT ${t}_pkey`, `ALTER TABLE ${t} ADD PRIMARY KEY (id, company_id)`);
  for (const t of BY_ACCOUNT_ONLY) sql.push(`ALTER TABLE ${t} DROP CONSTRAINT ${t}_pkey`, `ALTER TABLE ${t} ADD PRIMARY KEY (company_id, id)`);
  for (const f of FOREIGN)
    sql.push(`ALTER TABLE ${f.table} ADD CONSTRAINT ${f.name} FOREIGN KEY (company_id, ${f.column}) REFERENCES ${f.to} (company_id, id) ON DELETE ${f.rule}`);
  // One query string: run as one implicit transaction, all of it or nothing.
  await sequelize.query(sql.join(";\n"));
}

export async function down(sequelize: Sequelize): Promise<void> {
  const sql: string[] = [];
  for (const f of FOREIGN) sql.push(`ALTER TABLE ${f.table} DROP CONSTRAINT ${f.name}`);
  for (const t of [...BY_ID, ...BY_ACCOUNT_ONLY]) sql.push(`ALTER TABLE ${t} DROP CONSTRAINT ${t}_pkey`, `ALTER TABLE ${t} ADD PRIMARY KEY (id)`);
  sql.push(
    `ALTER TABLE contact_list_members DROP CONSTRAINT contact_list_members_key`,
    `ALTER TABLE contact_list_members ADD CONSTRAINT contact_list_members_list_id_contact_id_key UNIQUE (list_id, contact_id)`,
    `ALTER TABLE campaign_recipients DROP CONSTRAINT campaign_recipients_pkey`,
    `ALTER TABLE campaign_recipients ADD PRIMARY KEY (campaign_id, contact_id)`,
    `ALTER TABLE campaign_recipients DROP COLUMN company_id`,
  );
  for (const f of FOREIGN) sql.push(`ALTER TABLE ${f.table} ADD CONSTRAINT ${f.name} FOREIGN KEY (${f.column}) REFERENCES ${f.to} (id) ON DELETE ${f.rule}`);
  await sequelize.query(sql.join(";\n"));
}
