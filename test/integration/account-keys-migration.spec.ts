/**
 * Migration 0026 (issue 33 item 3): every primary, unique and foreign key carries `company_id`, so
 * the schema can be distributed by account (docs/scaling.md). The rows of every rekeyed table stay as
 * they were, campaign recipients get their campaign's account, the foreign keys keep their ON DELETE
 * rules and now refuse a row that points into another account, and the down step gives the old keys
 * back. The catalog check runs on the latest schema: a table added later with a key that lacks
 * `company_id` fails it unless docs/scaling.md names it a reference table here too.
 */
import { QueryTypes } from "sequelize";
import { migrator, type Database } from "../../lib/db/db";
import { withUnmigratedDatabase } from "../helpers/db";

let db: Database;
withUnmigratedDatabase((made) => (db = made));

const q = <T extends object>(sql: string, bind: unknown[] = []) => db.sequelize.query<T>(sql, { bind, type: QueryTypes.SELECT });

/** Small and global (docs/scaling.md, "reference tables"): their keys need no account. */
const GLOBAL = ["api_keys", "contacts_feed_cursors", "inbox_feed_cursors", "notifier_feed_cursors", "schema_migrations"];
/** Keys still to change before the schema can be distributed (each with its reason in docs/scaling.md): none since migration 0033. */
const NOT_YET: string[] = [];

const TABLES = [
  "contacts",
  "contact_lists",
  "contact_list_members",
  "contact_imports",
  "export_jobs",
  "media",
  "media_references",
  "social_profiles",
  "conversations",
  "conversation_messages",
  "campaigns",
  "campaign_recipients",
  "campaign_contact_marks",
  "outbox_events",
];

const C1 = "00000000-0000-4000-8000-000000000001";
const C2 = "00000000-0000-4000-8000-000000000002";
const CAMP = "00000000-0000-4000-8000-0000000000c1";
const MEDIA = "00000000-0000-4000-8000-0000000000e1";
const CONV = "00000000-0000-4000-8000-0000000000a1";

async function snapshot(): Promise<Record<string, unknown[]>> {
  const out: Record<string, unknown[]> = {};
  for (const t of TABLES) out[t] = await q(`SELECT to_jsonb(x) - 'company_id' AS row FROM ${t} x ORDER BY to_jsonb(x)::text`);
  return out;
}

/** Keys (primary, unique, foreign; and unique indexes) of the schema's own tables that lack `company_id`. */
const keysWithoutAccount = () =>
  q<{ t: string; key: string }>(
    `SELECT r.relname AS t, pg_get_indexdef(i.indexrelid) AS key
       FROM pg_index i JOIN pg_class r ON r.oid = i.indrelid JOIN pg_namespace n ON n.oid = r.relnamespace
      WHERE n.nspname = 'public' AND i.indisunique AND NOT r.relispartition
        AND NOT EXISTS (SELECT 1 FROM unnest(i.indkey) k JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum = k WHERE a.attname = 'company_id')
     UNION ALL
     SELECT r.relname, pg_get_constraintdef(c.oid)
       FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid JOIN pg_namespace n ON n.oid = r.relnamespace
      WHERE n.nspname = 'public' AND c.contype = 'f' AND NOT r.relispartition
        AND NOT EXISTS (SELECT 1 FROM unnest(c.conkey) k JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum = k WHERE a.attname = 'company_id')
     ORDER BY 1, 2`,
  );

