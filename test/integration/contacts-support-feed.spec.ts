/**
 * Contacts follows tracking's status feed for the channels a number is reachable on (migration 0034,
 * contacts.support.ts): tracking writes what a receipt says of the number (`destination`, `reach`)
 * in the receipt's own transaction, and contacts applies it in a transaction of its own with its
 * cursor. Nothing depends on an event reaching a contacts node: a change is applied exactly once,
 * in feed order, whenever contacts follows. The status feed's days wait for contacts as for the inbox.
 */
import { randomUUID } from "node:crypto";
import { QueryTypes } from "sequelize";
import { inTransaction, migrator, type Database } from "../../lib/db/db";
import { dayReadBy, feedLags } from "../../lib/db/feeds";
import { CONTACTS_FEED_POSITIONS_VIEW } from "../../services/contacts/contacts.contract";
import { followChannelSupport } from "../../services/contacts/contacts.support";
import { STATUS_FEED_VIEW } from "../../services/tracking/tracking.contract";
import type { IngestItem } from "../../services/tracking/tracking.fold";
import { writeItems } from "../../services/tracking/tracking.writes";
import { createTestDatabase, heldOpen, itWithPostgres, withUnmigratedDatabase, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
}, 60_000);
afterAll(() => t.drop());

const q = <T extends object>(sql: string, bind: unknown[] = []) => t.db.sequelize.query<T>(sql, { bind, type: QueryTypes.SELECT });
let seq = 0;
const number = () => `+35191${String(Date.now() % 1e5).padStart(5, "0")}${String(++seq).padStart(2, "0")}`;

/** A contact of `companyId` with `phone`; answers its id. */
async function contact(companyId: string, phone: string): Promise<string> {
  const id = randomUUID();
  await q(`INSERT INTO contacts (id, company_id, phone_number) VALUES ($1, $2, $3)`, [id, companyId, phone]);
  return id;
}
const channels = async (id: string) =>
  (
    await q<{ supported: string[]; refused: string[] }>(
      `SELECT communication_supported AS supported, communication_refused AS refused FROM contacts WHERE id = $1`,
      [id],
    )
  )[0];

const registration = (companyId: string, channel: "RCS" | "WHATSAPP", id: string, destination: string, simulation = false): IngestItem => ({
  kind: "message",
  message: { companyId, channel, customerMessageId: id, destination, ...(simulation ? { simulation } : {}) },
});
const receipt = (companyId: string, channel: "RCS" | "WHATSAPP", id: string, destination: string, code: number): IngestItem => ({
  kind: "receipt",
  channel,
  companyId,
  messageId: id,
  destination,
  code,
  date: new Date().toISOString(),
  totalParts: 1,
  numPart: 1,
});
const write = (items: IngestItem[]) => inTransaction(t.db.sequelize, (exec) => writeItems(exec, items));

/**
 * Rounds until one reads nothing. A transaction running anywhere on the server (another test
 * file's database) holds the rows after it back until it ends: the checks after a drain wait for it.
 */
async function drain(): Promise<void> {
  for (;;) {
    const r = await followChannelSupport(t.db.sequelize, 2);
    if (!r.busy && r.read < 2) return;
  }
}

