/**
 * The read-only views services publish for others to read (issue 33 item 1).
 * - `campaign_messages` (migration 0028, tracking's): "a campaign's messages", which the inbox's
 *   `responded` reads instead of `messages`. It holds exactly the messages sent for a campaign and
 *   not simulated, and a reader's account and campaign still reach tracking's partial index through
 *   it (no sequential scan of the day that holds them).
 * - contacts' views (migration 0029), which campaigns and the inbox read: the probes through them
 *   are one index probe each, and a list read FOR SHARE through its view holds the list row.
 */
import { QueryTypes } from "sequelize";
import { inTransaction, migrator } from "../../lib/db/db";
import { writeItems } from "../../services/tracking/tracking.writes";
import { createTestDatabase, heldOpen, itWithPostgres, type TestDatabase } from "../helpers/db";

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
}, 60_000);
afterAll(() => t.drop());

const q = <T extends object>(sql: string, bind: unknown[] = []) => t.db.sequelize.query<T>(sql, { bind, type: QueryTypes.SELECT });

it("holds the messages sent for a campaign and not simulated, through the campaign index", async () => {
  const sentAt = new Date().toISOString();
  const m = (id: string, extra: Record<string, unknown>) => ({
    kind: "message" as const,
    message: { companyId: "views", channel: "RCS" as const, customerMessageId: id, destination: "+351911111111", ...extra },
  });
  await inTransaction(t.db.sequelize, (exec) =>
    writeItems(exec, [
      m("kept", { campaignId: "c-1", sentAt }),
      m("simulated", { campaignId: "c-1", sentAt, simulation: true }),
      m("not-a-campaign", { sentAt }),
      // The account's other traffic: what makes the campaign index the way in.
      ...Array.from({ length: 3000 }, (_, i) => m(`other-${i}`, { sentAt, destination: `+3519${String(i).padStart(8, "0")}` })),
    ]),
  );
  await t.db.sequelize.query(`ANALYZE messages`);
  expect(await q(`SELECT company_id, campaign_id, channel, destination FROM campaign_messages WHERE company_id = 'views'`)).toEqual([
    { company_id: "views", campaign_id: "c-1", channel: "RCS", destination: "+351911111111" },
  ]);
  const plan = await q<{ "QUERY PLAN": string }>(
    `EXPLAIN SELECT DISTINCT destination FROM campaign_messages WHERE company_id = 'views' AND campaign_id = 'c-1'`,
  );
  const text = plan.map((r) => r["QUERY PLAN"]).join("\n");
  // Each day's copy of messages_history_campaign (company_id, campaign_id, sent_at, id) is named after its partition.
  // Today's day, which holds the rows, is read through it (an empty day may be scanned: it costs nothing).
  const today = `messages_p${new Date().toISOString().slice(0, 10).replaceAll("-", "")}`;
  expect(text).toContain(`Scan using ${today}_company_id_campaign_id_sent_at_id_idx`);
  expect(text).toMatch(/Index Cond: \(\(company_id = 'views'::text\) AND \(campaign_id = 'c-1'::text\)\)/);
  expect(text).not.toContain(`Seq Scan on ${today}`);
});

itWithPostgres("locks a list read FOR SHARE through contacts_live_lists: its deletion waits", async () => {
  const [{ id }] = await q<{ id: string }>(`INSERT INTO contact_lists (company_id, name) VALUES ('views', 'L') RETURNING id`);
  const reader = await heldOpen(t.db.sequelize, async (exec) =>
    expect(await exec(`SELECT l.id FROM contacts_live_lists l WHERE l.company_id = 'views' AND l.id = $1 FOR SHARE`, [id])).toHaveLength(1),
  );
  const outcome = await inTransaction(t.db.sequelize, async (exec) => {
    await exec(`SET LOCAL lock_timeout = '200ms'`);
    return exec(`UPDATE contact_lists SET deleted_at = now() WHERE company_id = 'views' AND id = $1`, [id]).then(
      () => "deleted",
      (err: { parent?: { code?: string } }) => err.parent?.code,
    );
  });
  expect(outcome).toBe("55P03");
  await reader.release();
});

it("reaches a contact and an opt-out through contacts' views by one index probe", async () => {
  // An account's contacts and opt-outs, so that the planner weighs real tables.
  await q(
    `INSERT INTO contacts (id, company_id, phone_number) SELECT gen_random_uuid(), 'views', '+3519' || lpad(i::text, 8, '0') FROM generate_series(1, 3000) i`,
  );
  await q(
    `INSERT INTO opt_outs (company_id, channel, phone_number, opted_out, source) SELECT 'views', 'SMS', '+3519' || lpad(i::text, 8, '0'), true, 'API' FROM generate_series(1, 3000) i`,
  );
  await q(`ANALYZE contacts`);
  await q(`ANALYZE opt_outs`);
  const plans: string[] = [];
  for (const sql of [
    `SELECT 1 FROM contacts_existing e WHERE e.company_id = 'views' AND e.id = '00000000-0000-4000-8000-000000000001'`,
    `SELECT 1 FROM contacts_opted_out o WHERE o.company_id = 'views' AND o.channel = 'SMS' AND o.phone_number = '+351911111111'`,
    `SELECT 1 FROM contacts_reachable c WHERE c.company_id = 'views' AND c.id = '00000000-0000-4000-8000-000000000001'`,
  ]) {
    const rows = await q<{ "QUERY PLAN": string }>(`EXPLAIN ${sql}`);
    plans.push(rows.map((r) => r["QUERY PLAN"]).join("\n"));
  }
  for (const p of plans) {
    expect(p).toMatch(/^Index (Only )?Scan using \w+ on (contacts|opt_outs)/);
    expect(p).toMatch(/Index Cond: \(\(company_id = 'views'::text\) AND \((id|channel) = /);
    expect(p).not.toContain("Seq Scan");
  }
});

it("is migrations 0028 and 0029: down drops the views, up makes them again", async () => {
  const views = `SELECT to_regclass('campaign_messages')::text AS a, to_regclass('contacts_opted_out')::text AS b, to_regclass('contacts_live_list_members')::text AS c`;
  await migrator(t.db).down({ to: "20261201-0028-campaign-messages-view" });
  expect(await q(views)).toEqual([{ a: null, b: null, c: null }]);
  await migrator(t.db).up();
  expect(await q(views)).toEqual([{ a: "campaign_messages", b: "contacts_opted_out", c: "contacts_live_list_members" }]);
});
