/**
 * bench/campaign: a campaign to N contacts of two overlapping lists, sent on the simulator, against
 * the batched ingest floor measured in the same run on the same database. Two processes over NATS
 * (BENCH_NATS_URL, default nats://127.0.0.1:4222, under a namespace of this run's own): a core node
 * (gateway, auth, contacts, tracking, simulator) and the campaigns node (campaigns alone), so the
 * RSS measured is the campaigns process's. `--one-process`: every service in one `npm start`
 * process instead (its RSS is then the whole product's).
 *
 *   time to registered: confirm -> every recipient's message registered at tracking;
 *   time to receipts:   confirm -> every message's receipt ingested (SIMULATOR_MAX_DELAY_MS 1000);
 *   floor:              `pg`, the same N registrations then N receipts as 500-row upserts into a copy
 *                       of the messages table (4 clients, as bench/ingest's batched floor);
 *   gateway p99:        GET /messages/status with 100 ids, 10 connections, idle vs during the send;
 *   peak RSS:           of the campaigns process (VmHWM at the end, and VmRSS sampled during the send).
 *
 *   npm run bench:campaign [-- --contacts 100000] [--one-process | --ingest-node] [--concurrency 4] [--batch 500] [--node-rate 0] [--max-old-space-mb 96] [--table-stats]
 *
 * --ingest-node: a third node for the upstream's traffic (tracking and the simulator: registrations
 * and receipts ingested there), the core node keeping the partner API (gateway, auth, contacts and
 * tracking for partners' reads): what sharing one event loop between bulk ingest and partners'
 * polls costs their p99.
 * --node-rate: CAMPAIGN_NODE_RATE of the campaigns node (bulk sending's bounded share): what it
 * costs the send and what it spares another account's polls.
 *   BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres (default)
 *
 * Targets (issues 17 and 33): send rate >= 0.5x the floor; gateway p99 during the send < 2x idle. The
 * last line is `RESULT registrations_vs_floor=<x> status_p99_ratio=<y>`.
 */
import autocannon from "autocannon";
import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { parseArgs } from "node:util";
import pg from "pg";
import { cpu, machineCpu } from "../cpu";
import { createBenchDatabase } from "../database";
import { startService, type BenchService } from "../service";

const { values } = parseArgs({
  options: {
    contacts: { type: "string", default: "100000" },
    "one-process": { type: "boolean", default: false },
    "ingest-node": { type: "boolean", default: false },
    concurrency: { type: "string" },
    "node-rate": { type: "string" },
    batch: { type: "string" },
    "max-old-space-mb": { type: "string" },
    "table-stats": { type: "boolean", default: false },
  },
});
const N = Number(values.contacts);
const NATS = process.env.BENCH_NATS_URL ?? "nats://127.0.0.1:4222";
const BATCH = 500;
const HISTORY = 100_000;
const COMPANY = "bench-campaign";

/** A process's resident memory (kB) from /proc: now (VmRSS) or its peak so far (VmHWM); 0 when unreadable. */
const memKb = (pid: number, field: "VmRSS" | "VmHWM") => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0);
const rssKb = (pid: number) => memKb(pid, "VmRSS");

/** Rows inserted, updated (of them HOT) and deleted so far, per table (the statistics collector's, flushed first). */
async function tableStats(db: pg.Client): Promise<Record<string, { ins: number; upd: number; hot: number; del: number }>> {
  // This connection's own counts (the history it inserted) are flushed at its next statement's end;
  // other backends report theirs at most once a second.
  await db.query("SELECT pg_stat_force_next_flush()");
  await new Promise((r) => setTimeout(r, 1100));
  const { rows } = await db.query(
    `SELECT relname, n_tup_ins::float8 AS ins, n_tup_upd::float8 AS upd, n_tup_hot_upd::float8 AS hot, n_tup_del::float8 AS del FROM pg_stat_user_tables`,
  );
  return Object.fromEntries(rows.map((r) => [r.relname as string, { ins: r.ins, upd: r.upd, hot: r.hot, del: r.del }]));
}

