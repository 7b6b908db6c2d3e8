/**
 * The outbox with one writer (issue 33 item 1, migration 0031): tracking and the inbox append webhook
 * events to feeds of their own; the notifier follows them into its schedule, `outbox_events`.
 * - a round copies what tracking's writes put in its feed, in order, and moves the cursor; the next
 *   round reads nothing again;
 * - an account whose webhook is gone by then gets nothing copied;
 * - a RETRACT (a simulated message whose receipt came first) drops the events already copied, and
 *   keeps those of the same round, or of a later one (a RETRACT may come first in feed order), from
 *   being copied at all;
 * - a row committed behind a transaction still running is not stepped over: the round reports it
 *   held, and a later round reads both, in order (PostgreSQL: two sessions);
 * - a node whose peer holds the cursor does nothing (PostgreSQL);
 * - an owner's day is "read" only once the notifier has followed all of it;
 * - the migration keeps the outbox's rows, and its way down puts what was not followed yet into the
 *   outbox, retractions applied.
 */
import { QueryTypes } from "sequelize";
import { Client } from "pg";
import { inTransaction, migrator, type Database } from "../../lib/db/db";
import { dayReadBy } from "../../lib/db/feeds";
import { followFeed, type WebhookFeed } from "../../services/notifier/notifier.feed";
import { FEED_POSITIONS_VIEW } from "../../services/notifier/notifier.contract";
import { MESSAGE_EVENTS_VIEW } from "../../services/tracking/tracking.contract";
import { INBOUND_EVENTS_VIEW } from "../../services/inbox/inbox.contract";
import type { IngestItem } from "../../services/tracking/tracking.fold";
import { writeItems } from "../../services/tracking/tracking.writes";
import { createTestDatabase, itWithPostgres, withUnmigratedDatabase, type TestDatabase } from "../helpers/db";
import { uid } from "../helpers/app";

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
}, 60_000);
afterAll(() => t.drop());

const q = <T extends object>(sql: string, bind: unknown[] = [], db: Database = t.db) => db.sequelize.query<T>(sql, { bind, type: QueryTypes.SELECT });

async function listeningAccount(): Promise<string> {
  const companyId = uid();
  await q(`INSERT INTO webhooks (company_id, callback_url) VALUES ($1, 'https://hooks.example.com/x')`, [companyId]);
  return companyId;
}

const receipt = (companyId: string, messageId: string, code = 3): IngestItem => ({
  kind: "receipt",
  channel: "RCS",
  companyId,
  messageId,
  destination: "+351912000001",
  code,
  date: "2026-11-20T10:01:00.000Z",
  totalParts: null,
  numPart: 1,
});
const registration = (companyId: string, messageId: string, simulation: boolean): IngestItem => ({
  kind: "message",
  message: { companyId, channel: "RCS", customerMessageId: messageId, destination: "+351912000001", sentAt: "2026-11-20T10:00:00Z", simulation },
});
const write = (items: IngestItem[]) => inTransaction(t.db.sequelize, (exec) => writeItems(exec, items));
const scheduled = (companyId: string) =>
  q<{ event_type: string; message_id: string }>(`SELECT event_type, message_id FROM outbox_events WHERE company_id = $1 ORDER BY id`, [companyId]);
/**
 * Follows the feed until a round reads nothing and nothing is held back. Transaction ids are the
 * whole server's: a transaction of another test file's database, still running, holds rows back
 * for a moment (as any write transaction on the server does in production).
 */
async function followAll(feed: WebhookFeed = MESSAGE_EVENTS_VIEW, batch = 100): Promise<{ read: number; written: number; retracted: number }> {
  const sum = { read: 0, written: 0, retracted: 0 };
  for (let i = 0; i < 1000; i++) {
    const r = await followFeed(t.db.sequelize, feed, batch);
    sum.read += r.read;
    sum.written += r.written;
    sum.retracted += r.retracted;
    if (r.read < batch && !r.held) return sum;
    if (r.read < batch) await new Promise((done) => setTimeout(done, 10));
  }
  throw new Error("the feed was never followed to its end");
}

it("copies tracking's events into the schedule in order, once", async () => {
  const a = await listeningAccount();
  await write([registration(a, "m1", false), registration(a, "m2", false)]);
  await write([receipt(a, "m1"), receipt(a, "m2")]);
  await write([{ kind: "read", channel: "RCS", companyId: a, messageId: "m1", destination: "+351912000001", date: "2026-11-20T10:02:00.000Z" }]);
  expect(await scheduled(a)).toEqual([]);
  expect((await followAll()).written).toBeGreaterThanOrEqual(3);
  expect(await scheduled(a)).toEqual([
    { event_type: "DELIVERY", message_id: "m1" },
    { event_type: "DELIVERY", message_id: "m2" },
    { event_type: "READ", message_id: "m1" },
  ]);
  expect(await followAll()).toEqual({ read: 0, written: 0, retracted: 0 });
  expect(await scheduled(a)).toHaveLength(3);
});

