/**
 * Range claims (issue 33 item 4, migration 0030): a batch of a campaign's recipients is held by one
 * lease row in `campaign_batches`, not by a token and a lease written on each recipient.
 * - a claim writes one lease row and no recipient row;
 * - claims racing on one campaign never take a recipient twice;
 * - a lease run out is ended by the next claim, which takes its recipients, and the old holder's
 *   outcomes then write nothing; unless the holder has the lease row locked (writing its
 *   outcomes): then the next claim leaves the recipients alone;
 * - leases never overlap: a claim stops before the next lease, and one after a cursor starts after
 *   the last key leased;
 * - what is left: none PENDING, or how long until the first can be claimed;
 * - a heartbeat learns when its lease was ended; a give-back frees the recipients at once;
 * - the migration moves leases in flight off the recipients and back down.
 */
import { randomUUID } from "node:crypto";
import { QueryTypes } from "sequelize";
import { migrator, type Database } from "../../lib/db/db";
import {
  claimRecipients,
  giveBackBatch,
  pendingLeft,
  recordOutcomes,
  renewBatch,
  type ClaimedRecipient,
} from "../../services/campaigns/campaigns.sender.queries";
import { createTestDatabase, heldOpen, itWithPostgres, withUnmigratedDatabase, type TestDatabase } from "../helpers/db";

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
}, 60_000);
afterAll(() => t.drop());

const q = <T extends object>(db: Database, sql: string, bind: unknown[] = []) => db.sequelize.query<T>(sql, { bind, type: QueryTypes.SELECT });

async function sendingCampaign(n: number): Promise<string> {
  const id = randomUUID();
  await q(
    t.db,
    `INSERT INTO campaigns (id, company_id, name, channel, status, contact_list_ids, text, audience) VALUES ($1, 'batches', 'C', 'SMS', 'SENDING', '{1}', 'hi', $2)`,
    [id, n],
  );
  await q(
    t.db,
    `INSERT INTO campaign_recipients (company_id, campaign_id, contact_id, destination) SELECT 'batches', $1, gen_random_uuid(), '+35191' || lpad(i::text, 7, '0') FROM generate_series(1, $2::int) i`,
    [id, n],
  );
  return id;
}

const claim = (campaignId: string, size: number, leaseMs = 60_000, token = `test/${randomUUID()}`) =>
  claimRecipients(t.db.sequelize, { campaignId, token, leaseMs, size, cursor: null }).then((rows) => ({
    token,
    ids: rows.filter((r: ClaimedRecipient) => r.contact_id !== null).map((r) => r.contact_id),
  }));

const sentAll = (campaignId: string, token: string, ids: string[]) =>
  recordOutcomes(t.db.sequelize, {
    campaignId,
    companyId: "batches",
    channel: "SMS",
    token,
    results: ids.map((id) => ({ id, ok: true, skip: false, final: false, wait: 0, error: null })),
    retryBaseMs: 2000,
    maxAttempts: 3,
  });

const leases = (campaignId: string) =>
  q<{ token: string }>(t.db, `SELECT token FROM campaign_batches WHERE campaign_id = $1 ORDER BY token`, [campaignId]).then((r) => r.map((x) => x.token));

it("holds a batch with one lease row and writes no recipient row at the claim", async () => {
  const c = await sendingCampaign(50);
  const versions = () =>
    q<{ v: string }>(t.db, `SELECT string_agg(xmin::text, ',' ORDER BY contact_id) AS v FROM campaign_recipients WHERE campaign_id = $1`, [c]);
  const before = await versions();
  const b = await claim(c, 20);
  expect(b.ids).toHaveLength(20);
  expect(await versions()).toEqual(before);
  expect(await leases(c)).toEqual([b.token]);
  // The next claim takes the next 20, not the held ones.
  const b2 = await claim(c, 20);
  expect(b2.ids.filter((id) => b.ids.includes(id))).toEqual([]);
  expect(b2.ids).toHaveLength(20);
  // The outcome ends the lease.
  expect(await sentAll(c, b.token, b.ids)).toMatchObject({ sent: 20, written: 20 });
  expect(await leases(c)).toEqual([b2.token]);
});