it("applies what each receipt says of the number, in feed order, the last word winning, for that account only", async () => {
  const a = `support-${randomUUID()}`;
  const b = `support-${randomUUID()}`;
  const phone = number();
  const mine = await contact(a, phone);
  const theirs = await contact(b, phone);
  await drain();
  await write([registration(a, "RCS", "m1", phone), registration(a, "RCS", "m2", phone), registration(a, "WHATSAPP", "w1", phone)]);
  // Tracking changes no contact: the feed holds what the receipts said.
  const written = await write([receipt(a, "RCS", "m1", phone, 3), receipt(a, "WHATSAPP", "w1", phone, 3)]);
  expect(written.statusChanges).toBe(2);
  expect(await channels(mine)).toEqual({ supported: [], refused: [] });
  expect(await q(`SELECT channel, destination, reach FROM ${STATUS_FEED_VIEW} WHERE company_id = $1 ORDER BY id`, [a])).toEqual([
    { channel: "RCS", destination: phone, reach: true },
    { channel: "WHATSAPP", destination: phone, reach: true },
  ]);
  await eventually(async () => {
    await drain();
    expect(await channels(mine)).toEqual({ supported: ["RCS", "WHATSAPP"], refused: [] });
  });
  // UNSUPPORTED on RCS: RCS goes, and the campaign audience skips it from now on.
  await write([receipt(a, "RCS", "m2", phone, 11)]);
  await eventually(async () => {
    await drain();
    expect(await channels(mine)).toEqual({ supported: ["WHATSAPP"], refused: ["RCS"] });
  });
  // Two words in one write (DELIVERED, then DISABLED): the later one wins.
  await write([registration(a, "RCS", "m3", phone), registration(a, "RCS", "m4", phone)]);
  await write([receipt(a, "RCS", "m3", phone, 3), receipt(a, "RCS", "m4", phone, 10)]);
  // A status change that says nothing of the number (ENROUTE), and a repeat that changes no status.
  await write([registration(a, "WHATSAPP", "w2", phone)]);
  await write([receipt(a, "WHATSAPP", "w2", phone, 2), receipt(a, "RCS", "m2", phone, 11)]);
  await eventually(async () => {
    await drain();
    expect(await channels(mine)).toEqual({ supported: ["WHATSAPP"], refused: ["RCS"] });
    const [cursor] = await q<{ id: string }>(`SELECT id FROM ${CONTACTS_FEED_POSITIONS_VIEW} WHERE feed = $1`, [STATUS_FEED_VIEW]);
    const [last] = await q<{ id: string }>(`SELECT max(id)::text AS id FROM ${STATUS_FEED_VIEW} WHERE company_id = $1`, [a]);
    expect(BigInt(cursor!.id)).toBeGreaterThanOrEqual(BigInt(last!.id));
  });
  // The other account's contact with the same number heard nothing.
  expect(await channels(theirs)).toEqual({ supported: [], refused: [] });
});

it("says nothing of the number for a simulated message, which was never sent", async () => {
  const a = `support-${randomUUID()}`;
  const phone = number();
  const id = await contact(a, phone);
  await write([registration(a, "WHATSAPP", "sim", phone, true)]);
  await write([receipt(a, "WHATSAPP", "sim", phone, 3)]);
  await write([registration(a, "RCS", "real", phone)]);
  await write([receipt(a, "RCS", "real", phone, 3)]);
  await eventually(async () => {
    await drain();
    expect(await channels(id)).toEqual({ supported: ["RCS"], refused: [] });
  });
});

itWithPostgres("never steps over a receipt whose transaction commits after a later one", async () => {
  const a = `support-${randomUUID()}`;
  const phone = number();
  const id = await contact(a, phone);
  await write([registration(a, "RCS", "early", phone), registration(a, "RCS", "late", phone)]);
  await drain();
  // DELIVERED is written by a transaction that began first and stays open, while UNSUPPORTED commits.
  const open = await heldOpen(t.db.sequelize, (exec) => writeItems(exec, [receipt(a, "RCS", "early", phone, 3)]));
  await write([receipt(a, "RCS", "late", phone, 11)]);
  expect(await followChannelSupport(t.db.sequelize)).toMatchObject({ busy: false, read: 0, held: true });
  expect(await channels(id)).toEqual({ supported: [], refused: [] });
  await open.release();
  // Both are applied in feed order (transaction order): the one that committed last in tx order wins.
  await eventually(async () => {
    await drain();
    expect(await channels(id)).toEqual({ supported: [], refused: ["RCS"] });
  });
});

