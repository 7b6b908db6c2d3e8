/**
 * Tables built to grow: every statement that polling, receipts, reads and the history run is
 * recorded as the code really issues it, then EXPLAINed against 120,000 analysed messages spread
 * over 3 daily partitions; none may read `messages` (any of its partitions) or `message_keys` with
 * a sequential scan, and a lookup by id reads only the partitions of its ids' days.
 */
import { QueryTypes, type Sequelize } from "sequelize";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { historyPage, statusesOf } from "../../services/tracking/tracking.queries";
import { purgeBefore } from "../../services/tracking/tracking.days";
import type { IngestItem } from "../../services/tracking/tracking.fold";
import { writeItems } from "../../services/tracking/tracking.writes";
import { inTransaction, queryRows, type Exec } from "../../lib/db/db";
import { PREPARED_PER_SESSION } from "../../lib/db/prepared";

let tdb: TestDatabase;
let sequelize: Sequelize;

beforeAll(async () => {
  tdb = await createTestDatabase();
  sequelize = tdb.db.sequelize;
  // 60 accounts x 2000 messages over three channels (m-g is SMS when g % 3 = 0, RCS when 1, WhatsApp when 2), some campaigns, one month of sentAt.
  // Stored on three days ((g / 7) % 3 days after 2026-10-01): three partitions of 40,000, as tracking makes them.
  await sequelize.query(`SELECT ensure_message_partitions('2026-10-01', '2026-10-03')`);
  await sequelize.query(`
    INSERT INTO messages (id, company_id, channel, customer_message_id, destination, sent_at, text, campaign_id, status_code)
    SELECT message_id_floor(timestamptz '2026-10-01' + ((g / 7) % 3 || ' days')::interval) | g,
           'co-' || (g % 60), (ARRAY['SMS','RCS','WHATSAPP'])[1 + g % 3], 'm-' || g,
           '+3519' || lpad((g % 50000)::text, 8, '0'), timestamptz '2026-10-01' + (g || ' seconds')::interval * 20,
           'text ' || g, CASE WHEN g % 7 = 0 THEN 'camp-' || (g % 21) END, CASE WHEN g % 3 = 0 THEN 1 ELSE 0 END
      FROM generate_series(1, 120000) AS g`);
  await sequelize.query(
    `INSERT INTO message_keys (company_id, channel, customer_message_id, id) SELECT company_id, channel, customer_message_id, id FROM messages`,
  );
  await sequelize.query(`ANALYZE messages; ANALYZE message_keys`);
}, 120_000);
afterAll(() => tdb?.drop());

interface Recorded {
  sql: string;
  bind: unknown[];
}

/** A Sequelize whose queries run as usual and are also recorded. */
function recording(): { proxy: Sequelize; seen: Recorded[] } {
  const seen: Recorded[] = [];
  const proxy = new Proxy(sequelize, {
    get(target, prop, receiver) {
      if (prop === "query") {
        return (sql: string, opts: { bind?: unknown[] } = {}) => {
          seen.push({ sql, bind: opts.bind ?? [] });
          return target.query(sql, opts as never);
        };
      }
      return Reflect.get(target, prop, receiver);
    },
  });
  return { proxy, seen };
}

interface PlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  "Index Name"?: string;
  Plans?: PlanNode[];
}

function nodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodes)];
}

async function plansOf(seen: Recorded[]): Promise<Array<{ sql: string; nodes: PlanNode[] }>> {
  const out = [];
  for (const r of seen) {
    if (!/\bmessages\b|\bmessage_keys\b/.test(r.sql)) continue;
    const [row] = await sequelize.query<{ "QUERY PLAN": Array<{ Plan: PlanNode }> }>(`EXPLAIN (FORMAT JSON) ${r.sql}`, {
      bind: r.bind,
      type: QueryTypes.SELECT,
    });
    const plan = row!["QUERY PLAN"];
    out.push({ sql: r.sql, nodes: nodes((typeof plan === "string" ? JSON.parse(plan) : plan)[0].Plan) });
  }
  return out;
}

