/**
 * `campaign_messages` (migration 0028): the read-only view tracking publishes of "a campaign's
 * messages", which the inbox's `responded` reads instead of `messages`. It holds exactly the messages
 * sent for a campaign and not simulated, and a reader's account and campaign still reach tracking's
 * partial index through it (no sequential scan of any day).
 */
import { QueryTypes } from "sequelize";
import { inTransaction, migrator } from "../../lib/db/db";
import { writeItems } from "../../services/tracking/tracking.writes";
import { createTestDatabase, type TestDatabase } from "../helpers/db";

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

it("is migration 0028: down drops the view, up makes it again", async () => {
  await migrator(t.db).down({ to: "20261201-0028-campaign-messages-view" });
  expect(await q(`SELECT to_regclass('campaign_messages') AS v`)).toEqual([{ v: null }]);
  await migrator(t.db).up();
  expect(await q(`SELECT to_regclass('campaign_messages')::text AS v`)).toEqual([{ v: "campaign_messages" }]);
});
