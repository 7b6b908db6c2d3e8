/**
 * bench/scale: the partitioned messages at 10 M and then 100 M rows (issue 33, item 5).
 *
 * Fills `messages` and `message_keys` directly in PostgreSQL (the product's own schema, migrated by
 * the service it starts): the sizes given, spread over DAYS daily partitions ending yesterday and
 * ACCOUNTS accounts. The second size adds rows to the same days. At each size it measures, through
 * the running service:
 *   - ingest: registrations and a receipt each, through the internal ingress in arrays of 500,
 *     4 at a time (objects/s);
 *   - GET /messages/status with 1000 ids, p50/p99: ids of the last two days ("recent", what a
 *     poller asks), and ids spread over every day ("spread", the worst case: a branch per day);
 *   - GET /messages/history (limit 100): the first page, and a deep page (a cursor in the middle of
 *     the account's history), p50/p99;
 *   - retiring the oldest day: tracking's retention (its keys deleted by id, 5000 a statement
 *     through the index of migration 0035, then the partition dropped), beside the next day's keys
 *     walked through its rows as the retention did before 0035, and the batched DELETE of its rows
 *     (5000 per statement) that partitions replaced.
 * Each size ends with a line `RESULT rows=<n> ...`. The database is dropped at the end.
 *
 *   npm run bench:scale [-- --sizes 10000000,100000000 --days 400 --accounts 10]
 *   BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres (default)
 *
 * Targets: at 100 M rows polling and history p99 within 1.5x of their 10 M figures and under 50 ms;
 * retiring a day under 1 s. Disk: about 400 bytes a row (37 GB at 100 M); the run needs roughly
 * 45 minutes on 2 cores at 100 M.
 */
import { parseArgs } from "node:util";
import pg from "pg";
import { Sequelize } from "sequelize";
import { createBenchDatabase } from "../database";
import { inArrays } from "../ingress";
import { startService } from "../service";
import { purgeBefore } from "../../services/tracking/tracking.days";

const { values } = parseArgs({
  options: {
    sizes: { type: "string", default: "10000000,100000000" },
    days: { type: "string", default: "400" },
    accounts: { type: "string", default: "10" },
    calls: { type: "string", default: "200" },
  },
});
const SIZES = values.sizes!.split(",").map(Number);
const DAYS = Number(values.days);
const ACCOUNTS = Number(values.accounts);
const CALLS = Number(values.calls);
const DAY_MS = 86_400_000;
const TODAY = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate());
/** Day d (0 = the oldest) starts at this instant. */
const dayStart = (d: number) => TODAY - (DAYS - d) * DAY_MS;

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
const fmt = (t: number[]) => {
  const s = [...t].sort((a, b) => a - b);
  return { p50: percentile(s, 50), p99: percentile(s, 99) };
};

/**
 * Rows [from, to) of every day not retired yet: row j of day d is account j % ACCOUNTS, customerMessageId `s-d-j`,
 * sent at the day's start plus j x 300 ms (so 288,000 a day fit in order), stored under the id of
 * that instant, its key beside it. Indexes are dropped for the load and built again after it.
 */
async function fill(db: pg.Client, from: number, to: number, firstDay: number) {
  const { rows: idx } = await db.query<{ indexdef: string; indexname: string }>(
    `SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'messages' AND indexname LIKE 'messages_history%'`,
  );
  for (const i of idx) await db.query(`DROP INDEX ${i.indexname}`);
  await db.query(`ALTER TABLE message_keys DROP CONSTRAINT message_keys_pkey`);
  for (let d = firstDay; d < DAYS; d++) {
    const start = new Date(dayStart(d)).toISOString();
    await db.query(
      `WITH ins AS (
         INSERT INTO messages (id, company_id, channel, customer_message_id, destination, sent_at, status_code, delivery_date, price, created_at)
         SELECT message_id_floor($1::timestamptz + j * interval '300 milliseconds') | j, 'scale-' || (j % $4), 'SMS', 's-' || $5 || '-' || j,
                '+4930' || lpad((j % 1000000)::text, 8, '0'), $1::timestamptz + j * interval '300 milliseconds',
                CASE WHEN j % 10 = 0 THEN 1 ELSE 3 END, CASE WHEN j % 10 = 0 THEN NULL ELSE $1::timestamptz + j * interval '300 milliseconds' + interval '5 seconds' END,
                0.04, $1::timestamptz + j * interval '300 milliseconds'
           FROM generate_series($2::int, $3::int - 1) AS j
         RETURNING company_id, channel, customer_message_id, id)
       INSERT INTO message_keys (company_id, channel, customer_message_id, id) SELECT * FROM ins`,
      [start, from, to, ACCOUNTS, d],
    );
  }
  await db.query(`ALTER TABLE message_keys ADD PRIMARY KEY (company_id, channel, customer_message_id) INCLUDE (id)`);
  // A partitioned index reads `ON ONLY messages` in pg_indexes: built as `ON messages`, it is made on every day too.
  for (const i of idx) await db.query(i.indexdef.replace(" ON ONLY ", " ON "));
  await db.query("VACUUM ANALYZE messages");
  await db.query("VACUUM ANALYZE message_keys");
  await db.query("CHECKPOINT");
}

