/**
 * bench/cluster: the product as one process against the product split into processes, on this
 * machine's PostgreSQL (and NATS for the split), whole processes, to a local HTTPS receiver.
 *
 * (a) Ingest + delivery: M SMS messages registered and receipted through the internal ingress (arrays
 *     of 500, 4 at a time) while the notifier delivers; time from the first post to the Mth event
 *     received. Once with one process running everything (`npm start`, no TRANSPORTER), once split
 *     (a tracking node and a notifier node over NATS). The ratio is split / one.
 * (b) Notifier throughput: N events made due while no notifier runs, then 1 notifier process, then
 *     (N more) 2 notifier processes at once: events/s from the first delivery to the last.
 * (c) Failover: events due to a receiver that answers after 300 ms; one notifier (lease 10 s) is
 *     SIGKILLed once it has delivered some; a second is started at once; prints the time from the
 *     kill to the last event delivered: the events the killed one had claimed wait for their lease,
 *     the others go at once.
 *
 *   npm run bench:cluster [-- --messages 20000 --events 20000]
 */
import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import pg from "pg";
import { startReceiver, testCa } from "../../test/helpers/receiver";
import { createBenchDatabase } from "../database";
import { receipt, registration } from "../notifier/events";
import { inArrays } from "../ingress";
import { startService, type BenchService } from "../service";

const { values } = parseArgs({ options: { messages: { type: "string", default: "20000" }, events: { type: "string", default: "20000" } } });
const M = Number(values.messages);
const N = Number(values.events);
const NATS = process.env.BENCH_NATS_URL ?? "nats://127.0.0.1:4222";
const LEASE_MS = 10_000;

let port = 4100 + Math.floor(Math.random() * 200);
const nextPort = () => (port += 3);

