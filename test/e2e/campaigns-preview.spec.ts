/**
 * The preview counted by PostgreSQL (issue 30, item 1): its SMS parts and encodings agree with the
 * sender's own splitting (lib/messaging/sms.ts) for every recipient, its samples show contacts only to a key
 * that may read them, and one account's concurrent previews of a large audience neither stall
 * another account nor answer anything but 200 or 429 with Retry-After.
 */
import fc from "fast-check";
import { QueryTypes } from "sequelize";
import { smsInfo } from "../../lib/messaging/sms";
import { parseText, render } from "../../services/campaigns/campaigns.text";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { campaignIn, seedList } from "../helpers/campaigns";
import type { Res } from "../helpers/http";
import { mediaDouble } from "../helpers/media-double";

let t: TestApp;
let a: Account;
const media = mediaDouble();

beforeAll(async () => {
  t = await startTestApp({
    services: ["gateway", "auth", "contacts", "tracking", "campaigns"],
    extraServices: [media.schema],
    config: { rateLimitRps: 10000 },
  });
  a = await t.newAccount(["CAMPAIGNS", "CONTACTS", "SMS", "RCS"]);
}, 60_000);
afterAll(() => t?.stop());

/** Characters that take one or two units, in GSM-7 or only in UCS-2: where the arithmetic and the splitting could part. */
const CHARS = ["a", "b", " ", "€", "[", "~", "é", "Ω", "ł", "😀", "🇵🇹", "ñ"];
const nameArb = fc.array(fc.constantFrom(...CHARS), { minLength: 0, maxLength: 40 }).map((cs) => cs.join(""));

describe("the preview's counts", () => {
  it("counts every recipient's SMS parts and encoding as the sender splits them", async () => {
    const names = fc.sample(nameArb, { numRuns: 80, seed: 30 });
    // Texts near the single-message and part edges, in both encodings.
    const template = `${"x".repeat(120)} {{firstName|😀}} {{lastName|€}} ${"y".repeat(14)}`;
    const { listId } = await seedList(a.api, names.length, {
      contact: (i) => ({ firstName: names[i] || undefined, lastName: names[(i * 7) % names.length] || undefined }),
    });
    const c = await a.api.post("/campaigns", campaignIn([listId], { message: { text: template } }));
    expect(c.status).toBe(201);
    const res = await a.api.get(`/campaigns/${c.body.id}/preview`);
    expect(res.status).toBe(200);

    const parsed = parseText(template);
    const contacts = await t.db.sequelize.query<{ first_name: string | null; last_name: string | null }>(
      `SELECT c.first_name, c.last_name FROM contact_list_members m JOIN contacts c ON c.id = m.contact_id WHERE m.list_id = $1`,
      { bind: [listId], type: QueryTypes.SELECT },
    );
    let parts = 0;
    const encodings = { GSM7: 0, UCS2: 0 };
    for (const r of contacts) {
      const info = smsInfo(render(parsed, { firstName: r.first_name, lastName: r.last_name }, 1600));
      parts += info.parts;
      encodings[info.encoding]++;
    }
    expect(res.body).toMatchObject({ audience: contacts.length, messages: contacts.length, tooLong: 0, parts, encodings });
    expect(res.body.samples).toHaveLength(5);
  });

  it("counts texts over the channel's maximum as tooLong, and never in parts or samples", async () => {
    const { listId } = await seedList(a.api, 3, { contact: (i) => ({ firstName: i === 0 ? "z".repeat(100) : "Ann" }) });
    const c = await a.api.post("/campaigns", campaignIn([listId], { channel: "RCS", message: { text: `${"w".repeat(3000)}{{firstName}}` } }));
    expect(c.status).toBe(201);
    const res = await a.api.get(`/campaigns/${c.body.id}/preview`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ audience: 3, messages: 2, tooLong: 1, parts: null, encodings: null });
    expect(res.body.samples.map((s: { text: string }) => s.text.endsWith("Ann"))).toEqual([true, true]);
  });

  it("shows samples only to a key that may read contacts", async () => {
    const { listId } = await seedList(a.api, 2, { contact: () => ({ firstName: "Private" }) });
    const c = await a.api.post("/campaigns", campaignIn([listId]));
    // A second key of the same account, with CAMPAIGNS and the channel but not CONTACTS.
    const narrow = await t.newAccount(["CAMPAIGNS", "SMS"], { companyId: a.companyId });
    const res = await narrow.api.get(`/campaigns/${c.body.id}/preview`);
    expect(res.status).toBe(200);
    expect(res.body.audience).toBe(2);
    expect(res.body.samples).toEqual([]);
    expect(res.text).not.toContain("Private");
    const full = await a.api.get(`/campaigns/${c.body.id}/preview`);
    expect(full.body.samples[0].text).toContain("Private");
  });
});

