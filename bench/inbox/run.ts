/**
 * bench/inbox: the two-way inbox, whole process (`npm start` with gateway, auth, tracking, inbox and
 * notifier), on a fresh PostgreSQL database, with 1,000 WhatsApp conversations x 100 messages
 * seeded in one account.
 *
 * (a) `GET /inbox/conversations` and (b) one thread's `GET /inbox/conversations/{chatId}/messages`:
 *     p50/p99 over 200 requests each, one at a time (target p99 < 50 ms).
 * (c) Inbound messages posted one per request to the internal ingress at RATE/s for SECONDS s, from
 *     the seeded conversations' numbers, while STREAMS clients hold `GET /inbox/events` open and a
 *     local HTTPS receiver takes the webhook events: latency from each 202 to the INBOUND webhook's
 *     arrival (target p99 < 1 s) and to its `message.created` on every stream (target p99 < 250 ms).
 * (d) Reply statuses: receipts for inbox replies at RATE/s for STATUS_SECONDS s; latency from each
 *     202 to its `message.status` on every stream.
 *
 *   npm run bench:inbox [-- --rate 500 --seconds 30 --streams 100 --status-seconds 10]
 */
import { randomUUID } from "node:crypto";
import http from "node:http";
import { parseArgs } from "node:util";
import pg from "pg";
import { startReceiver, testCa } from "../../test/helpers/receiver";
import { createBenchDatabase } from "../database";
import { startService } from "../service";

const { values } = parseArgs({
  options: {
    rate: { type: "string", default: "500" },
    seconds: { type: "string", default: "30" },
    streams: { type: "string", default: "100" },
    "status-seconds": { type: "string", default: "10" },
    conversations: { type: "string", default: "1000" },
    messages: { type: "string", default: "100" },
  },
});
const RATE = Number(values.rate);
const SECONDS = Number(values.seconds);
const STREAMS = Number(values.streams);
const STATUS_SECONDS = Number(values["status-seconds"]);
const CONVERSATIONS = Number(values.conversations);
const MESSAGES = Number(values.messages);
const COMPANY = "bench-inbox";
const SENDER = "+351210000000";
const number = (i: number) => `+4930${String(i).padStart(8, "0")}`;

const pct = (xs: number[], p: number) => (xs.length ? xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]! : NaN);
const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
const ms = (x: number) => `${x.toFixed(1)} ms`;

async function post(url: string, body: unknown) {
  const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (r.status !== 202) throw new Error(`ingress: ${r.status} ${await r.text()}`);
  await r.arrayBuffer();
}

/** p50/p99 of `n` GETs one at a time; null (and why) when the route does not answer 200. */
async function timeGets(url: string, key: string, n: number): Promise<{ p50: number; p99: number } | string> {
  const first = await fetch(url, { headers: { "x-api-key": key } });
  const text = await first.text();
  if (first.status !== 200) return `answered ${first.status}: ${text.slice(0, 160)}`;
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const r = await fetch(url, { headers: { "x-api-key": key } });
    await r.arrayBuffer();
    times.push(performance.now() - t0);
    if (r.status !== 200) return `request ${i} answered ${r.status}`;
  }
  const s = sorted(times);
  return { p50: pct(s, 50), p99: pct(s, 99) };
}

/**
 * One open SSE stream: `onEvent(type, key)` for each event as it arrives, `key` being the bench's
 * index (`bench-<i>` in a message's text, `reply-<i>` as a reply's id). Whole chunks are scanned with two
 * regular expressions (100 streams at 500 events/s each are 50,000 events/s for this one process).
 */
function openStream(url: string, key: string, onEvent: (type: "created" | "status", key: string) => void): Promise<http.ClientRequest> {
  const created = /event: message\.created\ndata: [^\n]*?"text": ?"bench-(\d+)"/g;
  const status = /event: message\.status\ndata: \{"id": ?"reply-(\d+)"/g;
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers: { "x-api-key": key, accept: "text/event-stream" }, agent: false }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`stream: ${res.statusCode}`));
      res.setEncoding("utf8");
      let tail = "";
      res.on("data", (chunk: string) => {
        const text = tail + chunk;
        const end = text.lastIndexOf("\n\n");
        if (end < 0) {
          tail = text;
          return;
        }
        const whole = text.slice(0, end + 2);
        tail = text.slice(end + 2);
        for (const m of whole.matchAll(created)) onEvent("created", m[1]!);
        for (const m of whole.matchAll(status)) onEvent("status", m[1]!);
      });
      resolve(req);
    });
    req.on("error", reject);
  });
}