async function p99(url: string, key: string, seconds: number): Promise<number> {
  const r = await autocannon({ url, connections: 10, duration: seconds, headers: { "x-api-key": key } });
  if (r.non2xx > 0) throw new Error(`status poll: ${r.non2xx} non-2xx`);
  return r.latency.p99;
}

async function floor(db: pg.Client, dbUrl: string): Promise<number> {
  await db.query(`CREATE TABLE messages_floor (LIKE messages INCLUDING ALL)`);
  // One plain table with the key (partitioned messages keep it in message_keys): the write floor of one row per message.
  await db.query(`CREATE UNIQUE INDEX ON messages_floor (company_id, channel, customer_message_id)`);
  const clients = Array.from({ length: 4 }, () => new pg.Client({ connectionString: dbUrl }));
  await Promise.all(clients.map((c) => c.connect()));
  const t0 = performance.now();
  for (const kind of ["reg", "rcpt"] as const) {
    let next = 0;
    await Promise.all(
      clients.map(async (c) => {
        for (;;) {
          const from = next;
          if (from >= N) return;
          next += BATCH;
          const rows = Array.from({ length: Math.min(BATCH, N - from) }, (_, k) => ({
            id: `f-${from + k}`,
            d: `+4930${String(from + k).padStart(8, "0")}`,
          }));
          await c.query(
            kind === "reg"
              ? `INSERT INTO messages_floor (company_id, channel, customer_message_id, destination, sent_at, text, campaign_id, status_code)
                 SELECT 'floor', 'SMS', x.id, x.d, now(), 'Hello there, our sale starts today!', 'c', 1 FROM jsonb_to_recordset($1::jsonb) AS x(id text, d text)
                 ON CONFLICT (company_id, channel, customer_message_id) DO NOTHING`
              : `INSERT INTO messages_floor AS m (company_id, channel, customer_message_id, destination, status_code, delivery_date, price)
                 SELECT 'floor', 'SMS', x.id, x.d, 3, now(), 0.0075 FROM jsonb_to_recordset($1::jsonb) AS x(id text, d text)
                 ON CONFLICT (company_id, channel, customer_message_id) DO UPDATE SET status_code = 3, delivery_date = EXCLUDED.delivery_date, price = EXCLUDED.price`,
            [JSON.stringify(rows)],
          );
        }
      }),
    );
  }
  const s = (performance.now() - t0) / 1000;
  await Promise.all(clients.map((c) => c.end()));
  return s;
}