// PostgreSQL only: embedded PGlite runs one transaction at a time, so claims cannot race there, and a
// transaction held open would hold every other statement.
itWithPostgres("never hands a recipient to two claims racing on the same campaign", async () => {
  const c = await sendingCampaign(300);
  const got = await Promise.all(Array.from({ length: 10 }, () => claim(c, 40)));
  const all = got.flatMap((g) => g.ids);
  expect(new Set(all).size).toBe(all.length);
  expect(all).toHaveLength(300);
  expect((await leases(c)).length).toBe(got.filter((g) => g.ids.length > 0).length);
});

it("ends a lease that ran out at the next claim: the recipients go to it, and the old holder's outcomes write nothing", async () => {
  const c = await sendingCampaign(30);
  const old = await claim(c, 30, 1);
  expect(old.ids).toHaveLength(30);
  await new Promise((r) => setTimeout(r, 20));
  const next = await claim(c, 30);
  expect(new Set(next.ids)).toEqual(new Set(old.ids));
  expect(await leases(c)).toEqual([next.token]);
  expect(await sentAll(c, old.token, old.ids)).toMatchObject({ sent: 0, written: 0 });
  expect(await renewBatch(t.db.sequelize, c, old.token, 60_000)).toBe(false);
  expect(await renewBatch(t.db.sequelize, c, next.token, 60_000)).toBe(true);
  expect(await sentAll(c, next.token, next.ids)).toMatchObject({ sent: 30, written: 30 });
});

itWithPostgres("leaves the recipients of a lease that ran out alone while its holder has it locked (writing its outcomes)", async () => {
  const c = await sendingCampaign(10);
  const old = await claim(c, 10, 1);
  await new Promise((r) => setTimeout(r, 20));
  const holder = await heldOpen(t.db.sequelize, (exec) =>
    exec(`SELECT 1 FROM campaign_batches WHERE campaign_id = $1 AND token = $2 FOR UPDATE`, [c, old.token]),
  );
  const during = await claim(c, 10);
  expect(during.ids).toEqual([]);
  await holder.release();
  // Unlocked and still run out: the next claim takes them.
  expect((await claim(c, 10)).ids).toHaveLength(10);
});

it("frees a batch given back at once, and a heartbeat keeps a lease its own", async () => {
  const c = await sendingCampaign(10);
  const b = await claim(c, 10, 300);
  expect(await renewBatch(t.db.sequelize, c, b.token, 60_000)).toBe(true);
  await new Promise((r) => setTimeout(r, 350));
  expect((await claim(c, 10)).ids).toEqual([]); // renewed: still held
  await giveBackBatch(t.db.sequelize, c, b.token);
  expect((await claim(c, 10)).ids).toHaveLength(10);
});

it("never makes overlapping leases: a claim stops before the next lease, and one after a cursor starts after the last key leased", async () => {
  const c = await sendingCampaign(40);
  const first = await claim(c, 5);
  const second = await claim(c, 5);
  await giveBackBatch(t.db.sequelize, c, first.token);
  // From the start: the 5 given back, and not the free keys past the second batch's lease.
  const again = await claim(c, 20);
  expect(new Set(again.ids)).toEqual(new Set(first.ids));
  const ranges = await q<{ lo: string; hi: string }>(
    t.db,
    `SELECT lo_due::text || '/' || lo_contact AS lo, hi_due::text || '/' || hi_contact AS hi FROM campaign_batches WHERE campaign_id = $1 ORDER BY lo_due, lo_contact`,
    [c],
  );
  expect(ranges).toHaveLength(2);
  const overlap = await q<{ n: number }>(
    t.db,
    `SELECT count(*)::int AS n FROM campaign_batches a JOIN campaign_batches b ON a.campaign_id = b.campaign_id AND a.token < b.token
      WHERE a.campaign_id = $1 AND (a.lo_due, a.lo_contact) <= (b.hi_due, b.hi_contact) AND (b.lo_due, b.lo_contact) <= (a.hi_due, a.hi_contact)`,
    [c],
  );
  expect(overlap[0]!.n).toBe(0);
  // A claim after a cursor at the very start: it starts past every key leased.
  const [start] = await q<{ due: string; id: string }>(
    t.db,
    `SELECT due_at::text AS due, contact_id AS id FROM campaign_recipients WHERE campaign_id = $1 ORDER BY due_at, contact_id LIMIT 1`,
    [c],
  );
  const rows = await claimRecipients(t.db.sequelize, { campaignId: c, token: `test/${randomUUID()}`, leaseMs: 60_000, size: 5, cursor: start! });
  const after = rows.map((r) => r.contact_id);
  expect(after).toHaveLength(5);
  expect(after.filter((id) => [...first.ids, ...second.ids].includes(id))).toEqual([]);
});

