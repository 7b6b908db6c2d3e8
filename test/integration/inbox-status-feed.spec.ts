/**
 * The inbox follows tracking's status feed (migration 0027, inbox.feed.ts). Tracking appends a row
 * for each RCS/WhatsApp status change in its own transaction and writes nothing of the inbox's; the
 * inbox turns the changes of its replies into `message.status` events in its own transaction, with
 * its cursor. A change that commits after a later one is never stepped over. Only one node follows
 * at a time. Changes of other messages move the cursor and write nothing.
 */
import { randomUUID } from "node:crypto";
import { QueryTypes } from "sequelize";
import { inTransaction, migrator, type Database } from "../../lib/db/db";
import { writeItems } from "../../services/tracking/tracking.writes";
import type { IngestItem } from "../../services/tracking/tracking.fold";
import { followStatusFeed } from "../../services/inbox/inbox.feed";
import { dayReadBy } from "../../lib/db/feeds";
import { INBOX_FEED_POSITIONS_VIEW } from "../../services/inbox/inbox.contract";
import { STATUS_FEED_VIEW } from "../../services/tracking/tracking.contract";
import { createTestDatabase, heldOpen, itWithPostgres, withUnmigratedDatabase, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
}, 60_000);
afterAll(() => t.drop());

const q = <T extends object>(sql: string, bind: unknown[] = []) => t.db.sequelize.query<T>(sql, { bind, type: QueryTypes.SELECT });

/** A conversation of `companyId` with an OUTBOUND reply per id in `replies`. */
async function replies(companyId: string, ids: string[]): Promise<string> {
  const chat = randomUUID();
  await q(
    `INSERT INTO conversations (id, company_id, channel, sender_id, contact_number, last_message_at) VALUES ($1, $2, 'WHATSAPP', 's', '+351911111111', now())`,
    [chat, companyId],
  );
  for (const id of ids)
    await q(
      `INSERT INTO conversation_messages (id, company_id, conversation_id, channel, direction, message_id, message_type, text)
       VALUES ($1, $2, $3, 'WHATSAPP', 'OUTBOUND', $4, 'TEXT', 'hi')`,
      [randomUUID(), companyId, chat, id],
    );
  return chat;
}

const registration = (companyId: string, id: string): IngestItem => ({
  kind: "message",
  message: { companyId, channel: "WHATSAPP", customerMessageId: id, destination: "+351911111111" },
});
const receipt = (companyId: string, id: string, code: number): IngestItem => ({
  kind: "receipt",
  channel: "WHATSAPP",
  companyId,
  messageId: id,
  destination: "+351911111111",
  code,
  date: new Date().toISOString(),
  totalParts: 1,
  numPart: 1,
});

const events = (companyId: string) =>
  q<{ id: string; type: string; data: { id: string; statusCode: number; deliveryStatus: string } }>(
    `SELECT id, type, data FROM inbox_events WHERE company_id = $1 ORDER BY id`,
    [companyId],
  );

/**
 * Rounds until one reads nothing (what the loop does after a full batch). A transaction running
 * anywhere on the server (another test file's database) holds the rows after it back until it ends:
 * the checks after a drain wait for it.
 */
async function drain(): Promise<string[]> {
  const companies = new Set<string>();
  for (;;) {
    const r = await followStatusFeed(t.db.sequelize, 2);
    r.companies.forEach((c) => companies.add(c));
    if (r.read < 2) return [...companies];
  }
}

it("writes a message.status event per change of an inbox reply, in feed order, and none for other messages", async () => {
  const a = `feed-${randomUUID()}`;
  const chat = await replies(a, ["r-1", "r-2"]);
  await drain();
  await inTransaction(t.db.sequelize, (exec) =>
    writeItems(
      exec,
      ["r-1", "r-2", "plain"].map((id) => registration(a, id)),
    ),
  );
  const written = await inTransaction(t.db.sequelize, (exec) => writeItems(exec, [receipt(a, "r-1", 3), receipt(a, "plain", 3), receipt(a, "r-2", 10)]));
  expect(written.statusChanges).toBe(3);
  // Tracking wrote no event of the inbox's.
  expect(await events(a)).toEqual([]);
  const got = await eventually(async () => {
    await drain();
    const e = await events(a);
    expect(e).toHaveLength(2);
    return e;
  });
  expect(got.map((e) => [e.type, e.data.id, e.data.statusCode, e.data.deliveryStatus])).toEqual([
    ["message.status", "r-1", 3, "DELIVERED"],
    ["message.status", "r-2", 10, "DISABLED"],
  ]);
  expect(got.every((e) => (e.data as unknown as { chatId: string }).chatId === chat)).toBe(true);
  // A repeat changes nothing: no feed row, no event; a later change is a new event.
  await inTransaction(t.db.sequelize, (exec) => writeItems(exec, [receipt(a, "r-1", 3)]));
  const read: IngestItem = { kind: "read", channel: "WHATSAPP", companyId: a, messageId: "r-1", destination: "+351911111111", date: new Date().toISOString() };
  await inTransaction(t.db.sequelize, (exec) => writeItems(exec, [read]));
  await eventually(async () => {
    await drain();
    const e = await events(a);
    expect(e.map((x) => [x.data.id, (x.data as unknown as { readAt: string | null }).readAt !== null])).toEqual([
      ["r-1", false],
      ["r-2", false],
      ["r-1", true],
    ]);
  });
  const [{ n }] = await q<{ n: number }>(`SELECT count(*)::int AS n FROM message_status_changes WHERE company_id = $1`, [a]);
  expect(n).toBe(4);
});