it("copies nothing of an account whose webhook was deleted before the round", async () => {
  const a = await listeningAccount();
  await write([registration(a, "m1", false)]);
  await write([receipt(a, "m1")]);
  await q(`DELETE FROM webhooks WHERE company_id = $1`, [a]);
  await followAll();
  expect(await scheduled(a)).toEqual([]);
});

it("drops the events of a late simulated message: copied already, or in the same round", async () => {
  const a = await listeningAccount();
  // Copied already: the receipt came first (a placeholder and its DELIVERY event), then followed.
  await write([receipt(a, "early")]);
  await followAll();
  expect(await scheduled(a)).toEqual([{ event_type: "DELIVERY", message_id: "early" }]);
  await write([registration(a, "early", true)]);
  expect(await followAll()).toEqual({ read: 1, written: 0, retracted: 1 });
  expect(await scheduled(a)).toEqual([]);
  // In the same round: never copied; another message's event still is.
  await write([receipt(a, "early2"), registration(a, "real", false)]);
  await write([registration(a, "early2", true), receipt(a, "real")]);
  await followAll();
  expect(await scheduled(a)).toEqual([{ event_type: "DELIVERY", message_id: "real" }]);
});

it("does not copy an event whose RETRACT came first in feed order, read in an earlier round", async () => {
  const a = await listeningAccount();
  await followAll();
  // The registration's transaction drew its id first and waited for the receipt's key: its RETRACT
  // is ahead of the DELIVERY it takes back. Rounds of one row: the RETRACT is read alone.
  await q(
    `INSERT INTO message_event_feed (company_id, channel, event_type, message_id, payload, message_sent_at) VALUES ($1, 'RCS', 'RETRACT', 'late', NULL, now() - interval '1 minute')`,
    [a],
  );
  await q(
    `INSERT INTO message_event_feed (company_id, channel, event_type, message_id, payload) VALUES ($1, 'RCS', 'DELIVERY', 'late', '{}'), ($1, 'RCS', 'DELIVERY', 'other', '{}')`,
    [a],
  );
  expect(await followAll(MESSAGE_EVENTS_VIEW, 1)).toMatchObject({ read: 3, written: 1 });
  expect(await scheduled(a)).toEqual([{ event_type: "DELIVERY", message_id: "other" }]);
});

itWithPostgres("never steps over a row committed behind a transaction still running, and reads both in order after it ends", async () => {
  const a = await listeningAccount();
  await followAll();
  const slow = new Client({ connectionString: t.url! });
  const fast = new Client({ connectionString: t.url! });
  await slow.connect();
  await fast.connect();
  try {
    const insert = `INSERT INTO message_event_feed (company_id, channel, event_type, message_id, payload) VALUES ($1, 'RCS', 'DELIVERY', $2, '{}')`;
    await slow.query("BEGIN");
    await slow.query(insert, [a, "first"]); // the older transaction: its tx is the lower
    await fast.query(insert, [a, "second"]); // commits at once
    const r = await followFeed(t.db.sequelize, MESSAGE_EVENTS_VIEW);
    expect(r).toMatchObject({ busy: false, read: 0, held: true });
    await slow.query("COMMIT");
    expect(await followAll()).toMatchObject({ read: 2, written: 2 });
    expect((await scheduled(a)).map((e) => e.message_id)).toEqual(["first", "second"]);
  } finally {
    await slow.query("ROLLBACK").catch(() => undefined);
    await slow.end();
    await fast.end();
  }
});

itWithPostgres("does nothing while a peer holds the feed's cursor", async () => {
  const a = await listeningAccount();
  await q(`INSERT INTO message_event_feed (company_id, channel, event_type, message_id, payload) VALUES ($1, 'SMS', 'DELIVERY', 'x', '{}')`, [a]);
  const peer = new Client({ connectionString: t.url! });
  await peer.connect();
  try {
    await peer.query("BEGIN");
    await peer.query(`SELECT 1 FROM notifier_feed_cursors WHERE feed = $1 FOR UPDATE`, [MESSAGE_EVENTS_VIEW]);
    expect(await followFeed(t.db.sequelize, MESSAGE_EVENTS_VIEW)).toEqual({ busy: true, read: 0, written: 0, retracted: 0, held: false });
    await peer.query("COMMIT");
    expect(await followAll()).toMatchObject({ written: 1 });
  } finally {
    await peer.end();
  }
});