it("says what is left: none PENDING, or how long until the first recipient can be claimed", async () => {
  const c = await sendingCampaign(3);
  const b = await claim(c, 3, 5000);
  const held = await pendingLeft(t.db.sequelize, c);
  expect(held.n).toBe(1);
  expect(held.wait_ms).toBeGreaterThan(3000); // all due, all held: until the lease ends
  expect(held.wait_ms).toBeLessThanOrEqual(5000);
  await q(t.db, `UPDATE campaign_recipients SET due_at = now() + interval '20 seconds' WHERE campaign_id = $1`, [c]);
  await giveBackBatch(t.db.sequelize, c, b.token);
  const later = await pendingLeft(t.db.sequelize, c);
  expect(later.wait_ms).toBeGreaterThan(15_000); // none due yet: until the first is due
  expect(await sentAll(c, b.token, b.ids)).toMatchObject({ written: 0 }); // given back: its outcomes write nothing
  await q(t.db, `UPDATE campaign_recipients SET status = 'SENT' WHERE campaign_id = $1`, [c]);
  expect(await pendingLeft(t.db.sequelize, c)).toEqual({ n: 0, wait_ms: null });
});

describe("migration 0030", () => {
  let db: Database;
  withUnmigratedDatabase((made) => (db = made));

  it("moves the leases in flight off the recipients into one row per token, and back down", async () => {
    await migrator(db).up({ to: "20261201-0029-contacts-views" });
    const camp = "00000000-0000-4000-8000-0000000000c1";
    const ids = ["00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002", "00000000-0000-4000-8000-000000000003"];
    await q(
      db,
      `INSERT INTO campaigns (id, company_id, name, channel, status, contact_list_ids, text) VALUES ($1, 'acme', 'C', 'SMS', 'SENDING', '{1}', 'hi')`,
      [camp],
    );
    await q(
      db,
      `INSERT INTO campaign_recipients (company_id, campaign_id, contact_id, destination, due_at, owner, leased_until, status) VALUES
         ('acme', $1, $2, '+1', '2026-12-01T00:00:00Z', 'node/tok', now() + interval '1 minute', 'PENDING'),
         ('acme', $1, $3, '+2', '2026-12-01T00:00:01Z', 'node/tok', now() + interval '2 minutes', 'PENDING'),
         ('acme', $1, $4, '+3', '2026-12-01T00:00:02Z', NULL, NULL, 'PENDING')`,
      [camp, ...ids],
    );
    await migrator(db).up({ to: "20261202-0030-campaign-batches" });
    const rows = await q<Record<string, unknown>>(
      db,
      `SELECT company_id, token, lo_contact, hi_contact, lo_due = '2026-12-01T00:00:00Z' AS lo_ok, hi_due = '2026-12-01T00:00:01Z' AS hi_ok, leased_until > now() + interval '90 seconds' AS latest FROM campaign_batches`,
    );
    expect(rows).toEqual([{ company_id: "acme", token: "node/tok", lo_contact: ids[0], hi_contact: ids[1], lo_ok: true, hi_ok: true, latest: true }]);
    const cols = await q<{ column_name: string }>(
      db,
      `SELECT column_name FROM information_schema.columns WHERE table_name = 'campaign_recipients' AND column_name IN ('owner', 'leased_until')`,
    );
    expect(cols).toEqual([]);

    await migrator(db).down({ to: "20261202-0030-campaign-batches" });
    const back = await q<{ contact_id: string; owner: string | null }>(db, `SELECT contact_id, owner FROM campaign_recipients ORDER BY contact_id`);
    expect(back).toEqual([
      { contact_id: ids[0], owner: "node/tok" },
      { contact_id: ids[1], owner: "node/tok" },
      { contact_id: ids[2], owner: null },
    ]);
  });
});