async function main() {
  const bdb = await createBenchDatabase();
  const port = 3970 + Math.floor(Math.random() * 9);
  const env = {
    INTERNAL_PORT: String(port + 10),
    SIMULATOR_PROFILE: "all-delivered",
    SIMULATOR_MAX_DELAY_MS: "1000",
    CAMPAIGN_POLL_MS: "100",
    ...(values.concurrency ? { CAMPAIGN_CONCURRENCY: values.concurrency } : {}),
    ...(values.batch ? { CAMPAIGN_BATCH_SIZE: values.batch } : {}),
    ...(values["node-rate"] ? { CAMPAIGN_NODE_RATE: values["node-rate"] } : {}),
  };
  const oneProcess = values["one-process"];
  let svc: BenchService;
  let campaigns: BenchService;
  let ingest: BenchService | null = null;
  if (oneProcess) {
    svc = campaigns = await startService(bdb.url, port, env);
  } else {
    const cluster = { TRANSPORTER: NATS, BENCH_NAMESPACE: `bench-campaign-${process.pid}`, INTERNAL_TOKEN_DISABLED: "true" };
    // BENCH_CORE_NODE_OPTIONS="--cpu-prof --cpu-prof-dir=/tmp/prof" profiles the core node.
    const coreOptions: Record<string, string> = process.env.BENCH_CORE_NODE_OPTIONS ? { NODE_OPTIONS: process.env.BENCH_CORE_NODE_OPTIONS } : {};
    const coreServices = values["ingest-node"] ? "gateway,auth,contacts,tracking" : "gateway,auth,contacts,tracking,simulator";
    svc = await startService(bdb.url, port, { ...env, ...cluster, ...coreOptions, SERVICES: coreServices }, { node: true });
    // The simulator calls tracking.ingest on its own node (Moleculer prefers a local service), the
    // gateway tracking's partner actions on its own. Its health is on the ingress's port (a node with
    // an HTTP listener of its own has no operator's listener on PORT).
    if (values["ingest-node"])
      ingest = await startService(bdb.url, port + 30, { ...env, ...cluster, INTERNAL_PORT: String(port + 30), SERVICES: "tracking,simulator" }, { node: true });
    // --max-old-space-mb: a heap limit for the campaigns process alone (memory that grows with the
    // audience would end it; memory V8 merely has not collected yet is collected sooner).
    const heap: Record<string, string> = values["max-old-space-mb"] ? { NODE_OPTIONS: `--max-old-space-size=${values["max-old-space-mb"]}` } : {};
    campaigns = await startService(bdb.url, port + 20, { ...env, ...cluster, ...heap, SERVICES: "campaigns" }, { node: true });
  }
  const db = new pg.Client({ connectionString: bdb.url });
  await db.connect();
  try {
    const key = svc.adminKey(COMPANY, "ALL");
    // Another account polls (its ids unknown: one probe of the keys per id), as a partner beside the campaign's would.
    const otherKey = svc.adminKey(`${COMPANY}-other`, "ALL");
    const api = `http://127.0.0.1:${port}/api/partner-gateway/v1`;
    // The gateway routes to campaigns once it has seen the campaigns node.
    for (let i = 0; (await fetch(`${api}/campaigns`, { headers: { "x-api-key": key } })).status !== 200; i++) {
      if (i > 300) throw new Error("the gateway never saw the campaigns node");
      await new Promise((r) => setTimeout(r, 100));
    }
    // Two overlapping lists: the first 70 % and the last 70 % of the contacts (40 % in both).
    const [{ id: l1 }] = (await db.query(`INSERT INTO contact_lists (company_id, name) VALUES ($1, 'A') RETURNING id`, [COMPANY])).rows;
    const [{ id: l2 }] = (await db.query(`INSERT INTO contact_lists (company_id, name) VALUES ($1, 'B') RETURNING id`, [COMPANY])).rows;
    await db.query(
      `INSERT INTO contacts (id, company_id, first_name, phone_number) SELECT gen_random_uuid(), $1, 'P' || i, '+35191' || lpad(i::text, 7, '0') FROM generate_series(1, $2::int) i`,
      [COMPANY, N],
    );
    await db.query(
      `INSERT INTO contact_list_members (company_id, list_id, contact_id)
       SELECT $1, l.id, c.id FROM (SELECT id, row_number() OVER (ORDER BY phone_number) AS n FROM contacts WHERE company_id = $1) c
       JOIN (VALUES ($2::bigint, 1, $4::int), ($3::bigint, $5::int, $6::int)) AS l(id, lo, hi) ON c.n BETWEEN l.lo AND l.hi`,
      [COMPANY, l1, l2, Math.floor(N * 0.7), Math.floor(N * 0.3) + 1, N],
    );
    // A database that has been running: another account's history of HISTORY messages (most
    // delivered), so the messages table has the statistics a live one has. On a table analysed while
    // empty, tracking's receipt UPDATE (a join of the batch with messages) is planned as a nested loop
    // over every message for every receipt: 5 s a statement at 10,000 messages, until autovacuum's
    // next ANALYZE, which measures the planner rather than the send.
    await db.query(
      `INSERT INTO messages (company_id, channel, customer_message_id, destination, sent_at, total_parts, text, status_code, delivery_date)
       SELECT 'bench-history', 'SMS', 'h-' || i, '+35190' || lpad(i::text, 7, '0'), now() - interval '1 day', 1, 'Earlier message',
              CASE WHEN i % 20 = 0 THEN 1 ELSE 3 END, now() - interval '1 day' FROM generate_series(1, $1::int) i`,
      [HISTORY],
    );
    await db.query(
      `INSERT INTO message_keys (company_id, channel, customer_message_id, id) SELECT company_id, channel, customer_message_id, id FROM messages WHERE company_id = 'bench-history'`,
    );
    await db.query("ANALYZE");
    const statusUrl = `${api}/messages/status?channel=SMS&ids=${Array.from({ length: 100 }, (_, i) => `cmp-x-${i}`).join(",")}`;
    const idleP99 = await p99(statusUrl, otherKey, 5);

    const headers = { "x-api-key": key, "content-type": "application/json" };
    const body = {
      name: "bench",
      channel: "SMS",
      contactListIds: [Number(l1), Number(l2)],
      message: { text: "Hello {{firstName|there}}, our sale starts today!" },
    };
    const created = (await (await fetch(`${api}/campaigns`, { method: "POST", headers, body: JSON.stringify(body) })).json()) as { id: string };
    const baseKb = rssKb(campaigns.pid);
    let peakKb = baseKb;
    const tables0 = values["table-stats"] ? await tableStats(db) : null;
    const cpu0 = {
      campaigns: cpu(campaigns.pid),
      core: cpu(svc.pid) + (ingest ? cpu(ingest.pid) : 0),
      pg: cpu(null, "postgres"),
      bench: cpu(process.pid),
      all: machineCpu(),
    };
    const t0 = performance.now();
    const confirm = await fetch(`${api}/campaigns/${created.id}/confirm`, { method: "PUT", headers });
    if (confirm.status !== 202) throw new Error(`confirm: ${confirm.status} ${await confirm.text()}`);
    const confirmS = (performance.now() - t0) / 1000;
    const sampler = setInterval(() => (peakKb = Math.max(peakKb, rssKb(campaigns.pid))), 200);
    const busyP99 = p99(statusUrl, otherKey, 5);
    let registeredS = 0;
    let receiptsS = 0;
    for (;;) {
      const { rows } = await db.query(
        `SELECT count(*)::int AS registered, count(*) FILTER (WHERE status_code <> 1)::int AS answered FROM messages WHERE company_id = $1 AND campaign_id = $2`,
        [COMPANY, created.id],
      );
      const now = (performance.now() - t0) / 1000;
      if (!registeredS && rows[0].registered >= N) registeredS = now;
      if (rows[0].answered >= N) {
        receiptsS = now;
        break;
      }
      if (now > 1800) throw new Error(`not done after 30 min: ${JSON.stringify(rows[0])}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    // The send's CPU, confirm -> every receipt ingested (registrations and receipts overlap).
    const used = {
      campaigns: cpu(campaigns.pid) - cpu0.campaigns,
      core: cpu(svc.pid) + (ingest ? cpu(ingest.pid) : 0) - cpu0.core,
      pg: cpu(null, "postgres") - cpu0.pg,
      bench: cpu(process.pid) - cpu0.bench,
      all: machineCpu() - cpu0.all,
    };
    const tables1 = tables0 ? await tableStats(db) : null;
    const duringP99 = await busyP99;
    clearInterval(sampler);
    const hwmKb = memKb(campaigns.pid, "VmHWM");
    const perNumber = (await db.query(`SELECT count(*)::int AS n FROM messages WHERE campaign_id = $1 GROUP BY destination HAVING count(*) > 1`, [created.id]))
      .rows;
    const floorS = await floor(db, bdb.url);
    const rate = N / registeredS;
    const floorRate = (2 * N) / floorS; // registrations + receipts, as the campaign's full loop
    console.log(
      `contacts ${N} (two lists overlapping by 40 %); ${oneProcess ? "one process" : `campaigns on its own node over NATS${ingest ? ", the upstream's ingest (tracking, simulator) on a third" : ""}`}; CAMPAIGN_CONCURRENCY ${values.concurrency ?? "default"}, CAMPAIGN_BATCH_SIZE ${values.batch ?? "default"}, CAMPAIGN_NODE_RATE ${values["node-rate"] ?? "default (none)"}`,
    );
    console.log(`confirm (snapshot) ${confirmS.toFixed(2)} s`);
    console.log(
      `registered ${registeredS.toFixed(1)} s (${Math.round(rate)} msg/s), receipts in ${receiptsS.toFixed(1)} s (${Math.round((2 * N) / receiptsS)} objects/s)`,
    );
    console.log(`floor: ${2 * N} upserts (${N} registrations + ${N} receipts) in ${floorS.toFixed(1)} s (${Math.round(floorRate)} rows/s)`);
    console.log(
      `ratio (registrations + receipts of the campaign / floor): ${((2 * N) / receiptsS / floorRate).toFixed(2)}x; registrations alone vs floor: ${(rate / floorRate).toFixed(2)}x (target >= 0.5x)`,
    );
    const per1000 = (s: number) => ((s * 1000) / N).toFixed(3);
    console.log(
      `CPU per 1000 messages, confirm to the last receipt: ${oneProcess ? "" : `campaigns ${per1000(used.campaigns)} s, `}${oneProcess ? "the service" : ingest ? "core and ingest nodes" : "core node (gateway, tracking, simulator)"} ${per1000(used.core)} s, PostgreSQL ${per1000(used.pg)} s, this bench (status polls) ${per1000(used.bench)} s, the rest ${per1000(used.all - used.pg - used.bench - used.core - (oneProcess ? 0 : used.campaigns))} s; the machine busy ${((100 * used.all) / (availableParallelism() * receiptsS)).toFixed(0)} % of ${availableParallelism()} cores`,
    );
    console.log(
      `gateway GET /messages/status p99: idle ${idleP99} ms, during the send ${duringP99} ms (${(duringP99 / Math.max(idleP99, 1)).toFixed(2)}x; target < 2x)`,
    );
    console.log(
      `${oneProcess ? "the service process (all services)" : "the campaigns process"}: RSS ${(baseKb / 1024).toFixed(0)} MiB before confirm, peak sampled ${(peakKb / 1024).toFixed(0)} MiB, VmHWM ${(hwmKb / 1024).toFixed(0)} MiB; numbers with more than one message: ${perNumber.length}`,
    );
    // The one line issue 33 asks for last: registrations/s against the batched floor, and the status
    // poll's p99 during the send against idle.
    if (tables0 && tables1) {
      console.log("rows written per message, confirm to the last receipt (--table-stats; pg_stat_user_tables, HOT updates among the updates):");
      for (const [t, b] of Object.entries(tables1)) {
        const a = tables0[t] ?? { ins: 0, upd: 0, hot: 0, del: 0 };
        const d = { ins: b.ins - a.ins, upd: b.upd - a.upd, hot: b.hot - a.hot, del: b.del - a.del };
        if (d.ins + d.upd + d.del === 0) continue;
        console.log(
          `  ${t.padEnd(28)} inserted ${(d.ins / N).toFixed(2)}  updated ${(d.upd / N).toFixed(2)} (HOT ${(d.hot / N).toFixed(2)})  deleted ${(d.del / N).toFixed(2)}`,
        );
      }
    }
    console.log(`RESULT registrations_vs_floor=${(rate / floorRate).toFixed(2)} status_p99_ratio=${(duringP99 / Math.max(idleP99, 1)).toFixed(2)}`);
  } finally {
    await db.end();
    if (campaigns !== svc) await campaigns.stop();
    if (ingest) await ingest.stop();
    await svc.stop();
    await bdb.drop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
