/**
 * bench/contacts (part a; part b, the CSV import against `psql \copy`, comes with imports):
 * seeds 1,000,000 contacts in one account with one set-based INSERT on a fresh PostgreSQL database,
 * starts `npm start` on it (whole process), and times GET /contacts over HTTP, p50 and p99 of
 * REQUESTS sequential requests each: a `search=` filter, `isValid`+`communicationSupported`, and page
 * 500 of a 1000-row sort. The floor, in the same run, is the same SELECT ... LIMIT run directly in
 * PostgreSQL (no count, no HTTP). Target: filtered list p99 under 100 ms.
 *
 *   npm run bench:contacts [-- --rows 1000000 --requests 200]
 *   BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres (default)
 */
import { parseArgs } from "node:util";
import pg from "pg";
import { createBenchDatabase } from "../database";
import { startService } from "../service";

const { values } = parseArgs({ options: { rows: { type: "string", default: "1000000" }, requests: { type: "string", default: "200" } } });
const ROWS = Number(values.rows);
const REQUESTS = Number(values.requests);

function percentile(sorted: number[], p: number) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function time(n: number, fn: () => Promise<void>) {
  const ms: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await fn();
    ms.push(performance.now() - t0);
  }
  ms.sort((a, b) => a - b);
  return { p50: percentile(ms, 50), p99: percentile(ms, 99) };
}

async function main() {
  const benchDb = await createBenchDatabase();
  const dbUrl = benchDb.url;
  const db = new pg.Client({ connectionString: dbUrl });
  const service = await startService(dbUrl, 3950 + Math.floor(Math.random() * 40));
  const port = service.port;
  try {
    const key = service.adminKey("bench", "CONTACTS");
    await db.connect();
    const t0 = performance.now();
    await db.query(
      `INSERT INTO contacts (id, company_id, first_name, last_name, phone_number, email, is_test, communication_supported, created_at, updated_at)
       SELECT gen_random_uuid(), 'bench',
              (ARRAY['Ana','Bruno','Carla','David','Eva','Filipe','Gabriela','Hugo','Ines','Joao'])[1 + i % 10],
              (ARRAY['Silva','Santos','Ferreira','Pereira','Oliveira','Costa','Rodrigues','Martins','Jesus','Sousa'])[1 + (i / 10) % 10] || ' ' || i,
              '+4930' || lpad(i::text, 8, '0'),
              CASE WHEN i % 3 = 0 THEN 'user' || i || '@example.com' END,
              i % 50 = 0,
              CASE WHEN i % 4 = 0 THEN ARRAY['SMS','RCS'] WHEN i % 7 = 0 THEN ARRAY['SMS','WHATSAPP'] ELSE ARRAY['SMS'] END,
              now() - (i || ' seconds')::interval, now()
         FROM generate_series(1, $1::int) AS i`,
      [ROWS],
    );
    await db.query("VACUUM ANALYZE contacts"); // what autovacuum does for a live table
    const seedS = (performance.now() - t0) / 1000;
    const api = (qs: string) => async () => {
      const r = await fetch(`http://127.0.0.1:${port}/api/partner-gateway/v1/contacts?${qs}`, { headers: { "x-api-key": key } });
      if (r.status !== 200) throw new Error(`GET /contacts?${qs} answered ${r.status}: ${await r.text()}`);
      await r.arrayBuffer();
    };
    const cases: Array<[string, string, string]> = [
      [
        "search=Carla Silva 12",
        "search=Silva%20123",
        `SELECT * FROM contacts c WHERE company_id = 'bench' AND (full_name ILIKE '%Silva 123%' OR (coalesce(phone_number,'') || ' ' || coalesce(email,'')) ILIKE '%Silva 123%') ORDER BY lower(nullif(full_name, '')), id LIMIT 10`,
      ],
      [
        "isValid+communicationSupported=RCS",
        "isValid=true&communicationSupported=RCS",
        `SELECT * FROM contacts c WHERE company_id = 'bench' AND is_valid AND 'RCS' = ANY (communication_supported) ORDER BY lower(nullif(full_name, '')), id LIMIT 10`,
      ],
      [
        "page 500 of limit 1000, sort fullName",
        "limit=1000&page=500",
        `SELECT * FROM contacts c WHERE company_id = 'bench' ORDER BY lower(nullif(full_name, '')), id LIMIT 1000 OFFSET 500000`,
      ],
    ];
    console.log(
      `bench/contacts: ${ROWS.toLocaleString()} contacts seeded in ${seedS.toFixed(1)} s (one INSERT ... SELECT); ${REQUESTS} sequential requests per case; PostgreSQL`,
    );
    for (const [label, qs, sql] of cases) {
      await time(5, api(qs)); // warm caches
      const ours = await time(REQUESTS, api(qs));
      const floor = await time(Math.min(REQUESTS, 50), async () => void (await db.query(sql)));
      console.log(
        `${label.padEnd(40)} GET /contacts p50 ${ours.p50.toFixed(1).padStart(7)} ms  p99 ${ours.p99.toFixed(1).padStart(7)} ms   | SQL page alone p50 ${floor.p50.toFixed(1)} ms p99 ${floor.p99.toFixed(1)} ms`,
      );
    }
    console.log("target: filtered list p99 under 100 ms");
  } finally {
    await db.end().catch(() => undefined);
    await service.stop();
    await benchDb.drop();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