it("says a day of an owner's feed is read only once the notifier has followed all of it", async () => {
  const a = await listeningAccount();
  const [{ part }] = await q<{ part: string }>(`SELECT 'inbound_event_feed_p' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') AS part`);
  await q(`INSERT INTO inbound_event_feed (company_id, channel, event_type, message_id, payload) VALUES ($1, 'WHATSAPP', 'INBOUND', 'in-1', '{}')`, [a]);
  expect(await dayReadBy(t.db.sequelize, part!, FEED_POSITIONS_VIEW, INBOUND_EVENTS_VIEW)).toBe(false);
  await followAll(INBOUND_EVENTS_VIEW);
  expect(await dayReadBy(t.db.sequelize, part!, FEED_POSITIONS_VIEW, INBOUND_EVENTS_VIEW)).toBe(true);
  expect(await dayReadBy(t.db.sequelize, part!, FEED_POSITIONS_VIEW, "no such feed")).toBe(false);
  expect(await scheduled(a)).toEqual([{ event_type: "INBOUND", message_id: "in-1" }]);
});

describe("migrations 0031 and 0033", () => {
  let db: Database;
  withUnmigratedDatabase((made) => (db = made));

  it("keeps the outbox's rows; down puts what was not followed into the outbox, retractions applied", async () => {
    await migrator(db).up({ to: "20261202-0030-campaign-batches" });
    const ev = `INSERT INTO outbox_events (company_id, channel, event_type, message_id, payload) VALUES ('acme', 'SMS', 'DELIVERY', $1, '{}')`;
    await q(ev, ["old"], db);
    await migrator(db).up({ to: "20261203-0031-webhook-feeds" });
    expect(await q(`SELECT message_id FROM outbox_events`, [], db)).toEqual([{ message_id: "old" }]);
    expect(await q(`SELECT feed, tx::text AS tx, id FROM webhook_feed_positions ORDER BY feed`, [], db)).toEqual([
      { feed: INBOUND_EVENTS_VIEW, tx: "0", id: "0" },
      { feed: MESSAGE_EVENTS_VIEW, tx: "0", id: "0" },
    ]);
    // Not followed yet: a DELIVERY later taken back, another DELIVERY, an INBOUND.
    await q(
      `INSERT INTO message_event_feed (company_id, channel, event_type, message_id, payload, message_sent_at) VALUES
         ('acme', 'RCS', 'DELIVERY', 'sim', '{}', NULL), ('acme', 'RCS', 'DELIVERY', 'kept', '{}', NULL), ('acme', 'RCS', 'RETRACT', 'sim', NULL, now() - interval '1 minute')`,
      [],
      db,
    );
    await q(`INSERT INTO inbound_event_feed (company_id, channel, event_type, message_id, payload) VALUES ('acme', 'WHATSAPP', 'INBOUND', 'in', '{}')`, [], db);
    await migrator(db).down({ to: "20261203-0031-webhook-feeds" });
    expect(await q(`SELECT event_type, message_id FROM outbox_events ORDER BY id`, [], db)).toEqual([
      { event_type: "DELIVERY", message_id: "old" },
      { event_type: "DELIVERY", message_id: "kept" },
      { event_type: "INBOUND", message_id: "in" },
    ]);
    expect(await q(`SELECT to_regclass('message_event_feed') AS t`, [], db)).toEqual([{ t: null }]);
  });

  it("is migration 0033: the schedule keyed (id, company_id), its rows kept, and back", async () => {
    await migrator(db).up({ to: "20261203-0032-inbound-feed" });
    await q(`INSERT INTO outbox_events (company_id, channel, event_type, message_id, payload) VALUES ('acme', 'SMS', 'DELIVERY', 'kept-33', '{}')`, [], db);
    const key = () =>
      q<{ cols: string }>(
        `SELECT string_agg(a.attname, ',' ORDER BY k.n) AS cols FROM pg_index i, unnest(i.indkey) WITH ORDINALITY k(attnum, n), pg_attribute a
          WHERE i.indrelid = 'outbox_events'::regclass AND i.indisprimary AND a.attrelid = i.indrelid AND a.attnum = k.attnum`,
        [],
        db,
      );
    expect(await key()).toEqual([{ cols: "id" }]);
    await migrator(db).up({ to: "20261203-0033-outbox-key" });
    expect(await key()).toEqual([{ cols: "id,company_id" }]);
    expect(await q(`SELECT message_id FROM outbox_events WHERE message_id = 'kept-33'`, [], db)).toEqual([{ message_id: "kept-33" }]);
    await migrator(db).down({ to: "20261203-0033-outbox-key" });
    expect(await key()).toEqual([{ cols: "id" }]);
  });
});
