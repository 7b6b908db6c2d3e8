/**
 * bench/fairness: what one account's heavy work costs another account (issue 30, items 1 and 2),
 * whole process (`npm start` on a fresh PostgreSQL database).
 *
 * (a) Previews: account H keeps CONCURRENCY `GET /campaigns/{id}/preview` of a draft with
 *     placeholders over CONTACTS contacts in flight for SECONDS s, while account O sends
 *     `GET /contacts?limit=1` one at a time. Prints O's p50/p99 idle and during, their ratio, and how
 *     H's previews were answered (200, 429, other).
 * (b) Bulk bodies: account H posts the largest bulk body the schema allows, all malformed
 *     (`POST /contacts/list/contacts` with 10,000 contact ids and 10,000 exclusions, ~600 KB) back
 *     to back for SECONDS s, while O sends
 *     `GET /authentication/me` one at a time. Prints O's p50/p99 idle and during, and H's answer time.
 *
 *   npm run bench:fairness [-- --contacts 100000 --concurrency 40 --seconds 10]
 *
 * Last line: RESULT preview_other_p99_ms=<x> preview_other_p99_ratio=<x> bulk_other_p99_ms=<x> bulk_other_p99_ratio=<x>
 */
import { parseArgs } from "node:util";
import pg from "pg";
import { createBenchDatabase } from "../database";
import { startService } from "../service";

const { values } = parseArgs({
  options: {
    contacts: { type: "string", default: "100000" },
    concurrency: { type: "string", default: "40" },
    seconds: { type: "string", default: "10" },
    port: { type: "string", default: "3310" },
  },
});
const CONTACTS = Number(values.contacts);
const CONCURRENCY = Number(values.concurrency);
const SECONDS = Number(values.seconds);
const PORT = Number(values.port);
const BASE = `http://127.0.0.1:${PORT}/api/partner-gateway/v1`;

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]! : NaN;
};
const fmt = (xs: number[]) => `p50 ${pct(xs, 50).toFixed(1)} ms, p99 ${pct(xs, 99).toFixed(1)} ms (${xs.length} requests)`;

