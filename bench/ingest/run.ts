/**
 * bench/ingest: the internal ingress end to end, against PostgreSQL floors measured in the same run
 * on the same fresh database and the same table shape (messages' columns and indexes).
 *
 * Each phase registers N SMS messages and posts one receipt for each (2N objects):
 *   (a) through the ingress, one object per request, 50 concurrent connections (autocannon);
 *   (b) through the ingress, arrays of 500, 4 concurrent requests;
 *   floor (batched): `pg`, INSERT ... ON CONFLICT of the same rows, 500 per statement, 4 clients;
 *   floor (single-row): `pg`, one INSERT ... ON CONFLICT per row (autocommit), 10 clients.
 * Then `GET /messages/status` with 1000 ids against a table of STATUS_ROWS messages (p50/p99).
 *
 *   npm run bench:ingest [-- --messages 200000 --status-rows 10000000]
 *   BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres (default)
 *
 * Targets: (b) >= 0.5x the batched floor; (a) >= 1.0x the single-row floor; bulk status of 1000
 * ids p99 < 50 ms with 10,000,000 message rows.
 */
import autocannon from "autocannon";
import os from "node:os";
import { parseArgs } from "node:util";
import pg from "pg";
import { createBenchDatabase } from "../database";
import { startService } from "../service";

const { values } = parseArgs({
  options: {
    messages: { type: "string", default: "200000" },
    "status-rows": { type: "string", default: "10000000" },
    only: { type: "string", default: "a,b" },
  },
});
const PHASES = new Set(values.only!.split(","));
const N = Number(values.messages);
const STATUS_ROWS = Number(values["status-rows"]);
const BATCH = 500;

const phone = (i: number) => `+4930${String(i).padStart(8, "0")}`;
const registration = (co: string, i: number) => ({
  companyId: co,
  channel: "SMS",
  customerMessageId: `m-${i}`,
  destination: phone(i),
  sentAt: "2026-11-20T10:00:00Z",
  text: "Your code is 1234",
});
const receipt = (co: string, i: number) => ({
  companyId: co,
  MESSAGE_ID: `m-${i}`,
  DESTINATION: phone(i),
  DELIVERY_STATUS: 3,
  DELIVERY_DATE: "2026-11-20T10:00:05Z",
  PRICE: 0.04,
});

async function startIngress(dbUrl: string) {
  const port = 3980 + Math.floor(Math.random() * 9);
  const internalPort = port + 10;
  // No notifier: the events stay in the outbox, to be counted at the end.
  const svc = await startService(dbUrl, port, { INTERNAL_PORT: String(internalPort), SERVICES: "gateway,auth,tracking" });
  return { ...svc, ingress: `http://127.0.0.1:${internalPort}/internal/v1` };
}

/** One object per request, `connections` at a time, every answer must be 202. */
async function singles(url: string, n: number, body: (i: number) => unknown, connections: number): Promise<number> {
  let i = 0;
  const t0 = performance.now();
  // Timed to the last answer: autocannon itself ends a run of `amount` requests on its next
  // once-a-second tick, which would round every run up to whole seconds.
  let last = t0;
  const run = autocannon({
    url,
    connections,
    amount: n,
    method: "POST",
    headers: { "content-type": "application/json" },
    requests: [{ setupRequest: (req) => ({ ...req, body: JSON.stringify(body(i++)) }) }],
  }) as unknown as Promise<autocannon.Result> & { on(event: "response", listener: () => void): void };
  run.on("response", () => (last = performance.now()));
  const result = await run;
  const s = (last - t0) / 1000;
  if (result.non2xx > 0 || result.errors > 0 || result["2xx"] !== n)
    throw new Error(`singles: ${result["2xx"]} 2xx, ${result.non2xx} non-2xx, ${result.errors} errors`);
  return s;
}

/** Arrays of BATCH objects, `concurrency` requests at a time. */
async function arrays(url: string, n: number, body: (i: number) => unknown, concurrency: number): Promise<number> {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (;;) {
        const from = next;
        if (from >= n) return;
        next += BATCH;
        const items = Array.from({ length: Math.min(BATCH, n - from) }, (_, k) => body(from + k));
        const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(items) });
        if (r.status !== 202) throw new Error(`arrays: ${r.status} ${await r.text()}`);
        await r.arrayBuffer().catch(() => undefined);
      }
    }),
  );
  return (performance.now() - t0) / 1000;
}

const REG_SQL = `INSERT INTO TBL (company_id, channel, customer_message_id, destination, sent_at, text, status_code)
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::text[], $7::smallint[])
  ON CONFLICT (company_id, channel, customer_message_id) DO NOTHING`;