function expectNoSeqScanOfMessages(plans: Array<{ sql: string; nodes: PlanNode[] }>) {
  expect(plans.length).toBeGreaterThan(0);
  for (const p of plans) {
    // The days made ahead are empty, today's holds only what a test wrote: a scan of their page or two is the planner's right choice.
    const scans = p.nodes.filter((n) => n["Node Type"] === "Seq Scan" && /^(messages(_p2026100[123])?|message_keys)$/.test(n["Relation Name"] ?? ""));
    if (scans.length > 0) throw new Error(`sequential scan of ${scans.map((n) => n["Relation Name"]).join(", ")} in:\n${p.sql}`);
  }
}

const partitionsRead = (plan: { nodes: PlanNode[] }) => new Set(plan.nodes.map((n) => n["Relation Name"]).filter((r) => /^messages_p\d{8}$/.test(r ?? "")));

it("polls one id and 1000 ids through the keys, then only their days' partitions", async () => {
  const { proxy, seen } = recording();
  await statusesOf(proxy, "co-7", "RCS", ["m-7"]);
  await statusesOf(
    proxy,
    "co-7",
    "RCS",
    Array.from({ length: 1000 }, (_, i) => `m-${i * 60 + 7}`),
  );
  const plans = await plansOf(seen);
  expectNoSeqScanOfMessages(plans);
  expect(plans.flatMap((p) => p.nodes.map((n) => n["Index Name"]))).toContain("message_keys_pkey");
  // m-7 was stored on 2026-10-02: one partition. The 1000 ids span the three days: each of the 4
  // statements reads each of its days' partitions once, with that day's ids only.
  const reads = plans.filter((p) => /FROM messages m/.test(p.sql));
  expect(reads.length).toBe(5);
  expect([...partitionsRead(reads[0]!)]).toEqual(["messages_p20261002"]);
  for (const r of reads.slice(1)) {
    const scans = r.nodes.filter((n) => /^messages_p\d{8}$/.test(n["Relation Name"] ?? ""));
    expect(scans.length).toBe(partitionsRead(r).size);
  }
  expect(new Set(reads.slice(1).flatMap((r) => [...partitionsRead(r)])).size).toBe(3);
});

it("applies receipts and reads (registered or not) without scanning messages", async () => {
  const seen: Recorded[] = [];
  const items: IngestItem[] = [
    { kind: "message", message: { companyId: "co-1", channel: "SMS", customerMessageId: "new-1", destination: "+351911111111" } },
    {
      kind: "receipt",
      channel: "SMS",
      companyId: "co-3",
      messageId: "m-3",
      destination: "+351900000003",
      code: 3,
      date: "2026-11-01T00:00:00.000Z",
      totalParts: 1,
      numPart: 1,
    },
    {
      kind: "receipt",
      channel: "SMS",
      companyId: "co-1",
      messageId: "not-yet-registered",
      destination: "+351900000001",
      code: 3,
      date: "2026-11-01T00:00:00.000Z",
      totalParts: 1,
      numPart: 1,
    },
    { kind: "read", channel: "RCS", companyId: "co-4", messageId: "m-4", destination: "+351900000004", date: "2026-11-01T00:00:00.000Z" },
  ];
  await inTransaction(sequelize, (exec) => {
    const recorded: Exec = (sql, params) => {
      seen.push({ sql, bind: params ?? [] });
      return exec(sql, params);
    };
    return writeItems(recorded, items);
  });
  const plans = await plansOf(seen);
  expect(plans.some((p) => /FOR UPDATE/.test(p.sql))).toBe(true);
  expect(plans.some((p) => /UPDATE messages/.test(p.sql))).toBe(true);
  expectNoSeqScanOfMessages(plans);
});