async function main() {
  const ca = await testCa();
  let delay = 0;
  const seen = new Map<string, number>();
  const receiver = await startReceiver({
    record: false,
    onEvent(body, at) {
      const id = /"messageId": "([^"]+)"/.exec(body)?.[1];
      if (id && !seen.has(id)) seen.set(id, at);
    },
  });
  receiver.behave(() => ({ status: 200, ...(delay ? { delayMs: delay } : {}) }));
  const waitFor = async (prefix: string, n: number, ms = 600_000) => {
    const deadline = Date.now() + ms;
    for (;;) {
      const got = [...seen.entries()].filter(([id]) => id.startsWith(`${prefix}-`));
      if (got.length >= n) return got.map(([, at]) => at).sort((a, b) => a - b);
      if (Date.now() > deadline) throw new Error(`${prefix}: ${got.length}/${n} events after ${ms} ms`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  const env = { WEBHOOK_ALLOW_PRIVATE_TARGETS: "true", NODE_EXTRA_CA_CERTS: ca.file, NOTIFIER_LEASE_MS: String(LEASE_MS) };
  const lines: string[] = [];

  /** One run of (a) on a fresh database: `start` brings the product up; answers seconds. */
  const ingestAndDeliver = async (prefix: string, start: (url: string) => Promise<{ ingress: string; nodes: BenchService[] }>) => {
    const db = await createBenchDatabase();
    const { ingress, nodes } = await start(db.url);
    try {
      const c = new pg.Client({ connectionString: db.url });
      await c.connect();
      await c.query(`INSERT INTO webhooks (company_id, callback_url) VALUES ($1, $2)`, [prefix, receiver.url("/events")]);
      await c.end();
      const t0 = Date.now();
      await inArrays(`${ingress}/messages`, M, (i) => registration(prefix, prefix, i), 500);
      await inArrays(`${ingress}/receipts/sms`, M, (i) => receipt(prefix, prefix, i), 500);
      const ats = await waitFor(prefix, M);
      return (ats.at(-1)! - t0) / 1000;
    } finally {
      for (const n of nodes) await n.stop();
      await db.drop();
    }
  };

  // (a) one process against the split.
  const one = await ingestAndDeliver("one", async (url) => {
    const p = nextPort();
    const node = await startService(url, p, { ...env, INTERNAL_PORT: String(p + 1) });
    return { ingress: `http://127.0.0.1:${p + 1}/internal/v1`, nodes: [node] };
  });
  const namespace = `bench-${process.pid}`;
  const split = await ingestAndDeliver("split", async (url) => {
    const p = nextPort();
    // SECRETS_KEY: a notifier in a cluster seals (and opens) webhook signing secrets with the key every notifier shares.
    const cluster = { ...env, TRANSPORTER: NATS, NAMESPACE: namespace, INTERNAL_TOKEN_DISABLED: "true", SECRETS_KEY: randomBytes(32).toString("base64") };
    const tracking = await startService(url, p, { ...cluster, SERVICES: "gateway,auth,tracking", INTERNAL_PORT: String(p + 1) });
    const notifier = await startService(url, nextPort(), { ...cluster, SERVICES: "notifier" });
    return { ingress: `http://127.0.0.1:${p + 1}/internal/v1`, nodes: [notifier, tracking] };
  });
  lines.push(
    `(a) ${M} messages registered, receipted and delivered: one process ${one.toFixed(1)} s (${(M / one).toFixed(0)}/s), split tracking + notifier over NATS ${split.toFixed(1)} s (${(M / split).toFixed(0)}/s); split/one ${(one / split).toFixed(2)}x`,
  );

  // (b) and (c) on one database: an ingest node, notifier processes started and stopped.
  const db = await createBenchDatabase();
  const p = nextPort();
  const ingestNode = await startService(db.url, p, { ...env, SERVICES: "gateway,auth,tracking", INTERNAL_PORT: String(p + 1) });
  const ingress = `http://127.0.0.1:${p + 1}/internal/v1`;
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  try {
    for (const co of ["n1", "n2", "fo"]) await c.query(`INSERT INTO webhooks (company_id, callback_url) VALUES ($1, $2)`, [co, receiver.url("/events")]);
    const throughput = async (prefix: string, processes: number) => {
      await inArrays(`${ingress}/messages`, N, (i) => registration(prefix, prefix, i), 500);
      await inArrays(`${ingress}/receipts/sms`, N, (i) => receipt(prefix, prefix, i), 500);
      const notifiers = await Promise.all(Array.from({ length: processes }, () => startService(db.url, nextPort(), { ...env, SERVICES: "notifier" })));
      const ats = await waitFor(prefix, N);
      for (const n of notifiers) await n.stop();
      return N / ((ats.at(-1)! - ats[0]!) / 1000);
    };
    const single = await throughput("n1", 1);
    const double = await throughput("n2", 2);
    lines.push(
      `(b) notifier throughput, ${N} due events: 1 process ${single.toFixed(0)} events/s, 2 processes ${double.toFixed(0)} events/s (${(double / single).toFixed(2)}x)`,
    );

    // (c) failover.
    const F = 300;
    delay = 300;
    await inArrays(`${ingress}/messages`, F, (i) => registration("fo", "fo", i), 500);
    await inArrays(`${ingress}/receipts/sms`, F, (i) => receipt("fo", "fo", i), 500);
    const first = await startService(db.url, nextPort(), { ...env, SERVICES: "notifier" });
    await waitFor("fo", 20);
    const killedAt = Date.now();
    process.kill(first.pid, "SIGKILL");
    const second = await startService(db.url, nextPort(), { ...env, SERVICES: "notifier" });
    const ats = await waitFor("fo", F);
    await second.stop();
    const afterKill = ats.filter((at) => at > killedAt);
    const lastOfKilled = afterKill.length > 0 ? (afterKill.at(-1)! - killedAt) / 1000 : 0;
    lines.push(
      `(c) failover: a notifier SIGKILLed with its claimed events in flight (lease ${LEASE_MS / 1000} s, receiver answering in 300 ms): every one of ${F} events delivered, the last ${lastOfKilled.toFixed(1)} s after the kill`,
    );
    delay = 0;
  } finally {
    await c.end();
    await ingestNode.stop();
    await db.drop();
    await receiver.close();
  }
  console.log(`bench/cluster on ${(await import("node:os")).cpus().length} cores:`);
  for (const l of lines) console.log(l);
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
