import type { Sequelize } from "sequelize";

/**
 * Contacts, custom field declarations, contact lists and memberships (issue 4). Phone numbers are
 * E.164 and emails lower-case, each unique within an account. `full_name` is derived, for sorting
 * and filtering; trigram indexes serve `search` and `fullName` on large accounts.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE EXTENSION IF NOT EXISTS pg_trgm;

    CREATE TABLE contacts (
      id                      uuid PRIMARY KEY,
      company_id              text NOT NULL,
      first_name              text,
      last_name               text,
      full_name               text GENERATED ALWAYS AS (btrim(coalesce(first_name, '') || ' ' || coalesce(last_name, ''))) STORED,
      gender                  text CHECK (gender IN ('MALE', 'FEMALE', 'OTHER')),
      phone_number            text,
      email                   text,
      is_valid                boolean GENERATED ALWAYS AS (phone_number IS NOT NULL OR email IS NOT NULL) STORED,
      custom_fields           jsonb NOT NULL DEFAULT '{}'::jsonb,
      is_test                 boolean NOT NULL DEFAULT false,
      communication_supported text[] NOT NULL DEFAULT '{}',
      last_contact_type       text,
      last_campaign_type      text,
      created_at              timestamptz NOT NULL DEFAULT now(),
      updated_at              timestamptz NOT NULL DEFAULT now(),
      CHECK (phone_number IS NOT NULL OR email IS NOT NULL)
    );
    CREATE UNIQUE INDEX contacts_company_phone ON contacts (company_id, phone_number) WHERE phone_number IS NOT NULL;
    CREATE UNIQUE INDEX contacts_company_email ON contacts (company_id, email) WHERE email IS NOT NULL;
    -- INCLUDE full_name: the sort (and a deep OFFSET) is then an index-only scan.
    CREATE INDEX contacts_company_full_name ON contacts (company_id, lower(nullif(full_name, '')), id) INCLUDE (full_name);
    CREATE INDEX contacts_company_created ON contacts (company_id, created_at, id);
    CREATE INDEX contacts_full_name_trgm ON contacts USING gin (full_name gin_trgm_ops);
    CREATE INDEX contacts_search_trgm ON contacts USING gin ((coalesce(phone_number, '') || ' ' || coalesce(email, '')) gin_trgm_ops);
    CREATE INDEX contacts_custom_fields ON contacts USING gin (custom_fields jsonb_path_ops);
    -- Per channel, so that counting "communicationSupported=X" (with isValid/isTest) is an index-only scan.
    CREATE INDEX contacts_sms ON contacts (company_id, is_valid, is_test) WHERE 'SMS' = ANY (communication_supported);
    CREATE INDEX contacts_rcs ON contacts (company_id, is_valid, is_test) WHERE 'RCS' = ANY (communication_supported);
    CREATE INDEX contacts_whatsapp ON contacts (company_id, is_valid, is_test) WHERE 'WHATSAPP' = ANY (communication_supported);

    CREATE TABLE contact_custom_fields (
      company_id  text NOT NULL,
      key         text NOT NULL,
      type        text NOT NULL CHECK (type IN ('TEXT', 'NUMBER', 'DATE', 'BOOLEAN')),
      created_at  timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (company_id, key)
    );

    CREATE TABLE contact_lists (
      id           bigserial PRIMARY KEY,
      company_id   text NOT NULL,
      name         text NOT NULL,
      description  text,
      is_test      boolean NOT NULL DEFAULT false,
      created_at   timestamptz NOT NULL DEFAULT now(),
      updated_at   timestamptz NOT NULL DEFAULT now(),
      deleted_at   timestamptz
    );
    CREATE INDEX contact_lists_company_name ON contact_lists (company_id, lower(name), id);

    CREATE TABLE contact_list_members (
      id          bigserial PRIMARY KEY,
      company_id  text NOT NULL,
      list_id     bigint NOT NULL REFERENCES contact_lists (id) ON DELETE CASCADE,
      contact_id  uuid NOT NULL REFERENCES contacts (id) ON DELETE CASCADE,
      created_at  timestamptz NOT NULL DEFAULT now(),
      UNIQUE (list_id, contact_id)
    );
    CREATE INDEX contact_list_members_contact ON contact_list_members (contact_id);
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    DROP TABLE contact_list_members;
    DROP TABLE contact_lists;
    DROP TABLE contact_custom_fields;
    DROP TABLE contacts;
  `);
}