const RCPT_SQL = `INSERT INTO TBL AS m (company_id, channel, customer_message_id, destination, status_code, delivery_date, price)
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::smallint[], $6::timestamptz[], $7::numeric[])
  ON CONFLICT (company_id, channel, customer_message_id) DO UPDATE SET status_code = EXCLUDED.status_code, delivery_date = EXCLUDED.delivery_date, price = EXCLUDED.price, updated_at = now()`;

function columns(co: string, ids: number[], kind: "reg" | "rcpt"): unknown[] {
  const c = ids.map(() => co);
  const ch = ids.map(() => "SMS");
  const mid = ids.map((i) => `m-${i}`);
  const d = ids.map(phone);
  if (kind === "reg") return [c, ch, mid, d, ids.map(() => "2026-11-20T10:00:00Z"), ids.map(() => "Your code is 1234"), ids.map(() => 1)];
  return [c, ch, mid, d, ids.map(() => 3), ids.map(() => "2026-11-20T10:00:05Z"), ids.map(() => 0.04)];
}

/** The floor: the same rows straight into a copy of the table with `pg`, `clients` connections, `perStatement` rows each. */
async function floor(dbUrl: string, table: string, n: number, clients: number, perStatement: number): Promise<{ total: number; reg: number }> {
  const pool = Array.from({ length: clients }, () => new pg.Client({ connectionString: dbUrl }));
  await Promise.all(pool.map((c) => c.connect()));
  const t0 = performance.now();
  let reg = 0;
  for (const kind of ["reg", "rcpt"] as const) {
    if (kind === "rcpt") reg = (performance.now() - t0) / 1000;
    const sql = (kind === "reg" ? REG_SQL : RCPT_SQL).replace("TBL", table);
    let next = 0;
    await Promise.all(
      pool.map(async (client) => {
        for (;;) {
          const from = next;
          if (from >= n) return;
          next += perStatement;
          const ids = Array.from({ length: Math.min(perStatement, n - from) }, (_, k) => from + k);
          await client.query(sql, columns("floor", ids, kind));
        }
      }),
    );
  }
  const total = (performance.now() - t0) / 1000;
  await Promise.all(pool.map((c) => c.end()));
  return { total, reg };
}

async function fillForStatus(db: pg.Client, rows: number) {
  // The indexes are dropped for the load and built again after it (faster than row by row), exactly as declared.
  const { rows: idx } = await db.query<{ indexdef: string; indexname: string }>(
    `SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'messages' AND indexname LIKE 'messages_history%'`,
  );
  for (const i of idx) await db.query(`DROP INDEX ${i.indexname}`);
  const chunk = 1_000_000;
  for (let from = 0; from < rows; from += chunk) {
    await db.query(
      `INSERT INTO messages (company_id, channel, customer_message_id, destination, sent_at, status_code, delivery_date, created_at)
       SELECT 'bulk-' || (g % 10), 'SMS', 's-' || g, '+4930' || lpad((g % 100000000)::text, 8, '0'),
              timestamptz '2026-01-01' + g * interval '1 second', CASE WHEN g % 4 = 0 THEN 1 ELSE 3 END,
              CASE WHEN g % 4 = 0 THEN NULL ELSE timestamptz '2026-01-01' + g * interval '1 second' + interval '5 seconds' END,
              timestamptz '2026-01-01' + g * interval '1 second'
         FROM generate_series($1::bigint, $2::bigint) AS g`,
      [from, Math.min(from + chunk, rows) - 1],
    );
  }
  // Their keys (migration 0023: polling finds a message through message_keys, then its day by id).
  await db.query(
    `INSERT INTO message_keys (company_id, channel, customer_message_id, id) SELECT company_id, channel, customer_message_id, id FROM messages WHERE company_id LIKE 'bulk-%'`,
  );
  // A partitioned index reads `ON ONLY messages` in pg_indexes: built as `ON messages`, it is made on every day too.
  for (const i of idx) await db.query(i.indexdef.replace(" ON ONLY ", " ON "));
  await db.query("VACUUM ANALYZE messages");
  await db.query("VACUUM ANALYZE message_keys");
  // The load leaves gigabytes of dirty pages: write them out now, so that the measurement below
  // meets a steady table rather than the checkpoint of its own set-up.
  await db.query("CHECKPOINT");
}

