/**
 * The sender's outcome statement reaches a batch's recipients by their key once the statistics know
 * the campaign. The case that broke it: statistics taken when `campaign_recipients` held a few rows,
 * then a confirm's snapshot of thousands. Joined to the outcomes alone, the planner read every
 * recipient of the campaign per batch (bench:campaign at 100,000 recipients: 136 ms a batch of 500,
 * a third of PostgreSQL's time). The confirm's ANALYZE after a large snapshot
 * (refreshRecipientStats) fixes it; the case fails without it.
 */
import { randomUUID } from "node:crypto";
import { QueryTypes } from "sequelize";
import { inTransaction } from "../../lib/db/db";
import { refreshRecipientStats } from "../../services/campaigns/campaigns.queries";
import { claimRecipients, outcomesParams, RECORD_OUTCOMES_SQL, recordOutcomes } from "../../services/campaigns/campaigns.sender.queries";
import { createTestDatabase, type TestDatabase } from "../helpers/db";

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
}, 60_000);
afterAll(() => t.drop());

const N = 20_000;
const q = <T extends object>(sql: string, bind: unknown[] = []) => t.db.sequelize.query<T>(sql, { bind, type: QueryTypes.SELECT });

/** Rows a plan read and threw away on `campaign_recipients`, over all of its nodes. */
function removedOnRecipients(node: Record<string, unknown>): number {
  let n = 0;
  if (node["Relation Name"] === "campaign_recipients") n += Number(node["Rows Removed by Filter"] ?? 0) + Number(node["Rows Removed by Index Recheck"] ?? 0);
  for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) n += removedOnRecipients(child);
  return n;
}

it("writes a batch's outcomes by key probes after a snapshot the statistics have not seen", async () => {
  const insertCampaign = async (n: number) => {
    const id = randomUUID();
    await q(
      `INSERT INTO campaigns (id, company_id, name, channel, status, contact_list_ids, text, audience) VALUES ($1, 'plans', 'C', 'SMS', 'SENDING', '{1}', 'hi', $2)`,
      [id, n],
    );
    await q(
      `INSERT INTO campaign_recipients (company_id, campaign_id, contact_id, destination) SELECT 'plans', $1, gen_random_uuid(), '+35191' || lpad(i::text, 7, '0') FROM generate_series(1, $2::int) i`,
      [id, n],
    );
    return id;
  };
  // Statistics of a table with a few rows, then a large snapshot they have not seen.
  await insertCampaign(3);
  await q(`ANALYZE campaign_recipients`);
  const campaignId = await insertCampaign(N);
  // What the confirm does after its snapshot (campaigns.actions.ts); without it the plan below
  // reads all N recipients.
  expect(await refreshRecipientStats(t.db.sequelize, N)).toBe(true);
  // A small snapshot is left to autovacuum.
  expect(await refreshRecipientStats(t.db.sequelize, 10)).toBe(false);

  const token = `test/${randomUUID()}`;
  const rows = await claimRecipients(t.db.sequelize, { campaignId, token, leaseMs: 60_000, size: 20, cursor: null });
  expect(rows).toHaveLength(20);
  const o = {
    campaignId,
    companyId: "plans",
    channel: "SMS" as const,
    token,
    results: rows.map((r) => ({ id: r.contact_id, ok: true, skip: false, final: false, wait: 0, error: null })),
    retryBaseMs: 2000,
    maxAttempts: 3,
  };

  // The plan, run for real and rolled back (the transaction ends in an error).
  const plan = await inTransaction(t.db.sequelize, async (exec) => {
    const [row] = (await exec(`EXPLAIN (ANALYZE, FORMAT JSON) ${RECORD_OUTCOMES_SQL}`, outcomesParams(o))) as {
      "QUERY PLAN": [{ Plan: Record<string, unknown> }];
    }[];
    throw Object.assign(new Error("rollback"), { plan: row!["QUERY PLAN"][0].Plan });
  }).catch((e: { plan?: Record<string, unknown> }) => {
    if (!e.plan) throw e;
    return e.plan;
  });
  // Each id found by its key: no recipient read only to be filtered out (the bug read all N).
  expect(removedOnRecipients(plan)).toBeLessThan(50);

  // And the statement still does its work.
  const counts = await recordOutcomes(t.db.sequelize, o);
  expect(counts).toMatchObject({ sent: 20, failed: 0, written: 20 });
  const [left] = await q<{ n: number }>(`SELECT count(*)::int AS n FROM campaign_recipients WHERE campaign_id = $1 AND status = 'PENDING'`, [campaignId]);
  expect(left!.n).toBe(N - 20);
});