it("rekeys every account table by company_id with its rows in place, and back down", async () => {
  await migrator(db).up({ to: "20261130-0025-day-partitions" });
  await db.sequelize.query(`
    INSERT INTO contacts (id, company_id, phone_number) VALUES ('${C1}', 'acme', '+351911111111'), ('${C2}', 'other', '+351922222222');
    INSERT INTO contact_lists (id, company_id, name) VALUES (1, 'acme', 'A'), (2, 'other', 'B');
    INSERT INTO contact_list_members (company_id, list_id, contact_id) VALUES ('acme', 1, '${C1}'), ('other', 2, '${C2}');
    INSERT INTO contact_imports (id, company_id, kind, file_name, file_size, file_sha256, node_id)
      VALUES ('00000000-0000-4000-8000-0000000000b1', 'acme', 'csv', 'a.csv', 10, 'ab', 'n1');
    INSERT INTO export_jobs (id, company_id, type, filters, status) VALUES ('00000000-0000-4000-8000-0000000000d1', 'acme', 'CONTACTS', '{}', 'QUEUED');
    INSERT INTO media (id, company_id, file_name, content_type, size, sha256, node_id) VALUES ('${MEDIA}', 'acme', 'a.png', 'image/png', 1, 'ab', 'n1');
    INSERT INTO media_references (company_id, owner, media_id) VALUES ('acme', 'campaign:${CAMP}', '${MEDIA}');
    INSERT INTO social_profiles (id, company_id, network, external_id, token_key_id, token_iv, token_tag, token_ciphertext)
      VALUES ('00000000-0000-4000-8000-0000000000f1', 'acme', 'FACEBOOK', 'x', 'k1', '\\x00', '\\x00', '\\x00');
    INSERT INTO conversations (id, company_id, channel, sender_id, contact_number, last_message_at) VALUES ('${CONV}', 'acme', 'RCS', 's', '+351911111111', now());
    INSERT INTO conversation_messages (id, company_id, conversation_id, channel, direction, message_id, message_type)
      VALUES ('00000000-0000-4000-8000-0000000000a2', 'acme', '${CONV}', 'RCS', 'INBOUND', 'm1', 'TEXT');
    INSERT INTO campaigns (id, company_id, name, channel, contact_list_ids, text) VALUES ('${CAMP}', 'acme', 'C', 'SMS', '{1}', 'hi');
    INSERT INTO campaign_recipients (campaign_id, contact_id, destination) VALUES ('${CAMP}', '${C1}', '+351911111111');
    INSERT INTO campaign_contact_marks (campaign_id, company_id, channel, contact_ids) VALUES ('${CAMP}', 'acme', 'SMS', '{${C1}}');
    INSERT INTO outbox_events (company_id, channel, event_type, message_id, payload) VALUES ('acme', 'SMS', 'DELIVERY', 'x-1', '{}');`);
  const before = await snapshot();
  expect((await keysWithoutAccount()).length).toBeGreaterThan(10);

  await migrator(db).up({ to: "20261201-0026-account-keys" });
  expect(await snapshot()).toEqual(before);
  for (const t of TABLES) expect([t, await q(`SELECT DISTINCT company_id FROM ${t}`)]).toEqual([t, expect.arrayContaining([{ company_id: "acme" }])]);
  expect(await q(`SELECT company_id FROM campaign_recipients`)).toEqual([{ company_id: "acme" }]);

  // A row pointing into another account is refused (23503); the ON DELETE rules hold.
  await expect(db.sequelize.query(`INSERT INTO contact_list_members (company_id, list_id, contact_id) VALUES ('acme', 2, '${C1}')`)).rejects.toMatchObject({
    parent: { code: "23503" },
  });
  await expect(db.sequelize.query(`INSERT INTO contact_list_members (company_id, list_id, contact_id) VALUES ('other', 2, '${C1}')`)).rejects.toMatchObject({
    parent: { code: "23503" },
  });
  // ON DELETE RESTRICT: 23503 (foreign_key_violation) on PostgreSQL before 17, 23001 (restrict_violation) since.
  await expect(db.sequelize.query(`DELETE FROM media WHERE id = '${MEDIA}'`)).rejects.toMatchObject({
    parent: { code: expect.stringMatching(/^(23503|23001)$/) },
  });
  await expect(
    db.sequelize.query(`INSERT INTO campaign_recipients (company_id, campaign_id, contact_id, destination) VALUES ('other', '${CAMP}', '${C2}', '+1')`),
  ).rejects.toMatchObject({ parent: { code: "23503" } });
  await db.sequelize.query(`DELETE FROM contacts WHERE company_id = 'acme' AND id = '${C1}'`);
  expect(await q(`SELECT company_id FROM contact_list_members`)).toEqual([{ company_id: "other" }]);
  await db.sequelize.query(`DELETE FROM campaigns WHERE company_id = 'acme' AND id = '${CAMP}'`);
  expect(await q(`SELECT count(*)::int AS n FROM campaign_recipients`)).toEqual([{ n: 0 }]);
  expect(await q(`SELECT count(*)::int AS n FROM campaign_contact_marks`)).toEqual([{ n: 0 }]);
  await db.sequelize.query(`DELETE FROM conversations WHERE company_id = 'acme' AND id = '${CONV}'`);
  expect(await q(`SELECT count(*)::int AS n FROM conversation_messages`)).toEqual([{ n: 0 }]);

  await migrator(db).down({ to: "20261201-0026-account-keys" });
  expect(await q(`SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conname = 'campaign_recipients_pkey'`)).toEqual([
    { def: "PRIMARY KEY (campaign_id, contact_id)" },
  ]);
  expect(await q(`SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conname = 'contacts_pkey'`)).toEqual([{ def: "PRIMARY KEY (id)" }]);
}, 120_000);

it("leaves no primary, unique or foreign key without company_id on the latest schema but the reference tables'", async () => {
  await migrator(db).up();
  const left = await keysWithoutAccount();
  expect(left.filter((k) => !GLOBAL.includes(k.t) && !NOT_YET.includes(k.t))).toEqual([]);
  expect([...new Set(left.map((k) => k.t))].sort()).toEqual([...GLOBAL, ...NOT_YET].sort());
}, 120_000);

it("keeps an index led by the columns of every lookup the jobs and pages make by their old key", async () => {
  // What the sender's claims, heartbeats and give-backs and a confirmed campaign's preview (recipients
  // by campaign and contact), the job tables' claims (by id) and a contacts page (by account and id)
  // address rows by: each needs a whole (not partial) index whose leading columns are exactly those,
  // or every lookup reads every account's rows.
  const lookups: Array<[string, string[]]> = [
    ["campaign_recipients", ["campaign_id", "contact_id"]],
    ["campaign_recipients", ["campaign_id"]],
    ["campaigns", ["id"]],
    ["campaign_contact_marks", ["id"]],
    ["export_jobs", ["id"]],
    ["contact_imports", ["id"]],
    ["conversations", ["id"]],
    ["conversation_messages", ["id"]],
    ["media", ["id"]],
    ["social_profiles", ["id"]],
    ["outbox_events", ["id"]],
    ["contact_list_members", ["id"]],
    ["contacts", ["company_id", "id"]],
    ["contact_lists", ["company_id", "id"]],
  ];
  for (const [table, columns] of lookups) {
    const [row] = await q<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_index i
        WHERE i.indrelid = $1::regclass AND i.indpred IS NULL
          AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM unnest((i.indkey::int2[])[0:$3 - 1]) k JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k)
              = (SELECT array_agg(c ORDER BY c) FROM unnest($2::text[]) c)`,
      [table, columns, columns.length],
    );
    expect([table, columns, row!.n > 0]).toEqual([table, columns, true]);
  }
});