function percentile(sorted: number[], p: number) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function main() {
  const benchDb = await createBenchDatabase();
  const db = new pg.Client({ connectionString: benchDb.url });
  try {
    const svc = await startIngress(benchDb.url);
    await db.connect();
    // Both accounts have a webhook, so that every receipt writes its event as for a partner that
    // listens (tracking writes none for an account without one).
    await db.query(`INSERT INTO webhooks (company_id, callback_url) VALUES ('co-a', 'https://127.0.0.1:8443/a'), ('co-b', 'https://127.0.0.1:8443/b')`);
    // The floors: one plain table of messages' columns and indexes with the key (partitioned messages keep it in message_keys).
    for (const floorTable of ["floor_batched", "floor_single"]) {
      await db.query(`CREATE TABLE ${floorTable} (LIKE messages INCLUDING ALL)`);
      await db.query(`CREATE UNIQUE INDEX ON ${floorTable} (company_id, channel, customer_message_id)`);
    }
    if (PHASES.has("a") || PHASES.has("b"))
      console.log(
        `bench/ingest: ${N.toLocaleString()} SMS messages registered + ${N.toLocaleString()} receipts (${(2 * N).toLocaleString()} objects) per phase, PostgreSQL, ${os.cpus().length} cores`,
      );

    const rate = (s: number) => (2 * N) / s;
    const fmt = (s: number, reg: number) =>
      `${s.toFixed(1)} s, ${Math.round(rate(s)).toLocaleString()} objects/s (registrations ${reg.toFixed(1)} s, receipts ${(s - reg).toFixed(1)} s)`;
    if (PHASES.has("a")) {
      const reg = await singles(`${svc.ingress}/messages`, N, (i) => registration("co-a", i), 50);
      const aS = reg + (await singles(`${svc.ingress}/receipts/sms`, N, (i) => receipt("co-a", i), 50));
      const fs = await floor(benchDb.url, "floor_single", N, 10, 1);
      console.log(`(a) ingress, 1 object/request, 50 connections: ${fmt(aS, reg)}`);
      console.log(`floor, pg single-row INSERT ... ON CONFLICT (10 clients):        ${fmt(fs.total, fs.reg)}`);
      console.log(`ratio (a) / single-row floor: ${(rate(aS) / rate(fs.total)).toFixed(2)} (target >= 1.0)`);
    }
    if (PHASES.has("b")) {
      const reg = await arrays(`${svc.ingress}/messages`, N, (i) => registration("co-b", i), 4);
      const bS = reg + (await arrays(`${svc.ingress}/receipts/sms`, N, (i) => receipt("co-b", i), 4));
      const fb = await floor(benchDb.url, "floor_batched", N, 4, BATCH);
      console.log(`(b) ingress, arrays of ${BATCH}, 4 concurrent: ${fmt(bS, reg)}`);
      console.log(`floor, pg batched INSERT ... ON CONFLICT (${BATCH}/statement, 4 clients): ${fmt(fb.total, fb.reg)}`);
      console.log(`ratio (b) / batched floor: ${(rate(bS) / rate(fb.total)).toFixed(2)} (target >= 0.5)`);
    }
    const companies = [...PHASES].filter((p) => p === "a" || p === "b").map((p) => `co-${p}`);
    const { rows: check } = await db.query<{ n: string }>(`SELECT count(*) AS n FROM messages WHERE company_id = ANY ($1) AND status_code = 3`, [companies]);
    const { rows: events } = await db.query<{ n: string }>(`SELECT count(*) AS n FROM message_webhook_events`);
    const want = companies.length * N;
    if (Number(check[0]!.n) !== want || Number(events[0]!.n) !== want)
      throw new Error(`expected ${want} delivered messages and events, found ${check[0]!.n} and ${events[0]!.n}`);

    if (STATUS_ROWS > 0) {
      const f0 = performance.now();
      await fillForStatus(db, STATUS_ROWS);
      const { rows: total } = await db.query<{ n: string }>(`SELECT count(*) AS n FROM messages`);
      console.log(`status: ${Number(total[0]!.n).toLocaleString()} message rows (filled in ${((performance.now() - f0) / 1000).toFixed(0)} s)`);
      const key = svc.adminKey("bulk-3", "SMS");
      const times: number[] = [];
      for (let r = 0; r < 330; r++) {
        // 1000 ids of account bulk-3 spread over the whole table, a tenth never sent.
        const ids = Array.from({ length: 1000 }, (_, k) =>
          k % 10 === 9 ? `never-${r}-${k}` : `s-${(Math.floor(Math.random() * (STATUS_ROWS / 10)) * 10 + 3) % STATUS_ROWS}`,
        );
        const t0 = performance.now();
        const res = await fetch(`http://127.0.0.1:${svc.port}/api/partner-gateway/v1/messages/status?channel=SMS&ids=${ids.join(",")}`, {
          headers: { "x-api-key": key },
        });
        const body = (await res.json()) as { data: unknown[] };
        if (r >= 30) times.push(performance.now() - t0); // the first 30 warm the caches
        if (res.status !== 200 || body.data.length !== 1000) throw new Error(`status answered ${res.status}`);
      }
      times.sort((x, y) => x - y);
      console.log(
        `GET /messages/status, 1000 ids, ${times.length} sequential calls: p50 ${percentile(times, 50).toFixed(1)} ms, p99 ${percentile(times, 99).toFixed(1)} ms (target p99 < 50 ms)`,
      );
    }
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