async function call(method: string, path: string, key: string, body?: unknown): Promise<{ status: number; body: unknown }> {
  const r = await fetch(BASE + path, {
    method,
    headers: { "x-api-key": key, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, body: text && /json/.test(r.headers.get("content-type") ?? "") ? JSON.parse(text) : text };
}

/** Answers other than 200 to the probes, by status. */
const probeFailures = new Map<number, number>();

/** Latencies of `path` for `key`, one request at a time, until `until()` says stop (at least `min`); other answers than 200 are counted. */
async function probe(path: string, key: string, until: () => boolean, min = 0): Promise<number[]> {
  const times: number[] = [];
  while (!until() || times.length < min) {
    const t0 = performance.now();
    const r = await call("GET", path, key);
    times.push(performance.now() - t0);
    if (r.status !== 200) probeFailures.set(r.status, (probeFailures.get(r.status) ?? 0) + 1);
  }
  return times;
}

async function main() {
  const database = await createBenchDatabase();
  const service = await startService(database.url, PORT, { RATE_LIMIT_RPS: "100000" });
  try {
    const heavy = service.adminKey("bench-heavy", "CAMPAIGNS,CONTACTS,SMS");
    const other = service.adminKey("bench-other", "CONTACTS,AUTHENTICATION");
    if ((await call("POST", "/contacts", other, { phoneNumber: "+14155550111" })).status !== 201) throw new Error("other's contact");
    const list = await call("POST", "/contacts/list", heavy, { name: "Everyone" });
    const listId = (list.body as { id: number }).id;
    const db = new pg.Client({ connectionString: database.url });
    await db.connect();
    await db.query(
      `INSERT INTO contacts (id, company_id, first_name, phone_number) SELECT gen_random_uuid(), 'bench-heavy', 'P' || i, '+35191' || lpad(i::text, 7, '0') FROM generate_series(1, $1::int) i`,
      [CONTACTS],
    );
    await db.query(
      `INSERT INTO contact_list_members (company_id, list_id, contact_id) SELECT 'bench-heavy', $1, id FROM contacts WHERE company_id = 'bench-heavy'`,
      [listId],
    );
    await db.query("VACUUM ANALYZE contacts");
    await db.query("VACUUM ANALYZE contact_list_members");
    await db.end();
    const draft = await call("POST", "/campaigns", heavy, {
      name: "Fairness",
      channel: "SMS",
      contactListIds: [listId],
      message: { text: "Hi {{firstName|there}}, {{lastName|friend}}: our news this week." },
    });
    if (draft.status !== 201) throw new Error(`draft: ${draft.status} ${JSON.stringify(draft.body)}`);
    const id = (draft.body as { id: string }).id;
    const t0 = performance.now();
    const one = await call("GET", `/campaigns/${id}/preview`, heavy);
    console.log(`one preview of ${CONTACTS} contacts: ${(performance.now() - t0).toFixed(0)} ms (${one.status})`);

    // (a) previews
    let end = Date.now() + 3000;
    const idleA = await probe("/contacts?limit=1", other, () => Date.now() > end, 50);
    end = Date.now() + SECONDS * 1000;
    const answers = new Map<string, number>();
    const previews = Array.from({ length: CONCURRENCY }, async () => {
      while (Date.now() < end) {
        const r = await call("GET", `/campaigns/${id}/preview`, heavy);
        const k = r.status === 200 || r.status === 429 ? String(r.status) : `other ${r.status}`;
        answers.set(k, (answers.get(k) ?? 0) + 1);
        if (r.status === 429) await new Promise((res) => setTimeout(res, 50));
      }
    });
    const duringA = await probe("/contacts?limit=1", other, () => Date.now() > end);
    await Promise.all(previews);
    console.log(`(a) other account's GET /contacts?limit=1 idle:   ${fmt(idleA)}`);
    console.log(`    during ${CONCURRENCY} concurrent previews:       ${fmt(duringA)}`);
    console.log(`    previews answered: ${[...answers].map(([k, n]) => `${k}: ${n}`).join(", ")}`);

    // (b) the largest malformed bulk body
    const bad = (p: string) => Array.from({ length: 10000 }, (_, i) => `${p}-${i}-not-a-uuid-${"x".repeat(8)}`);
    const bulk = { listIds: [listId], contactIds: bad("c"), excludeIdsAllContacts: bad("x") };
    end = Date.now() + 3000;
    const idleB = await probe("/authentication/me", other, () => Date.now() > end, 50);
    end = Date.now() + SECONDS * 1000;
    const bulkTimes: number[] = [];
    const bulkStatuses = new Set<number>();
    const posting = (async () => {
      while (Date.now() < end) {
        const b0 = performance.now();
        const r = await call("POST", "/contacts/list/contacts", heavy, bulk);
        bulkTimes.push(performance.now() - b0);
        bulkStatuses.add(r.status);
      }
    })();
    const duringB = await probe("/authentication/me", other, () => Date.now() > end);
    await posting;
    console.log(`(b) other account's GET /authentication/me idle:  ${fmt(idleB)}`);
    console.log(`    while 20,000 malformed ids are posted:         ${fmt(duringB)}`);
    console.log(`    the bulk answers (${[...bulkStatuses].join(", ")}): ${fmt(bulkTimes)}`);
    if (probeFailures.size)
      console.log(`    the other account's probes answered other than 200: ${[...probeFailures].map(([k, n]) => `${k}: ${n}`).join(", ")}`);
    const r = (a: number[], b: number[]) => (pct(b, 99) / pct(a, 99)).toFixed(2);
    console.log(
      `RESULT preview_other_p99_ms=${pct(duringA, 99).toFixed(1)} preview_other_p99_ratio=${r(idleA, duringA)} bulk_other_p99_ms=${pct(duringB, 99).toFixed(1)} bulk_other_p99_ratio=${r(idleB, duringB)}`,
    );
  } finally {
    await service.stop();
    await database.drop();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
