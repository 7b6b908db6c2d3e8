/**
 * bench/notifier: webhook delivery end to end, whole processes (an ingest node and a notifier node
 * over NATS at BENCH_NATS_URL, default nats://127.0.0.1:4222), on PostgreSQL, to a local HTTPS
 * receiver on 127.0.0.1:8443 (answering 200; its CA handed over as NODE_EXTRA_CA_CERTS).
 *
 * (a) Throughput: N events made due by the ingress (N SMS messages registered and receipted, in
 *     arrays, while no notifier runs: they wait in tracking's feed, which the notifier follows into
 *     its schedule as it delivers), then a notifier process (`npm start` with SERVICES=notifier)
 *     started: events/s from its first delivery to the Nth. Floor, in the same run: a bare undici
 *     Pool in a process of its own posting the same N bodies to the same receiver with the same
 *     number of connections (NOTIFIER_ENDPOINT_CONCURRENCY). Target: ratio >= 0.6.
 * (b) Latency: receipts posted one per request at RATE/s for SECONDS s to the ingress while the
 *     notifier runs; latency = event received - receipt accepted (the 202). Target: p99 < 1 s.
 *
 *   npm run bench:notifier [-- --events 100000 --rate 500 --seconds 20]
 *   BENCH_NOTIFIER_NODE_OPTIONS="--cpu-prof --cpu-prof-dir=/tmp/prof" profiles the notifier process.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { parseArgs } from "node:util";
import { promisify } from "node:util";
import pg from "pg";
import { startReceiver, testCa } from "../../test/helpers/receiver";
import { cpu, machineCpu } from "../cpu";
import { createBenchDatabase } from "../database";
import { inArrays, post } from "../ingress";
import { ROOT, startService } from "../service";
import { eventBody, receipt, registration } from "./events";

const { values } = parseArgs({
  options: { events: { type: "string", default: "100000" }, rate: { type: "string", default: "500" }, seconds: { type: "string", default: "20" } },
});
const N = Number(values.events);
const RATE = Number(values.rate);
const SECONDS = Number(values.seconds);
const CONNECTIONS = 16;
const COMPANY = "bench-co";

const pct = (xs: number[], p: number) => xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

async function main() {
  const ca = await testCa();
  const db = await createBenchDatabase();
  let first = 0;
  let last = 0;
  const accepted = new Map<string, number>();
  const arrived = new Map<string, number>();
  const receiver = await startReceiver({
    record: false,
    onEvent(body, at) {
      if (first === 0) first = at;
      last = at;
      const id = /"messageId": "(l-[^"]+)"/.exec(body)?.[1];
      if (id) arrived.set(id, at);
    },
  });
  // The ingest node and the notifier as a cluster over NATS (tracking wakes the notifiers when it commits events).
  const env = {
    WEBHOOK_ALLOW_PRIVATE_TARGETS: "true",
    NODE_EXTRA_CA_CERTS: ca.file,
    NOTIFIER_ENDPOINT_CONCURRENCY: String(CONNECTIONS),
    TRANSPORTER: process.env.BENCH_NATS_URL ?? "nats://127.0.0.1:4222",
    NAMESPACE: `bench-notifier-${process.pid}`,
    INTERNAL_TOKEN_DISABLED: "true",
    // A notifier in a cluster needs the SECRETS_KEY every notifier shares (signed webhooks).
    SECRETS_KEY: randomBytes(32).toString("base64"),
  };
  const port = 3960 + Math.floor(Math.random() * 9);
  const ingest = await startService(db.url, port, { ...env, SERVICES: "gateway,auth,tracking", INTERNAL_PORT: String(port + 10) });
  const ingress = `http://127.0.0.1:${port + 10}/internal/v1`;
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    await client.query(`INSERT INTO webhooks (company_id, callback_url) VALUES ($1, $2)`, [COMPANY, receiver.url("/events")]);
    console.log(`bench/notifier: ${N} events to ${receiver.url("/events")}, ${CONNECTIONS} connections; latency at ${RATE} receipts/s for ${SECONDS} s`);

    // (a) N due events, then a notifier.
    await inArrays(`${ingress}/messages`, N, (i) => registration(COMPANY, "m", i));
    await inArrays(`${ingress}/receipts/sms`, N, (i) => receipt(COMPANY, "m", i));
    // In tracking's feed (migration 0031): the notifier follows it into its schedule, then delivers.
    const { rows } = await client.query(`SELECT count(*)::int AS n FROM message_webhook_events`);
    if (rows[0].n !== N) throw new Error(`tracking's feed holds ${rows[0].n} events, expected ${N}`);
    if (eventBody(0) !== (await client.query(`SELECT payload::text AS p FROM message_webhook_events WHERE message_id = 'm-0'`)).rows[0].p)
      throw new Error("the floor's body differs from the event's");
    await client.query("CHECKPOINT");
    const notifier = await startService(db.url, port + 1, {
      ...env,
      SERVICES: "notifier",
      ...(process.env.BENCH_NOTIFIER_NODE_OPTIONS ? { NODE_OPTIONS: process.env.BENCH_NOTIFIER_NODE_OPTIONS } : {}),
    });
    const cpu0 = { notifier: cpu(notifier.pid), all: machineCpu(), bench: cpu(process.pid) };
    await receiver.waitFor(N, 600_000);
    const cpuUsed = { notifier: cpu(notifier.pid) - cpu0.notifier, all: machineCpu() - cpu0.all, bench: cpu(process.pid) - cpu0.bench };
    const ours = N / ((last - first) / 1000);
    const ourConnections = receiver.connections;
    await new Promise((r) => setTimeout(r, 500));
    const left = (await client.query(`SELECT count(*)::int AS n FROM outbox_events`)).rows[0].n;
    const logged = (await client.query(`SELECT count(*)::int AS n FROM webhook_attempts WHERE outcome = 'DELIVERED'`)).rows[0].n;

    const before = receiver.delivered;
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ["--import", "tsx", path.join(__dirname, "baseline.ts"), receiver.url("/events"), String(N), String(CONNECTIONS)],
      {
        cwd: ROOT,
        env: { ...process.env, NODE_EXTRA_CA_CERTS: ca.file },
      },
    );
    const floor = JSON.parse(stdout.trim()) as { events: number; seconds: number };
    if (receiver.delivered - before !== N) throw new Error("the floor's events did not all arrive");
    const floorRate = floor.events / floor.seconds;
    console.log(`(a) notifier: ${ours.toFixed(0)} events/s (outbox left ${left}, ${logged} DELIVERED attempts logged, ${ourConnections} TLS connections)`);
    console.log(
      `    CPU per 1000 events: notifier ${((cpuUsed.notifier * 1000) / N).toFixed(3)} s, receiver ${((cpuUsed.bench * 1000) / N).toFixed(3)} s, the rest (PostgreSQL mostly) ${(((cpuUsed.all - cpuUsed.notifier - cpuUsed.bench) * 1000) / N).toFixed(3)} s`,
    );
    console.log(`    bare undici: ${floorRate.toFixed(0)} events/s`);
    console.log(`    ratio ${(ours / floorRate).toFixed(2)} (target >= 0.6)`);

    // (b) Latency at RATE receipts/s.
    const M = RATE * SECONDS;
    await inArrays(`${ingress}/messages`, M, (i) => registration(COMPANY, "l", i));
    const t0 = performance.now();
    const pending: Promise<void>[] = [];
    for (let i = 0; i < M; i++) {
      const due = t0 + (i * 1000) / RATE;
      const wait = due - performance.now();
      if (wait > 1) await new Promise((r) => setTimeout(r, wait));
      const body = receipt(COMPANY, "l", i);
      pending.push(post(`${ingress}/receipts/sms`, body).then(() => void accepted.set(`l-${i}`, Date.now())));
    }
    await Promise.all(pending);
    const deadline = Date.now() + 30_000;
    while (arrived.size < M && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    // An event may arrive before its 202 reaches the bench: that counts as 0.
    const latencies = [...arrived].map(([id, at]) => Math.max(0, at - accepted.get(id)!)).sort((a, b) => a - b);
    console.log(
      `(b) ${latencies.length}/${M} events at ${RATE}/s: latency p50 ${pct(latencies, 50)} ms, p99 ${pct(latencies, 99)} ms, max ${latencies.at(-1)} ms (target p99 < 1000 ms)`,
    );
    await notifier.stop();
  } finally {
    await client.end();
    await ingest.stop();
    await receiver.close();
    await db.drop();
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
