/**
 * A 100,000-row message-history export, downloaded through the signed URL (gzip) and compared cell
 * by cell with the rows read back from the database and formatted here, independently of the SQL
 * that wrote the file: ISO timestamps, status names, neutralised formulas, quotes, commas, line
 * breaks and non-ASCII text, NULL against empty.
 */
import { parse } from "csv-parse/sync";
import { QueryTypes } from "sequelize";
import { statusByCode } from "../../lib/messaging/channels";
import { startTestApp, type TestApp } from "../helpers/app";
import { exportedFileUrl, HISTORY_HEADER } from "../helpers/exports";

const ROWS = 100_000;
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ services: ["gateway", "auth", "tracking", "exports"], config: { exportWorkers: 1 } });
}, 60_000);
afterAll(() => t?.stop());

// Cells that must come back exactly (after the neutralising quote where the contract wants one).
const TRICKY = [
  "=1+2",
  "+351 call me",
  "-minus",
  "@at",
  "\tlead tab",
  "\rlead cr",
  'quote " inside',
  "comma, inside",
  "line\nbreak",
  "ünï 😀 中文",
  "",
  "plain",
  "'already quoted",
  " =space first",
];

const neutral = (s: string | null) => (s === null ? "" : /^[=+\-@\t\r]/.test(s) ? `'${s}` : s);
const isoOrEmpty = (d: Date | null) => (d ? new Date(d).toISOString() : "");

interface Row {
  customer_message_id: string;
  channel: string;
  destination: string;
  sent_at: Date;
  status_code: number;
  delivery_date: Date | null;
  read_at: Date | null;
  text: string | null;
  campaign_id: string | null;
  total_parts: number;
  price: string | null;
  simulation: boolean;
}

it(`exports ${ROWS} rows that match the database cell by cell`, async () => {
  const a = await t.newAccount(["EXPORTS"]);
  const tricky = `ARRAY[${TRICKY.map((s) => `'${s.replace(/'/g, "''")}'`).join(", ")}]`
    .replace(/\t/g, "' || chr(9) || '")
    .replace(/\r/g, "' || chr(13) || '")
    .replace(/\n/g, "' || chr(10) || '");
  await t.db.sequelize.query(
    `INSERT INTO messages (company_id, channel, customer_message_id, destination, sent_at, total_parts, text, campaign_id, simulation, status_code, delivery_date, read_at, price)
     SELECT $1, (ARRAY['SMS','RCS','WHATSAPP'])[1 + i % 3],
            CASE WHEN i % 97 = 0 THEN '=id' || i ELSE 'id-' || i END,
            '+35191' || lpad(i::text, 7, '0'),
            timestamptz '2026-10-01T00:00:00Z' + (i * 1001 || ' milliseconds')::interval,
            1 + i % 3,
            CASE WHEN i % 11 = 0 THEN NULL ELSE (${tricky})[1 + i % ${TRICKY.length}] || CASE WHEN i % 2 = 0 THEN '' ELSE ' #' || i END END,
            CASE WHEN i % 7 = 0 THEN 'camp-' || (i % 13) END,
            i % 50 = 0,
            (ARRAY[0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12])[1 + i % 11],
            CASE WHEN i % 4 = 0 THEN timestamptz '2026-10-02T00:00:00Z' + (i || ' seconds')::interval END,
            CASE WHEN i % 8 = 0 THEN timestamptz '2026-10-03T00:00:00Z' + (i || ' seconds')::interval END,
            CASE WHEN i % 5 = 0 THEN (i % 1000) / 1000.0 + 0.000001 * (i % 7) END
       FROM generate_series(1, $2::int) AS i`,
    { bind: [a.companyId, ROWS] },
  );

  const { url } = await exportedFileUrl(a.api, t.app.port!, "/messages/history/export");
  const file = await fetch(url, { headers: { "accept-encoding": "gzip" } });
  expect(file.status).toBe(200);
  // fetch decodes gzip itself; the bytes it hands over are the CSV.
  const csv = Buffer.from(await file.arrayBuffer());
  expect(csv.subarray(0, 3).equals(Buffer.from([0xef, 0xbb, 0xbf]))).toBe(false); // no BOM: plain UTF-8
  const records: string[][] = parse(csv);
  const [header, ...cells] = records;
  expect(header).toEqual(HISTORY_HEADER);
  expect(cells).toHaveLength(ROWS);
  expect((await a.api.get("/exports")).body.data[0].rowCount).toBe(ROWS);

  const rows = await t.db.sequelize.query<Row>(
    `SELECT customer_message_id, channel, destination, sent_at, status_code, delivery_date, read_at, text, campaign_id, total_parts, price::text AS price, simulation
       FROM messages WHERE company_id = $1 ORDER BY sent_at DESC, id DESC`,
    { bind: [a.companyId], type: QueryTypes.SELECT },
  );
  let mismatches = 0;
  rows.forEach((r, i) => {
    const st = statusByCode(r.status_code);
    const expected = [
      neutral(r.customer_message_id),
      r.channel,
      neutral(r.destination),
      isoOrEmpty(r.sent_at),
      st.name,
      String(r.status_code),
      st.description,
      isoOrEmpty(r.delivery_date),
      isoOrEmpty(r.read_at),
      neutral(r.text),
      neutral(r.campaign_id),
      String(r.total_parts),
      r.price === null ? "" : String(Number(r.price)),
      String(r.simulation),
    ];
    if (JSON.stringify(cells[i]) !== JSON.stringify(expected) && mismatches++ < 5) expect({ row: i, cells: cells[i] }).toEqual({ row: i, cells: expected });
  });
  expect(mismatches).toBe(0);
}, 180_000);