describe("one account's previews of a large audience", () => {
  const N = 20_000;

  it("leave another account's requests their latency, and answer 200 or 429 with Retry-After, never a 5xx", async () => {
    const heavy = await t.newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
    const other = await t.newAccount(["CONTACTS"]);
    expect((await other.api.post("/contacts", { phoneNumber: "+14155550111" })).status).toBe(201);
    const list = await heavy.api.post("/contacts/list", { name: "Everyone" });
    const sql = (q: string, bind: unknown[]) => t.db.sequelize.query(q, { bind });
    await sql(
      `INSERT INTO contacts (id, company_id, first_name, phone_number) SELECT gen_random_uuid(), $1, 'P' || i, '+35191' || lpad(i::text, 7, '0') FROM generate_series(1, $2::int) i`,
      [heavy.companyId, N],
    );
    await sql(`INSERT INTO contact_list_members (company_id, list_id, contact_id) SELECT $1, $2, id FROM contacts WHERE company_id = $1`, [
      heavy.companyId,
      list.body.id,
    ]);
    const c = await heavy.api.post("/campaigns", campaignIn([list.body.id], { message: { text: "Hi {{firstName|there}}, {{lastName|friend}}!" } }));
    expect(c.status).toBe(201);

    // The other account's usual latency first, then during 40 concurrent previews.
    const probe = async () => {
      const start = performance.now();
      const r = await other.api.get("/contacts?limit=1");
      expect(r.status).toBe(200);
      return performance.now() - start;
    };
    for (let i = 0; i < 5; i++) await probe();
    // One preview alone, on this machine now (the median of three: a CI machine runs another test
    // file beside this one, and one sample can fall in its quiet or its busy second): the unit the
    // bounds below are counted in.
    const alones: number[] = [];
    for (let i = 0; i < 3; i++) {
      const aloneStart = performance.now();
      expect((await heavy.api.get(`/campaigns/${c.body.id}/preview`)).status).toBe(200);
      alones.push(performance.now() - aloneStart);
    }
    const alone = alones.sort((x, y) => x - y)[1]!;
    let done = false;
    const during: number[] = [];
    const probing = (async () => {
      while (!done) during.push(await probe());
    })();
    const answers: Res[] = await Promise.all(Array.from({ length: 40 }, () => heavy.api.get(`/campaigns/${c.body.id}/preview`))).finally(() => (done = true));
    await probing;

    const statuses = answers.map((r) => r.status);
    expect(statuses.every((s) => s === 200 || s === 429)).toBe(true);
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThanOrEqual(2);
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThan(0);
    for (const r of answers.filter((x) => x.status === 429)) {
      expect(Number(r.headers.get("retry-after"))).toBeGreaterThan(0);
      expect(r.headers.get("content-type")).toMatch(/problem\+json/);
    }
    const ok = answers.find((r) => r.status === 200)!;
    expect(ok.body.audience).toBe(N);
    expect(during.length).toBeGreaterThan(0);
    // Before: the other account waited 15 s and then got a 503 on PostgreSQL. The bounds leave room
    // for a busy 2-core CI machine (one probe can lose a second to the scheduler; embedded PGlite is
    // one session that the previews share with everyone, so a probe may wait for the statement of the
    // preview running then, and the load of the test file running beside this one comes and goes:
    // a clean-clone run saw a median of 2x `alone`), not for a queue: 40 previews queued ahead would
    // be 20 to 40 times `alone`, the account's own queue (HEAVY_QUEUE_PER_ACCOUNT 8) 9 times. Quiet,
    // this machine: alone 486 ms, median 605, max 754. On embedded PGlite each of the probe's
    // statements may wait for one statement of a preview (one session, and it runs in this process),
    // and a full-suite run saw a median of 3.6x `alone` there.
    const sorted = [...during].sort((a, b) => a - b);
    const [median, max] = [sorted[Math.floor(sorted.length / 2)]!, sorted[sorted.length - 1]!];
    const [medianBound, maxBound] = t.db.embedded ? [6, 10] : [3, 6];
    expect(median).toBeLessThan(Math.max(2000, medianBound * alone));
    expect(max).toBeLessThan(Math.max(5000, maxBound * alone));
  }, 120_000);
});