itWithPostgres("lets one node follow at a time: a round whose peer holds the cursor does nothing", async () => {
  const peer = await heldOpen(t.db.sequelize, (exec) => exec(`SELECT 1 FROM contacts_feed_cursors WHERE feed = 'message_status_changes' FOR UPDATE`));
  expect(await followChannelSupport(t.db.sequelize)).toEqual({ busy: true, read: 0, changes: 0, held: false });
  await peer.release();
  expect((await followChannelSupport(t.db.sequelize)).busy).toBe(false);
});

it("counts a day of the status feed read, for tracking's retention, only once contacts has followed all of it", async () => {
  const a = `support-${randomUUID()}`;
  const phone = number();
  await drain();
  const [{ part }] = await q<{ part: string }>(`SELECT 'message_status_feed_p' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') AS part`);
  await write([registration(a, "RCS", "day-1", phone)]);
  await write([receipt(a, "RCS", "day-1", phone, 3)]);
  expect(await dayReadBy(t.db.sequelize, part!, CONTACTS_FEED_POSITIONS_VIEW, STATUS_FEED_VIEW)).toBe(false);
  await eventually(async () => {
    await drain();
    expect(await dayReadBy(t.db.sequelize, part!, CONTACTS_FEED_POSITIONS_VIEW, STATUS_FEED_VIEW)).toBe(true);
  });
});

it("reports how far behind contacts is (feed_follow_lag_seconds): the age of the oldest row it has not read, 0 once read", async () => {
  const a = `support-${randomUUID()}`;
  const phone = number();
  const feeds = [{ feed: STATUS_FEED_VIEW, positions: CONTACTS_FEED_POSITIONS_VIEW }];
  await write([registration(a, "RCS", "lag-1", phone)]);
  await write([receipt(a, "RCS", "lag-1", phone, 3)]);
  await new Promise((r) => setTimeout(r, 50));
  expect((await feedLags(t.db.sequelize, feeds)).get(STATUS_FEED_VIEW)).toBeGreaterThanOrEqual(0.05);
  await eventually(async () => {
    await drain();
    expect((await feedLags(t.db.sequelize, feeds)).get(STATUS_FEED_VIEW)).toBe(0);
  });
});

describe("migration 0034", () => {
  let db: Database;
  withUnmigratedDatabase((made) => (db = made));

  it("keeps the feed's rows (old ones say nothing of the number), starts contacts' cursor at the beginning, and goes down keeping them", async () => {
    const rows = <T extends object>(sql: string) => db.sequelize.query<T>(sql, { type: QueryTypes.SELECT });
    await migrator(db).up({ to: "20261203-0033-outbox-key" });
    await db.sequelize.query(
      `INSERT INTO message_status_feed (company_id, channel, customer_message_id, status_code) VALUES ('acme', 'RCS', 'old-1', 3), ('acme', 'WHATSAPP', 'old-2', 11)`,
    );
    await migrator(db).up({ to: "20261204-0034-channel-support-feed" });
    expect(await rows(`SELECT customer_message_id, status_code, destination, reach FROM message_status_changes ORDER BY id`)).toEqual([
      { customer_message_id: "old-1", status_code: 3, destination: null, reach: null },
      { customer_message_id: "old-2", status_code: 11, destination: null, reach: null },
    ]);
    expect(await rows(`SELECT feed, tx::text AS tx, id FROM contacts_feed_positions`)).toEqual([{ feed: "message_status_changes", tx: "0", id: "0" }]);
    // Followed: old rows move the cursor and change nothing.
    const round = await followChannelSupport(db.sequelize);
    expect(round).toMatchObject({ busy: false, changes: 0 });
    await migrator(db).down({ to: "20261204-0034-channel-support-feed" });
    expect(await rows(`SELECT to_regclass('contacts_feed_cursors') AS c, to_regclass('contacts_feed_positions') AS v`)).toEqual([{ c: null, v: null }]);
    expect(await rows(`SELECT customer_message_id FROM message_status_changes ORDER BY id`)).toEqual([
      { customer_message_id: "old-1" },
      { customer_message_id: "old-2" },
    ]);
    await migrator(db).up();
  });
});
