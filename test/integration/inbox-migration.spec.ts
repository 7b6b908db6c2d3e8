/**
 * Migration 0013 moves what tracking stored of inbound messages (`inbound_messages`) into the inbox's
 * conversations and messages, and its down step puts them back: one conversation per (account,
 * channel, sender, end user), every message kept with its media key, unread counts and the latest
 * message as they were.
 */
import { QueryTypes } from "sequelize";
import { migrator, openDatabase, type Database } from "../../lib/db";
import { createPgDatabase, TEST_DATABASE_URL } from "../helpers/db";

let db: Database;
let drop: () => Promise<void> = async () => undefined;
beforeAll(async () => {
  if (TEST_DATABASE_URL) {
    const pgdb = await createPgDatabase();
    db = await openDatabase({ databaseUrl: pgdb.url, dataDir: null, migrate: false });
    drop = pgdb.drop;
  } else db = await openDatabase({ databaseUrl: null, dataDir: null, migrate: false });
}, 60_000);
afterAll(async () => {
  await db?.close();
  await drop();
});

const q = <T extends object>(sql: string, bind: unknown[] = []) => db.sequelize.query<T>(sql, { bind, type: QueryTypes.SELECT });

it("moves inbound_messages into conversations and conversation_messages, and back down", async () => {
  await migrator(db).up({ to: "20261125-0012-campaigns" });
  await db.sequelize.query(`
    INSERT INTO inbound_messages (company_id, channel, message_id, source, destination, received_at, message_type, text, media_key) VALUES
      ('acme', 'WHATSAPP', 'w1', '+351911111111', '+351210000000', '2026-11-20T10:00:00Z', 'TEXT', 'first', NULL),
      ('acme', 'WHATSAPP', 'w2', '+351911111111', '+351210000000', '2026-11-20T11:00:00Z', 'IMAGE', 'second', 'up/k.jpg'),
      ('acme', 'RCS', 'r1', '+351911111111', 'agent', '2026-11-20T09:00:00Z', 'TEXT', 'rcs', NULL),
      ('other', 'WHATSAPP', 'w1', '+351922222222', '+351210000000', '2026-11-20T12:00:00Z', 'TEXT', 'theirs', NULL)`);
  await migrator(db).up({ to: "20261126-0013-inbox" });

  expect(await q(`SELECT to_regclass('inbound_messages') AS t`)).toEqual([{ t: null }]);
  const convs = await q<Record<string, unknown>>(
    `SELECT company_id, channel, sender_id, contact_number, status, unread_count, last_message_preview, last_message_at, last_inbound_at
       FROM conversations ORDER BY company_id, channel`,
  );
  expect(convs).toEqual([
    expect.objectContaining({ company_id: "acme", channel: "RCS", sender_id: "agent", unread_count: 1, last_message_preview: "rcs", status: "ACTIVE" }),
    expect.objectContaining({
      company_id: "acme",
      channel: "WHATSAPP",
      sender_id: "+351210000000",
      contact_number: "+351911111111",
      unread_count: 2,
      last_message_preview: "second",
      last_message_at: new Date("2026-11-20T11:00:00Z"),
      last_inbound_at: new Date("2026-11-20T11:00:00Z"),
    }),
    expect.objectContaining({ company_id: "other", channel: "WHATSAPP", unread_count: 1, last_message_preview: "theirs" }),
  ]);
  const msgs = await q<Record<string, unknown>>(
    `SELECT m.company_id, m.channel, m.direction, m.message_id, m.message_type, m.text, m.media_key, m.created_at, c.contact_number
       FROM conversation_messages m JOIN conversations c ON c.id = m.conversation_id ORDER BY m.company_id, m.channel, m.created_at`,
  );
  expect(msgs.map((m) => [m.company_id, m.channel, m.direction, m.message_id, m.media_key])).toEqual([
    ["acme", "RCS", "INBOUND", "r1", null],
    ["acme", "WHATSAPP", "INBOUND", "w1", null],
    ["acme", "WHATSAPP", "INBOUND", "w2", "up/k.jpg"],
    ["other", "WHATSAPP", "INBOUND", "w1", null],
  ]);
  expect(msgs[2]).toMatchObject({ message_type: "IMAGE", text: "second", created_at: new Date("2026-11-20T11:00:00Z") });

  await migrator(db).down({ to: "20261126-0013-inbox" });
  const back = await q<Record<string, unknown>>(
    `SELECT company_id, channel, message_id, source, destination, received_at, media_key FROM inbound_messages ORDER BY company_id, channel, message_id`,
  );
  expect(back.map((r) => [r.company_id, r.channel, r.message_id, r.source, r.destination, r.media_key])).toEqual([
    ["acme", "RCS", "r1", "+351911111111", "agent", null],
    ["acme", "WHATSAPP", "w1", "+351911111111", "+351210000000", null],
    ["acme", "WHATSAPP", "w2", "+351911111111", "+351210000000", "up/k.jpg"],
    ["other", "WHATSAPP", "w1", "+351922222222", "+351210000000", null],
  ]);
  expect(await q(`SELECT to_regclass('conversations') AS t`)).toEqual([{ t: null }]);
});