/**
 * Posts `make(i)` for i < n to `url` one per request at `rate`/s; `accepted[i]` is when its 202 came.
 * Answers the requests refused (a 503 when the service could not keep up): counted, not retried.
 */
async function paced(url: string, n: number, rate: number, make: (i: number) => unknown, accepted: number[]): Promise<Map<number | string, number>> {
  const t0 = performance.now();
  const pending: Promise<void>[] = [];
  const refused = new Map<number | string, number>();
  for (let i = 0; i < n; i++) {
    const wait = t0 + (i * 1000) / rate - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    pending.push(
      fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(make(i)) }).then(
        async (r) => {
          await r.arrayBuffer();
          if (r.status === 202) accepted[i] = performance.now();
          else refused.set(r.status, (refused.get(r.status) ?? 0) + 1);
        },
        (err: Error & { cause?: { code?: string } }) =>
          void refused.set(err.cause?.code ?? err.message, (refused.get(err.cause?.code ?? err.message) ?? 0) + 1),
      ),
    );
  }
  await Promise.all(pending);
  return refused;
}

const refusedText = (m: Map<number | string, number>) => (m.size === 0 ? "" : `; refused: ${[...m].map(([status, n]) => `${n} x ${status}`).join(", ")}`);

async function main() {
  const ca = await testCa();
  const db = await createBenchDatabase();
  const receiver = await startReceiver({ record: false, onEvent: (body, at) => onWebhook(body, at) });
  const webhookAt = new Map<number, number>();
  // The receiver's clock is Date.now(); the bench's latencies are performance.now(): one offset between them.
  const offset = Date.now() - performance.now();
  function onWebhook(body: string, at: number) {
    const i = /"messageId": ?"in-(\d+)"/.exec(body)?.[1];
    if (i !== undefined) webhookAt.set(Number(i), at - offset);
  }
  const port = 3970 + Math.floor(Math.random() * 9);
  const service = await startService(db.url, port, {
    SERVICES: "gateway,auth,tracking,inbox,notifier",
    INTERNAL_PORT: String(port + 10),
    WEBHOOK_ALLOW_PRIVATE_TARGETS: "true",
    NODE_EXTRA_CA_CERTS: ca.file,
    NOTIFIER_ENDPOINT_CONCURRENCY: "16",
  });
  const api = `http://127.0.0.1:${port}/api/partner-gateway/v1`;
  const ingress = `http://127.0.0.1:${port + 10}/internal/v1`;
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  const streams: http.ClientRequest[] = [];
  try {
    const key = service.adminKey(COMPANY, "INBOX,WHATSAPP");
    await client.query(`INSERT INTO webhooks (company_id, callback_url) VALUES ($1, $2)`, [COMPANY, receiver.url("/events")]);
    const t0 = performance.now();
    await client.query(
      `INSERT INTO conversations (id, company_id, channel, sender_id, contact_number, last_message_at, last_message_preview, last_inbound_at)
       SELECT gen_random_uuid(), $1, 'WHATSAPP', $2, '+4930' || lpad(g::text, 8, '0'), now() - make_interval(secs => g), 'message ${MESSAGES}', now() - make_interval(secs => g)
         FROM generate_series(0, $3 - 1) g`,
      [COMPANY, SENDER, CONVERSATIONS],
    );
    await client.query(
      `INSERT INTO conversation_messages (id, company_id, conversation_id, channel, direction, message_id, message_type, text, created_at)
       SELECT gen_random_uuid(), c.company_id, c.id, 'WHATSAPP', CASE WHEN k % 2 = 1 THEN 'INBOUND' ELSE 'OUTBOUND' END,
              'seed-' || c.contact_number || '-' || k, 'TEXT', 'message ' || k, c.last_message_at - make_interval(mins => $2 - k)
         FROM conversations c CROSS JOIN generate_series(1, $2) k WHERE c.company_id = $1`,
      [COMPANY, MESSAGES],
    );
    await client.query("ANALYZE");
    const chat = (await client.query(`SELECT id FROM conversations WHERE company_id = $1 ORDER BY last_message_at DESC LIMIT 1 OFFSET 10`, [COMPANY])).rows[0]
      .id;
    console.log(
      `bench/inbox: ${CONVERSATIONS} conversations x ${MESSAGES} messages seeded in ${((performance.now() - t0) / 1000).toFixed(1)} s; inbound ${RATE}/s for ${SECONDS} s with ${STREAMS} streams`,
    );

    // (a), (b)
    const list = await timeGets(`${api}/inbox/conversations`, key, 200);
    const thread = await timeGets(`${api}/inbox/conversations/${chat}/messages`, key, 200);
    const show = (r: typeof list) => (typeof r === "string" ? `not measured (${r})` : `p50 ${ms(r.p50)}, p99 ${ms(r.p99)} (target p99 < 50 ms)`);
    console.log(`(a) GET /inbox/conversations: ${show(list)}`);
    console.log(`(b) GET /inbox/conversations/{chatId}/messages: ${show(thread)}`);

    // (c) inbound at RATE/s with STREAMS open streams.
    const N = RATE * SECONDS;
    const created: number[][] = [];
    const statusAt: number[][] = [];
    for (let s = 0; s < STREAMS; s++) {
      const mine: number[] = [];
      const statuses: number[] = [];
      created.push(mine);
      statusAt.push(statuses);
      streams.push(
        await openStream(`${api}/inbox/events`, key, (type, k) => {
          const now = performance.now();
          if (type === "created") mine[Number(k)] ??= now;
          else {
            statuses[Number(k)] ??= now;
          }
        }),
      );
    }
    const accepted: number[] = [];
    const sendStarted = performance.now();
    const refusedIn = await paced(
      `${ingress}/inbound/whatsapp`,
      N,
      RATE,
      (i) => ({
        companyId: COMPANY,
        messageId: `in-${i}`,
        source: number(i % CONVERSATIONS),
        destination: SENDER,
        receivedDate: new Date().toISOString(),
        messageType: "TEXT",
        text: `bench-${i}`,
      }),
      accepted,
    );
    const sendSeconds = (performance.now() - sendStarted) / 1000;
    const okIn = accepted.filter((x) => x !== undefined).length;
    const answered = sorted(accepted.flatMap((at, i) => (at === undefined ? [] : [at - (sendStarted + (i * 1000) / RATE)])));
    console.log(
      `    ${okIn}/${N} inbound accepted (202) over ${sendSeconds.toFixed(1)} s${refusedText(refusedIn)}; time to the 202 p50 ${ms(pct(answered, 50))}, p99 ${ms(pct(answered, 99))}`,
    );
    const deadline = Date.now() + 30_000;
    const sseCount = () => created.reduce((n, m) => n + m.filter((x) => x !== undefined).length, 0);
    while ((webhookAt.size < okIn || sseCount() < okIn * STREAMS) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    const hook = sorted([...webhookAt].filter(([i]) => accepted[i] !== undefined).map(([i, at]) => Math.max(0, at - accepted[i]!)));
    console.log(
      `(c) INBOUND webhooks: ${hook.length}/${okIn}, latency p50 ${ms(pct(hook, 50))}, p99 ${ms(pct(hook, 99))}, max ${ms(hook.at(-1) ?? NaN)} (target p99 < 1000 ms)`,
    );
    // How the inbox grouped them (its metrics, rendered by the ingress listener of the same process).
    const metrics = await (await fetch(`http://127.0.0.1:${port + 10}/metrics`)).text();
    const metric = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(metrics)?.[1] ?? NaN);
    const txs = metric("inbox_ingest_transaction_messages_count");
    const txSeconds = metric("inbox_ingest_transaction_duration_seconds_sum");
    console.log(
      `    inbox.ingest transactions: ${txs}, ${(metric("inbox_ingest_transaction_messages_sum") / txs).toFixed(1)} messages each on average, ${((txSeconds / txs) * 1000).toFixed(1)} ms each`,
    );
    const sse = sorted(created.flatMap((m) => m.flatMap((at, i) => (at === undefined || accepted[i] === undefined ? [] : [Math.max(0, at - accepted[i]!)]))));
    console.log(
      `    message.created on ${STREAMS} streams: ${sse.length}/${okIn * STREAMS}, latency p50 ${ms(pct(sse, 50))}, p99 ${ms(pct(sse, 99))}, max ${ms(sse.at(-1) ?? NaN)} (target p99 < 250 ms)`,
    );

    // (d) reply statuses at RATE/s.
    const M = RATE * STATUS_SECONDS;
    if (M > 0) {
      const chats = (await client.query(`SELECT id FROM conversations WHERE company_id = $1 ORDER BY id`, [COMPANY])).rows.map((r) => r.id as string);
      const replies = Array.from({ length: M }, (_, i) => ({ id: randomUUID(), chat: chats[i % chats.length]!, messageId: `reply-${i}` }));
      await client.query(
        `INSERT INTO conversation_messages (id, company_id, conversation_id, channel, direction, message_id, message_type, text)
         SELECT x.id, $1, x.chat, 'WHATSAPP', 'OUTBOUND', x.mid, 'TEXT', 'a reply' FROM jsonb_to_recordset($2::jsonb) AS x(id uuid, chat uuid, mid text)`,
        [COMPANY, JSON.stringify(replies.map((r) => ({ id: r.id, chat: r.chat, mid: r.messageId })))],
      );
      for (let i = 0; i < M; i += 1000) {
        await post(
          `${ingress}/messages`,
          replies
            .slice(i, i + 1000)
            .map((r, k) => ({ companyId: COMPANY, channel: "WHATSAPP", customerMessageId: r.messageId, destination: number((i + k) % CONVERSATIONS) })),
        );
      }
      const acceptedStatus: number[] = [];
      const refusedSt = await paced(
        `${ingress}/receipts/whatsapp`,
        M,
        RATE,
        (i) => ({ companyId: COMPANY, messageId: `reply-${i}`, destination: number(i % CONVERSATIONS), statusCode: 3, eventDate: new Date().toISOString() }),
        acceptedStatus,
      );
      const until = Date.now() + 30_000;
      const count = () => statusAt.reduce((n, m) => n + m.filter((x) => x !== undefined).length, 0);
      while (count() < M * STREAMS && Date.now() < until) await new Promise((r) => setTimeout(r, 200));
      const rows = (await client.query(`SELECT count(*)::int AS n FROM inbox_events WHERE company_id = $1 AND type = 'message.status'`, [COMPANY])).rows[0].n;
      const perStream = statusAt.map((m) => m.filter((x) => x !== undefined).length);
      if (rows !== M || perStream.some((n) => n !== M))
        console.log(`    (message.status rows written: ${rows}/${M}; per stream: min ${Math.min(...perStream)}, max ${Math.max(...perStream)})`);
      const st = sorted(
        statusAt.flatMap((m) => m.flatMap((at, i) => (at === undefined || acceptedStatus[i] === undefined ? [] : [Math.max(0, at - acceptedStatus[i]!)]))),
      );
      if (refusedSt.size > 0) console.log(`    receipts${refusedText(refusedSt)}`);
      console.log(
        `(d) message.status on ${STREAMS} streams (receipts at ${RATE}/s for ${STATUS_SECONDS} s): ${st.length}/${M * STREAMS}, latency p50 ${ms(pct(st, 50))}, p99 ${ms(pct(st, 99))}, max ${ms(st.at(-1) ?? NaN)} (target p99 < 250 ms)`,
      );
    }
  } finally {
    for (const s of streams) s.destroy();
    await client.end();
    await service.stop();
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