it.each([
  ["no filter", {}],
  ["a channel", { channel: "RCS" as const }],
  ["a status", { status: "ACCEPTED" as const }],
  ["a destination", { destination: "+351900000007" }],
  ["a campaign", { campaignId: "camp-7" }],
  ["a time range", { from: "2026-10-05T00:00:00Z", to: "2026-10-06T00:00:00Z" }],
])("pages the history with %s on an index, the next page too", async (_name, filter) => {
  const seen: Recorded[] = [];
  const recorded: Exec = (sql, params) => {
    seen.push({ sql, bind: params ?? [] });
    return queryRows(sequelize, sql, params);
  };
  const first = await historyPage(recorded, "co-7", ["SMS", "RCS", "WHATSAPP"], { limit: 20, ...filter });
  if (first.nextCursor) await historyPage(recorded, "co-7", ["SMS", "RCS", "WHATSAPP"], { limit: 20, ...filter, cursor: first.nextCursor });
  const plans = await plansOf(seen);
  expectNoSeqScanOfMessages(plans);
  for (const p of plans) {
    expect(p.sql).not.toMatch(/\bOFFSET\b|count\(/i);
    // Over the many rows of an unselective filter, keyset pagination reads an index in order and
    // stops at the limit: nothing to sort. (For a few hundred rows the planner may rightly sort.)
    if (!("destination" in filter || "campaignId" in filter || "from" in filter)) expect(p.nodes.map((n) => n["Node Type"])).not.toContain("Sort");
  }
});

describe("the history as a prepared statement (planned once per connection)", () => {
  const filters = [
    {},
    { channel: "RCS" as const },
    { status: "ACCEPTED" as const },
    { destination: "+351900000007" },
    { campaignId: "camp-7" },
    { from: "2026-10-05T00:00:00Z", to: "2026-10-06T00:00:00Z" },
  ];

  // co-6's messages are SMS, ACCEPTED; co-7's RCS (its status other).
  it.each(filters.map((f) => [JSON.stringify(f), f]))("answers every page as the statement planned each time does, with %s", async (_n, filter) => {
    const company = "status" in filter ? "co-6" : "co-7";
    const walk = async (prepared: boolean) => {
      const pages: unknown[] = [];
      let cursor: string | undefined;
      for (let i = 0; i < 4; i++) {
        const page = await inTransaction(sequelize, (exec) =>
          historyPage(exec, company, ["SMS", "RCS", "WHATSAPP"], { limit: 7, ...filter, ...(cursor ? { cursor } : {}) }, { prepared }),
        );
        pages.push(page);
        if (!page.nextCursor) break;
        cursor = page.nextCursor;
      }
      return pages;
    };
    const planned = await walk(false);
    expect((planned[0] as { data: unknown[] }).data.length).toBeGreaterThan(0);
    expect(await walk(true)).toEqual(planned);
  });

  it("is prepared once per connection, PostgreSQL's generic plan then reads an index, and a connection keeps at most a few", async () => {
    await inTransaction(sequelize, async (exec) => {
      const seen: string[] = [];
      const recorded: Exec = (sql, params) => {
        seen.push(sql);
        return exec(sql, params);
      };
      const q = { limit: 20 };
      await historyPage(recorded, "co-8", ["SMS", "RCS", "WHATSAPP"], q, { prepared: true });
      const prepare = seen.find((sql) => sql.startsWith("PREPARE history_"))!;
      // The page size is in the text: as a parameter, the generic plan would be made for a tenth of the rows.
      expect(prepare).toMatch(/LIMIT 21$/);
      const execute = seen.find((sql) => sql.startsWith("EXECUTE history_"))!;
      expect(execute).toContain("'co-8'::text");
      // The same statement again: no second PREPARE. After PostgreSQL's five custom plans, its generic plan.
      seen.length = 0;
      for (let i = 0; i < 7; i++) await historyPage(recorded, `co-${10 + i}`, ["SMS", "RCS", "WHATSAPP"], q, { prepared: true });
      expect(seen.filter((sql) => sql.startsWith("PREPARE"))).toEqual([]);
      const name = /^EXECUTE (history_[0-9a-f]+)\(/.exec(execute)![1];
      const [used] = await exec<{ generic_plans: number; custom_plans: number }>(
        `SELECT generic_plans::int, custom_plans::int FROM pg_prepared_statements WHERE name = $1`,
        [name],
      );
      expect(used!.generic_plans).toBeGreaterThanOrEqual(1);
      const [row] = await exec<{ "QUERY PLAN": Array<{ Plan: PlanNode }> }>(`EXPLAIN (FORMAT JSON) ${seen.find((sql) => sql.startsWith("EXECUTE"))!}`);
      const plan = row!["QUERY PLAN"];
      const planNodes = nodes((typeof plan === "string" ? JSON.parse(plan) : plan)[0].Plan);
      expectNoSeqScanOfMessages([{ sql: execute, nodes: planNodes }]);
      expect(planNodes.map((n) => n["Node Type"])).not.toContain("Sort");
      // Many shapes of it: the session keeps at most PREPARED_PER_SESSION.
      for (const f of filters) await historyPage(exec, "co-7", ["SMS", "RCS", "WHATSAPP"], { limit: 5, ...f }, { prepared: true });
      const [n] = await exec<{ n: number }>(`SELECT count(*)::int AS n FROM pg_prepared_statements WHERE name LIKE 'history\\_%'`);
      expect(n!.n).toBe(PREPARED_PER_SESSION);
    });
  });

  it("answers a bad value as data, never as SQL", async () => {
    const page = await inTransaction(sequelize, (exec) =>
      historyPage(exec, "co-7'; DROP TABLE messages; --", ["SMS"], { limit: 5, destination: "+3519'--" }, { prepared: true }),
    );
    expect(page.data).toEqual([]);
    const [still] = await queryRows<{ n: number }>(sequelize, `SELECT count(*)::int AS n FROM messages`);
    expect(still!.n).toBeGreaterThan(0);
  });
});

// Last: it retires the first of the three days.
it("retires a day's keys by their ids through the index over them, a batch a statement, then drops the day", async () => {
  const count = async () => {
    const rows = await queryRows<{ day: string; n: number }>(
      sequelize,
      `SELECT to_char(to_timestamp(((id >> 22) + 1577836800000) / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, count(*)::int AS n FROM message_keys GROUP BY 1 ORDER BY 1`,
    );
    return Object.fromEntries(rows.map((r) => [r.day, r.n]));
  };
  const before = await count();
  expect(before["2026-10-01"]).toBeGreaterThan(30_000);
  // Each DELETE planned just before it runs (afterwards its keys are gone).
  const plans: Array<{ sql: string; nodes: PlanNode[] }> = [];
  const planning = new Proxy(sequelize, {
    get(target, prop, receiver) {
      if (prop !== "query") return Reflect.get(target, prop, receiver);
      return async (sql: string, opts: { bind?: unknown[] } = {}) => {
        if (/DELETE FROM message_keys/.test(sql)) plans.push(...(await plansOf([{ sql, bind: opts.bind ?? [] }])));
        return target.query(sql, opts as never);
      };
    },
  });
  const out = await purgeBefore(planning, new Date("2026-10-02T00:00:00Z"), 5000);
  expect(out.days).toEqual(["2026-10-01"]);
  expect(out.messages).toBe(before["2026-10-01"]);
  // 5000 keys a statement, and the last, short one.
  expect(out.batches).toBe(Math.floor(before["2026-10-01"]! / 5000) + 1);
  expect(plans.length).toBe(out.batches);
  expectNoSeqScanOfMessages(plans);
  for (const p of plans) expect(p.nodes.filter((n) => n["Index Name"] === "message_keys_id").length).toBe(2);
  const after = await count();
  expect(after["2026-10-01"]).toBeUndefined();
  expect(after["2026-10-02"]).toBe(before["2026-10-02"]);
  expect(after["2026-10-03"]).toBe(before["2026-10-03"]);
  const [gone] = await queryRows<{ t: string | null }>(sequelize, `SELECT to_regclass('messages_p20261001')::text AS t`);
  expect(gone!.t).toBeNull();
});
