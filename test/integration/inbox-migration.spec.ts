/**
 * Migration 0013 moves what tracking stored of inbound messages (`inbound_messages`) into the inbox's
 * conversations and messages, and its down step puts them back: one conversation per (account,
 * channel, sender, end user), every message kept with its media key, unread counts and the latest
 * message as they were. Migration 0018 counts live-view event ids per account.
 */
import { QueryTypes } from "sequelize";
import { migrator, type Database } from "../../lib/db/db";
import { appendInboxEvents } from "../../services/inbox/inbox.events";
import { withUnmigratedDatabase } from "../helpers/db";

let db: Database;
withUnmigratedDatabase((made) => (db = made));

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

it("migration 0018 numbers live-view events per account, going on from each account's highest id, and back down to one sequence", async () => {
  await migrator(db).up({ to: "20261127-0017-inbox-reply-media" });
  const ev = (company: string) =>
    db.sequelize.query(`INSERT INTO inbox_events (company_id, conversation_id, type, data) VALUES ($1, gen_random_uuid(), 'message.created', '{}')`, {
      bind: [company],
    });
  for (const c of ["acme", "other", "acme", "other", "other"]) await ev(c);
  const idsOf = async (c: string) => (await q<{ id: string }>(`SELECT id FROM inbox_events WHERE company_id = $1 ORDER BY id`, [c])).map((r) => Number(r.id));
  const [acme, other] = [await idsOf("acme"), await idsOf("other")];
  await migrator(db).up({ to: "20261128-0018-inbox-event-ids" });
  expect(await q(`SELECT company_id, last_id::int AS last_id FROM inbox_event_counters ORDER BY company_id`)).toEqual([
    { company_id: "acme", last_id: acme.at(-1) },
    { company_id: "other", last_id: other.at(-1) },
  ]);
  // The ids kept; an account's next event follows its own highest, a new account starts at 1.
  const event = (companyId: string) => ({ companyId, conversationId: "6f1c0e6a-5d0b-4d1e-9a43-2b4c4f0e9d11", type: "message.created" as const, data: {} });
  await db.sequelize.transaction((tx) => appendInboxEvents(db.sequelize, tx, [event("acme"), event("new"), event("acme")]));
  expect(await idsOf("acme")).toEqual([...acme, acme.at(-1)! + 1, acme.at(-1)! + 2]);
  expect(await idsOf("new")).toEqual([1]);
  expect(await idsOf("other")).toEqual(other);

  await migrator(db).down({ to: "20261128-0018-inbox-event-ids" });
  expect(await q(`SELECT to_regclass('inbox_event_counters') AS t`)).toEqual([{ t: null }]);
  const all = (await q<{ id: string; company_id: string }>(`SELECT id, company_id FROM inbox_events ORDER BY id`)).map((r) => [Number(r.id), r.company_id]);
  expect(all).toEqual([
    [1, "acme"],
    [2, "acme"],
    [3, "acme"],
    [4, "acme"],
    [5, "new"],
    [6, "other"],
    [7, "other"],
    [8, "other"],
  ]);
  await ev("acme");
  expect((await idsOf("acme")).at(-1)).toBe(9);
});