itWithPostgres("never steps over a change whose transaction commits after a later one", async () => {
  const a = `feed-${randomUUID()}`;
  await replies(a, ["early", "late"]);
  await drain();
  await inTransaction(t.db.sequelize, (exec) => writeItems(exec, [registration(a, "early"), registration(a, "late")]));
  await drain();
  // "early" is written by a transaction that began first (lower xid) and stays open...
  const open = await heldOpen(t.db.sequelize, (exec) => writeItems(exec, [receipt(a, "early", 3)]));
  // ...while "late" commits.
  await inTransaction(t.db.sequelize, (exec) => writeItems(exec, [receipt(a, "late", 3)]));
  const round = await followStatusFeed(t.db.sequelize);
  expect(round).toMatchObject({ busy: false, read: 0, companies: [], held: true });
  expect(await events(a)).toEqual([]);
  await open.release();
  await eventually(async () => {
    await drain();
    expect((await events(a)).map((e) => e.data.id)).toEqual(["early", "late"]);
  });
});

itWithPostgres("lets one node follow at a time: a round whose peer holds the cursor does nothing", async () => {
  const peer = await heldOpen(t.db.sequelize, (exec) => exec(`SELECT 1 FROM inbox_feed_cursors WHERE feed = 'message_status_changes' FOR UPDATE`));
  expect(await followStatusFeed(t.db.sequelize)).toEqual({ busy: true, read: 0, companies: [], held: false });
  await peer.release();
  expect((await followStatusFeed(t.db.sequelize)).busy).toBe(false);
});

it("counts a day of the status feed read, for tracking's retention, only once the inbox has followed all of it", async () => {
  const a = `feed-${randomUUID()}`;
  await followStatusFeed(t.db.sequelize);
  const [{ part }] = await q<{ part: string }>(`SELECT 'message_status_feed_p' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') AS part`);
  await inTransaction(t.db.sequelize, (exec) => writeItems(exec, [registration(a, "day-1")]));
  await inTransaction(t.db.sequelize, (exec) => writeItems(exec, [receipt(a, "day-1", 3)]));
  expect(await dayReadBy(t.db.sequelize, part!, INBOX_FEED_POSITIONS_VIEW, STATUS_FEED_VIEW)).toBe(false);
  // Followed to its end (a running transaction anywhere on the server holds rows back for a moment).
  await eventually(async () => {
    await followStatusFeed(t.db.sequelize);
    expect(await dayReadBy(t.db.sequelize, part!, INBOX_FEED_POSITIONS_VIEW, STATUS_FEED_VIEW)).toBe(true);
  });
});

it("is migration 0027: down drops the feed, its view and the cursor; up makes them again", async () => {
  await migrator(t.db).down({ to: "20261201-0027-message-status-feed" });
  expect(await q(`SELECT to_regclass('message_status_feed') AS f, to_regclass('message_status_changes') AS v, to_regclass('inbox_feed_cursors') AS c`)).toEqual(
    [{ f: null, v: null, c: null }],
  );
  await migrator(t.db).up();
  expect(await q(`SELECT feed, tx::text AS tx, id FROM inbox_feed_cursors ORDER BY feed`)).toEqual([
    { feed: "inbound_messages_received", tx: "0", id: "0" },
    { feed: "message_status_changes", tx: "0", id: "0" },
  ]);
});

describe("migration 0032 (tracking's inbound feed)", () => {
  let db: Database;
  withUnmigratedDatabase((made) => (db = made));

  it("makes the feed, its view and the inbox's cursor; refuses to go down while the inbox has not followed every row", async () => {
    await migrator(db).up({ to: "20261203-0032-inbound-feed" });
    const rows = <T extends object>(sql: string) => db.sequelize.query<T>(sql, { type: QueryTypes.SELECT });
    expect(await rows(`SELECT feed, tx::text AS tx, id FROM inbox_feed_positions WHERE feed = 'inbound_messages_received'`)).toEqual([
      { feed: "inbound_messages_received", tx: "0", id: "0" },
    ]);
    await db.sequelize.query(
      `INSERT INTO inbound_message_feed (company_id, channel, message_id, source, destination, received_date, message_type) VALUES ('acme', 'RCS', 'm1', '+351911111111', 'agent', '2026-11-20T11:00:00Z', 'TEXT')`,
    );
    await expect(migrator(db).down({ to: "20261203-0032-inbound-feed" })).rejects.toThrow(/1 inbound messages are not followed/);
    await db.sequelize.query(`UPDATE inbox_feed_cursors c SET tx = f.tx, id = f.id FROM inbound_message_feed f WHERE c.feed = 'inbound_messages_received'`);
    await migrator(db).down({ to: "20261203-0032-inbound-feed" });
    expect(
      await rows(
        `SELECT to_regclass('inbound_message_feed') AS t, (SELECT count(*)::int FROM inbox_feed_cursors WHERE feed = 'inbound_messages_received') AS n`,
      ),
    ).toEqual([{ t: null, n: 0 }]);
  });
});