async function timed(n: number, fn: (r: number) => Promise<void>): Promise<number[]> {
  const times: number[] = [];
  for (let r = 0; r < n + 10; r++) {
    const t0 = performance.now();
    await fn(r);
    if (r >= 10) times.push(performance.now() - t0); // the first 10 warm the caches
  }
  return times;
}

async function main() {
  const benchDb = await createBenchDatabase();
  const db = new pg.Client({ connectionString: benchDb.url });
  const port = 3960 + Math.floor(Math.random() * 9);
  try {
    const svc = await startService(benchDb.url, port, { INTERNAL_PORT: String(port + 20), SERVICES: "gateway,auth,tracking", HEAVY_OPS_PER_ACCOUNT: "4" });
    const api = `http://127.0.0.1:${port}/api/partner-gateway/v1`;
    const ingress = `http://127.0.0.1:${port + 20}/internal/v1`;
    await db.connect();
    await db.query(`SELECT ensure_message_partitions($1::date, $2::date)`, [
      new Date(dayStart(0)).toISOString().slice(0, 10),
      new Date(TODAY).toISOString().slice(0, 10),
    ]);
    const key = svc.adminKey("scale-3", "SMS");
    const sequelize = new Sequelize(benchDb.url, { logging: false, dialect: "postgres" });
    console.log(`bench/scale: sizes ${SIZES.map((s) => s.toLocaleString()).join(", ")}, ${DAYS} daily partitions, ${ACCOUNTS} accounts`);

    let perDay = 0;
    let retired = 0;
    let ingested = 0;
    for (const size of SIZES) {
      const want = Math.ceil(size / DAYS);
      const f0 = performance.now();
      await fill(db, perDay, want, retired);
      perDay = want;
      const { rows: sz } = await db.query<{ bytes: string }>(
        `SELECT (SELECT sum(pg_total_relation_size(c.oid)) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'messages'::regclass)
                + pg_total_relation_size('message_keys') AS bytes`,
      );
      const rows = perDay * (DAYS - retired);
      console.log(
        `\n${rows.toLocaleString()} messages (${perDay.toLocaleString()} a day), ${(Number(sz[0]!.bytes) / 2 ** 30).toFixed(1)} GiB with indexes and keys, filled in ${((performance.now() - f0) / 1000).toFixed(0)} s`,
      );

      // Ingest: 20,000 registrations and their receipts, of a new account.
      const n = 20_000;
      const co = `ingest-${ingested++}`;
      const i0 = performance.now();
      await inArrays(
        `${ingress}/messages`,
        n,
        (i) => ({ companyId: co, channel: "SMS", customerMessageId: `i-${i}`, destination: "+4930000000", text: "code 1234" }),
        500,
      );
      await inArrays(
        `${ingress}/receipts/sms`,
        n,
        (i) => ({ companyId: co, MESSAGE_ID: `i-${i}`, DESTINATION: "+4930000000", DELIVERY_STATUS: 3, DELIVERY_DATE: new Date().toISOString() }),
        500,
      );
      const ingest = (2 * n) / ((performance.now() - i0) / 1000);

      // Polling: account scale-3 owns the rows j = 3 (mod ACCOUNTS) of every day.
      const idOf = (d: number) => `s-${d}-${Math.floor(Math.random() * (perDay / ACCOUNTS)) * ACCOUNTS + 3}`;
      const poll = async (ids: string[]) => {
        const res = await fetch(`${api}/messages/status?channel=SMS&ids=${ids.join(",")}`, { headers: { "x-api-key": key } });
        const body = (await res.json()) as { data: Array<{ statusCode: number }> };
        if (res.status !== 200 || body.data.length !== 1000 || body.data.some((s) => s.statusCode === 0)) throw new Error(`status answered ${res.status}`);
      };
      const recent = fmt(await timed(CALLS, () => poll(Array.from({ length: 1000 }, (_, k) => idOf(DAYS - 1 - (k % 2))))));
      const spread = fmt(await timed(CALLS, () => poll(Array.from({ length: 1000 }, () => idOf(retired + Math.floor(Math.random() * (DAYS - retired)))))));

      // History: the first page, and a page whose cursor is in the middle of the account's days.
      const page = async (cursor: string | null) => {
        const res = await fetch(`${api}/messages/history?limit=100${cursor ? `&cursor=${cursor}` : ""}`, { headers: { "x-api-key": key } });
        const body = (await res.json()) as { data: unknown[] };
        if (res.status !== 200 || body.data.length !== 100) throw new Error(`history answered ${res.status}`);
      };
      const first = fmt(await timed(CALLS, () => page(null)));
      const deep = fmt(
        await timed(CALLS, () => {
          const at = new Date(dayStart(Math.floor(DAYS / 2)) + Math.floor(Math.random() * DAY_MS));
          const cursor = Buffer.from(JSON.stringify([at.toISOString().replace("Z", "000Z"), "9223372036854775807"])).toString("base64url");
          return page(cursor);
        }),
      );

      // Retiring a day: the oldest one by tracking's retention; the next one by the batched DELETE it replaces.
      const r0 = performance.now();
      const out = await purgeBefore(sequelize, new Date(dayStart(retired + 1)), 5000);
      const retireMs = performance.now() - r0;
      if (out.days.length !== 1) throw new Error(`retention dropped ${out.days.length} days`);
      retired++;
      const bound = [new Date(dayStart(retired)).toISOString(), new Date(dayStart(retired + 1)).toISOString()];
      const part = `messages_p${bound[0]!.slice(0, 10).replaceAll("-", "")}`;
      // Its keys first, as the retention found them before migration 0035 (the baseline of the keys'
      // part): the day's own rows walked in key order, 5000 a statement, each probing the keys' primary key.
      const w0 = performance.now();
      for (let after = ["", "-9223372036854775808"]; ;) {
        const { rows: walked } = await db.query<{ scanned: string; c: string | null; i: string | null }>(
          `WITH b AS (SELECT company_id, channel, customer_message_id, id FROM ${part} WHERE (company_id, id) > ($1::text, $2::bigint) ORDER BY company_id, id LIMIT 5000),
                gone AS (DELETE FROM message_keys k USING b
                          WHERE k.company_id = b.company_id AND k.channel = b.channel AND k.customer_message_id = b.customer_message_id AND k.id = b.id RETURNING 1),
                last AS (SELECT company_id, id FROM b ORDER BY company_id DESC, id DESC LIMIT 1)
           SELECT (SELECT count(*) FROM gone) AS n, (SELECT count(*) FROM b) AS scanned, (SELECT company_id FROM last) AS c, (SELECT id::text FROM last) AS i`,
          after,
        );
        if (Number(walked[0]!.scanned) < 5000 || walked[0]!.c === null) break;
        after = [walked[0]!.c, walked[0]!.i!];
      }
      const walkMs = performance.now() - w0;
      const b0 = performance.now();
      for (;;) {
        // On the day's own table: a DELETE through the partitioned parent would plan every day per batch.
        const { rowCount } = await db.query(`DELETE FROM ${part} WHERE (company_id, id) IN (SELECT company_id, id FROM ${part} LIMIT 5000)`);
        if ((rowCount ?? 0) < 5000) break;
      }
      const batchedMs = performance.now() - b0;
      await purgeBefore(sequelize, new Date(dayStart(retired + 1)), 5000);
      retired++;

      const ms = (v: number) => v.toFixed(1);
      console.log(`ingest through the ingress (arrays of 500): ${Math.round(ingest).toLocaleString()} objects/s`);
      console.log(`GET /messages/status, 1000 ids of the last 2 days: p50 ${ms(recent.p50)} ms, p99 ${ms(recent.p99)} ms`);
      console.log(`GET /messages/status, 1000 ids over every day:     p50 ${ms(spread.p50)} ms, p99 ${ms(spread.p99)} ms`);
      console.log(`GET /messages/history, first page:                 p50 ${ms(first.p50)} ms, p99 ${ms(first.p99)} ms`);
      console.log(`GET /messages/history, a cursor mid-history:       p50 ${ms(deep.p50)} ms, p99 ${ms(deep.p99)} ms`);
      console.log(
        `retiring a day of ${perDay.toLocaleString()}: ${ms(retireMs)} ms (keys ${out.batches} batches, then the drop); the next day's keys walked as before migration 0035: ${ms(walkMs)} ms (${(walkMs / retireMs).toFixed(1)}x); batched DELETE of a day: ${ms(batchedMs)} ms`,
      );
      console.log(
        `RESULT rows=${rows} ingest_per_s=${Math.round(ingest)} status_recent_p99_ms=${ms(recent.p99)} status_spread_p99_ms=${ms(spread.p99)} history_first_p99_ms=${ms(first.p99)} history_deep_p99_ms=${ms(deep.p99)} retire_day_ms=${ms(retireMs)} keys_walk_before_0035_ms=${ms(walkMs)} batched_delete_day_ms=${ms(batchedMs)}`,
      );
    }
    await sequelize.close();
    await svc.stop();
  } finally {
    await db.end().catch(() => undefined);
    await benchDb.drop();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
