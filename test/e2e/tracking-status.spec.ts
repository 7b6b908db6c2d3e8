/**
 * Polling (GET /messages/status), the message history (GET /messages/history) and retention,
 * through the real gateway, with messages fed in through the real ingress.
 */
import { QueryTypes } from "sequelize";
import { startTestApp, uid, type Account, type TestApp } from "../helpers/app";
import { expectProblem } from "../helpers/expect";

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ services: ["gateway", "auth", "tracking"] });
});
afterAll(() => t?.stop());

const post = async (path: string, body: unknown) => {
  const res = await t.ingress.post(path, body);
  expect(res.status).toBe(202);
};

describe("GET /messages/status/{customerMessageId}", () => {
  it("answers an id the account never sent with UNKNOWN, code 0", async () => {
    const a = await t.newAccount(["SMS"]);
    const res = await a.api.get("/messages/status/never-sent?channel=SMS");
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      customerMessageId: "never-sent",
      channel: "SMS",
      deliveryStatus: "UNKNOWN",
      statusCode: 0,
      description: "unknown",
      destination: null,
      sentAt: null,
      deliveryDate: null,
      readAt: null,
      simulation: false,
    });
  });

  it("never shows another account's message (it reads UNKNOWN there)", async () => {
    const a = await t.newAccount(["SMS"]);
    const b = await t.newAccount(["SMS"]);
    await post("/messages", { companyId: a.companyId, channel: "SMS", customerMessageId: "shared-id", destination: "+351911000001" });
    expect((await a.api.get("/messages/status/shared-id?channel=SMS")).body.deliveryStatus).toBe("ACCEPTED");
    expect((await b.api.get("/messages/status/shared-id?channel=SMS")).body).toMatchObject({ deliveryStatus: "UNKNOWN", destination: null });
  });

  it("keeps channels apart: the same id on another channel is another message", async () => {
    const a = await t.newAccount(["SMS", "RCS"]);
    await post("/messages", { companyId: a.companyId, channel: "SMS", customerMessageId: "same", destination: "+351911000002" });
    expect((await a.api.get("/messages/status/same?channel=RCS")).body.deliveryStatus).toBe("UNKNOWN");
    expect((await a.api.get("/messages/status/same?channel=SMS")).body.deliveryStatus).toBe("ACCEPTED");
  });

  it("decodes ids with reserved characters in the path", async () => {
    const a = await t.newAccount(["SMS"]);
    const id = "order/42 #1";
    await post("/messages", { companyId: a.companyId, channel: "SMS", customerMessageId: id, destination: "+351911000003" });
    const res = await a.api.get(`/messages/status/${encodeURIComponent(id)}?channel=SMS`);
    expect(res.body).toMatchObject({ customerMessageId: id, deliveryStatus: "ACCEPTED" });
  });

  it("needs the channel: missing or unknown is a 400", async () => {
    const a = await t.newAccount(["SMS"]);
    expectProblem(await a.api.get("/messages/status/x"), 400);
    expectProblem(await a.api.get("/messages/status/x?channel=TELEGRAM"), 400);
  });

  it("needs the key operation named by the channel: another channel, or none, is a 401", async () => {
    const a = await t.newAccount(["SMS", "CONTACTS"]);
    expectProblem(await a.api.get("/messages/status/x?channel=WHATSAPP"), 401);
    const c = await t.newAccount(["CONTACTS"]);
    expectProblem(await c.api.get("/messages/status/x?channel=SMS"), 401);
    expectProblem(await c.api.get("/messages/status/x"), 401);
    expectProblem(await t.api.get("/messages/status/x?channel=SMS"), 401);
  });
});

describe("GET /messages/status (bulk)", () => {
  it("answers one entry per id in the order given, repeats again, never-sent ids UNKNOWN", async () => {
    const a = await t.newAccount(["WHATSAPP"]);
    await post("/messages", [
      { companyId: a.companyId, channel: "WHATSAPP", customerMessageId: "w1", destination: "+351911000011" },
      { companyId: a.companyId, channel: "WHATSAPP", customerMessageId: "w2", destination: "+351911000012" },
    ]);
    await post("/receipts/whatsapp", {
      companyId: a.companyId,
      messageId: "w2",
      destination: "+351911000012",
      statusCode: 10,
      eventDate: "2026-11-20T10:00:00Z",
    });
    const res = await a.api.get("/messages/status?channel=WHATSAPP&ids=w2,nope,w1,w2");
    expect(res.status).toBe(200);
    expect(
      res.body.data.map((s: { customerMessageId: string; deliveryStatus: string; statusCode: number }) => [
        s.customerMessageId,
        s.deliveryStatus,
        s.statusCode,
      ]),
    ).toEqual([
      ["w2", "DISABLED", 10],
      ["nope", "UNKNOWN", 0],
      ["w1", "UNKNOWN", 0],
      ["w2", "DISABLED", 10],
    ]);
    expect(res.body.data[0]).toMatchObject({ destination: "+351911000012", deliveryDate: "2026-11-20T10:00:00.000Z", description: "disabled" });
  });

  it("answers 1000 ids and refuses 1001, a missing channel, missing ids or an empty id with 400", async () => {
    const a = await t.newAccount(["SMS"]);
    const ids = (n: number) => Array.from({ length: n }, (_, i) => `id-${i}`).join(",");
    const ok = await a.api.get(`/messages/status?channel=SMS&ids=${ids(1000)}`);
    expect(ok.status).toBe(200);
    expect(ok.body.data).toHaveLength(1000);
    expect(ok.body.data[999].customerMessageId).toBe("id-999");
    const over = await a.api.get(`/messages/status?channel=SMS&ids=${ids(1001)}`);
    expectProblem(over, 400);
    expect(over.body.errors).toEqual([{ path: "ids", message: "must name at most 1000 ids" }]);
    expectProblem(await a.api.get(`/messages/status?ids=a,b`), 400);
    expectProblem(await a.api.get(`/messages/status?channel=SMS`), 400);
    expectProblem(await a.api.get(`/messages/status?channel=SMS&ids=a,,b`), 400);
  });

  it("takes 1000 ids of the longest allowed length in the URL, and refuses a request head past 256 KiB with 431", async () => {
    const a = await t.newAccount(["SMS"]);
    const long = Array.from({ length: 1000 }, (_, i) => `${String(i).padStart(4, "0")}${"x".repeat(196)}`);
    await post("/messages", { companyId: a.companyId, channel: "SMS", customerMessageId: long[999], destination: "+351911000021" });
    const res = await a.api.get(`/messages/status?channel=SMS&ids=${long.join(",")}`);
    expect(res.status).toBe(200);
    expect(res.body.data).toHaveLength(1000);
    expect(res.body.data[999]).toMatchObject({ customerMessageId: long[999], deliveryStatus: "ACCEPTED" });
    const tooLong = await a.api.get(`/messages/status?channel=SMS&ids=${"y".repeat(300 * 1024)}`);
    expectProblem(tooLong, 431);
  });

  it("is scoped by the channel operation of the key", async () => {
    const a = await t.newAccount(["RCS"]);
    expectProblem(await a.api.get(`/messages/status?channel=SMS&ids=a`), 401);
    expect((await a.api.get(`/messages/status?channel=RCS&ids=a`)).status).toBe(200);
  });
});

describe("GET /messages/history", () => {
  let a: Account;
  const sent = (i: number) => new Date(Date.UTC(2026, 10, 1, 0, 0, i)).toISOString();
  beforeAll(async () => {
    a = await t.newAccount(["SMS", "RCS", "WHATSAPP"]);
    // 25 messages: SMS, RCS and WhatsApp in turn, two campaigns, one destination repeated; two share a sentAt.
    const body = Array.from({ length: 25 }, (_, i) => ({
      companyId: a.companyId,
      channel: (["SMS", "RCS", "WHATSAPP"] as const)[i % 3],
      customerMessageId: `h-${String(i).padStart(2, "0")}`,
      destination: i % 5 === 0 ? "+351930000000" : `+3519300000${String(i).padStart(2, "0")}`,
      sentAt: sent(i === 24 ? 23 : i),
      text: `text ${i}`,
      campaignId: i % 2 === 0 ? "camp-even" : undefined,
    }));
    await post("/messages", body);
    await post("/receipts/sms", {
      companyId: a.companyId,
      MESSAGE_ID: "h-00",
      DESTINATION: "+351930000000",
      DELIVERY_STATUS: 3,
      DELIVERY_DATE: sent(30),
      PRICE: 0.05,
    });
    await post("/receipts/rcs", { companyId: a.companyId, messageId: "h-01", destination: "+351930000001", statusCode: 9, eventDate: sent(31) });
    // Another account's messages never show.
    const other = await t.newAccount(["SMS"]);
    await post("/messages", { companyId: other.companyId, channel: "SMS", customerMessageId: "other", destination: "+351930000099", sentAt: sent(50) });
  });

  const all = async (api: Account["api"], query: string, limit: number) => {
    const seen: Array<Record<string, unknown>> = [];
    let cursor: string | null = null;
    for (let pages = 0; pages < 100; pages++) {
      const res = await api.get(`/messages/history?limit=${limit}${query}${cursor ? `&cursor=${cursor}` : ""}`);
      expect(res.status).toBe(200);
      expect(res.body.limit).toBe(limit);
      seen.push(...res.body.data);
      cursor = res.body.nextCursor;
      if (!cursor) return seen;
    }
    throw new Error("too many pages");
  };

  it("lists every message once, newest first (ties by arrival), across cursor pages", async () => {
    const rows = await all(a.api, "", 4);
    expect(rows.map((r) => r.customerMessageId)).toEqual(["h-24", "h-23", ...Array.from({ length: 23 }, (_, i) => `h-${String(22 - i).padStart(2, "0")}`)]);
    expect(rows.find((r) => r.customerMessageId === "h-00")).toEqual({
      customerMessageId: "h-00",
      channel: "SMS",
      deliveryStatus: "DELIVERED",
      statusCode: 3,
      description: "delivered",
      destination: "+351930000000",
      sentAt: sent(0),
      deliveryDate: sent(30),
      readAt: null,
      simulation: false,
      text: "text 0",
      campaignId: "camp-even",
      totalParts: 1,
      price: 0.05,
    });
  });

  it("answers the default page of 10 with a cursor, and null on the last page", async () => {
    const res = await a.api.get("/messages/history");
    expect(res.body.data).toHaveLength(10);
    expect(res.body.limit).toBe(10);
    expect(typeof res.body.nextCursor).toBe("string");
    const last = await a.api.get("/messages/history?limit=1000");
    expect(last.body.data).toHaveLength(25);
    expect(last.body.nextCursor).toBeNull();
  });

  it.each([
    ["channel=RCS", (i: number) => i % 3 === 1],
    ["status=DELIVERED", (i: number) => i === 0],
    ["status=ERROR", (i: number) => i === 1],
    ["status=ACCEPTED", (i: number) => i % 3 === 0 && i !== 0],
    ["destination=%2B351930000000", (i: number) => i % 5 === 0],
    ["campaignId=camp-even", (i: number) => i % 2 === 0],
    [`from=${encodeURIComponent(sent(10))}&to=${encodeURIComponent(sent(20))}`, (i: number) => i >= 10 && i < 20],
    [`channel=SMS&destination=%2B351930000000&from=${encodeURIComponent(sent(5))}`, (i: number) => i % 3 === 0 && i % 5 === 0 && i >= 5],
  ])("filters by %s", async (query, keep) => {
    const rows = await all(a.api, `&${query}`, 3);
    const expected = Array.from({ length: 25 }, (_, i) => i)
      .filter(keep)
      .map((i) => `h-${String(i).padStart(2, "0")}`);
    expect(rows.map((r) => r.customerMessageId).sort()).toEqual(expected.sort());
  });

  it("lists only the key's channels, and a channel filter outside them is a 401", async () => {
    const k = await t.newAccount(["RCS"], { companyId: a.companyId });
    const rows = await all(k.api, "", 50);
    expect(new Set(rows.map((r) => r.channel))).toEqual(new Set(["RCS"]));
    expect(rows).toHaveLength(8);
    expectProblem(await k.api.get("/messages/history?channel=SMS"), 401);
    const none = await t.newAccount(["CONTACTS"], { companyId: a.companyId });
    expectProblem(await none.api.get("/messages/history"), 401);
  });

  it.each([
    ["limit=1001"],
    ["limit=0"],
    ["cursor=not-a-cursor"],
    [`cursor=${Buffer.from('["x","1"]').toString("base64url")}`],
    ["from=yesterday"],
    [`from=${encodeURIComponent(sent(5))}&to=${encodeURIComponent(sent(5))}`],
    ["status=LOST"],
    ["channel=FAX"],
    ["destination=12345"],
    ["page=2"],
    ["from=0000-01-01T00%3A00%3A00Z"],
    [`cursor=${Buffer.from('["1","1"]').toString("base64url")}`],
    [`cursor=${Buffer.from('["2026-01-01T00:00:00.000000Z","9999999999999999999"]').toString("base64url")}`],
  ])("refuses %s with 400", async (query) => {
    expectProblem(await a.api.get(`/messages/history?${query}`), 400);
  });
});

describe("tracking.statusCodes (for another service's own sends)", () => {
  it("answers each id's code in order, 0 for one the account never sent or another account's", async () => {
    const companyId = uid();
    const other = uid();
    await post("/messages", [
      { companyId, channel: "RCS", customerMessageId: "sc-1", destination: "+351911000001" },
      { companyId, channel: "RCS", customerMessageId: "sc-2", destination: "+351911000002" },
      { companyId: other, channel: "RCS", customerMessageId: "sc-3", destination: "+351911000003" },
    ]);
    await post("/receipts/rcs", { companyId, messageId: "sc-1", destination: "+351911000001", statusCode: 3, eventDate: new Date().toISOString() });
    const out = await t.app.broker.call("tracking.statusCodes", { companyId, channel: "RCS", ids: ["sc-2", "sc-1", "never", "sc-3", "sc-1"] });
    expect(out).toEqual({ codes: [0, 3, 0, 0, 3] });
    await expect(t.app.broker.call("tracking.statusCodes", { companyId, channel: "FAX", ids: [] })).rejects.toThrow();
  });
});

describe("retention", () => {
  it("drops whole days older than the retention, their keys first in bounded batches, and keeps the rest", async () => {
    const companyId = uid();
    await post(
      "/messages",
      Array.from({ length: 7 }, (_, i) => ({ companyId, channel: "SMS", customerMessageId: `r-${i}`, destination: "+351911000099" })),
    );
    // Six of them as if stored 401 days ago, four hours apart (r-0 at midnight): moved (row movement)
    // into that day's partition, their keys with them.
    const old = new Date(Date.now() - 401 * 86400_000).toISOString().slice(0, 10);
    await t.db.sequelize.query(`SELECT ensure_message_partitions($1::date, $1::date)`, { bind: [old] });
    await t.db.sequelize.query(
      `WITH moved AS (
         UPDATE messages SET id = message_id_floor($2::date::timestamp AT TIME ZONE 'UTC' + substr(customer_message_id, 3)::int * interval '4 hours') | (id & 4194303)
          WHERE company_id = $1 AND customer_message_id <> 'r-6' RETURNING company_id, channel, customer_message_id, id)
       UPDATE message_keys k SET id = moved.id FROM moved
        WHERE k.company_id = moved.company_id AND k.channel = moved.channel AND k.customer_message_id = moved.customer_message_id`,
      { bind: [companyId, old] },
    );
    const partition = `messages_p${old.replaceAll("-", "")}`;
    const out = (await t.app.broker.call("tracking.purge", { batchSize: 2 })) as { messages: number; batches: number; days: string[] };
    expect(out.messages).toBeGreaterThanOrEqual(6);
    expect(out.batches).toBeGreaterThanOrEqual(4); // 6 keys at 2 per statement in id order, and the last, short one
    expect(out.days).toContain(old);
    const [gone] = await t.db.sequelize.query<{ t: string | null }>(`SELECT to_regclass($1) AS t`, { bind: [partition], type: QueryTypes.SELECT });
    expect(gone!.t).toBeNull();
    const left = await t.db.sequelize.query<{ customer_message_id: string }>(`SELECT customer_message_id FROM messages WHERE company_id = $1`, {
      bind: [companyId],
      type: QueryTypes.SELECT,
    });
    expect(left.map((r) => r.customer_message_id)).toEqual(["r-6"]);
    const keys = await t.db.sequelize.query<{ customer_message_id: string }>(`SELECT customer_message_id FROM message_keys WHERE company_id = $1`, {
      bind: [companyId],
      type: QueryTypes.SELECT,
    });
    expect(keys.map((r) => r.customer_message_id)).toEqual(["r-6"]);
    // A late receipt for a retired message is stored as a message first heard of by its receipt.
    await post("/receipts/sms", { companyId, MESSAGE_ID: "r-0", DESTINATION: "+351911000099", DELIVERY_STATUS: 3, DELIVERY_DATE: new Date().toISOString() });
    const [row] = await t.db.sequelize.query<{ status_code: number; sent_at: Date | null }>(
      `SELECT status_code, sent_at FROM messages WHERE company_id = $1 AND customer_message_id = 'r-0'`,
      { bind: [companyId], type: QueryTypes.SELECT },
    );
    expect(row).toEqual({ status_code: 3, sent_at: null });
  });

  it("keeps the days from yesterday to a week ahead made: tracking makes a missing one again, and only that one", async () => {
    const day = (n: number) => `messages_p${new Date(Date.now() + n * 86400_000).toISOString().slice(0, 10).replaceAll("-", "")}`;
    // The week-ahead day is empty: dropped, then made again by tracking's own hourly job.
    await t.db.sequelize.query(`DROP TABLE ${day(7)}`);
    const tracking = t.app.broker.getLocalService("tracking") as unknown as { ensureDays(): Promise<void> };
    await tracking.ensureDays();
    const names = [day(-1), day(0), day(7)];
    const rows = await t.db.sequelize.query<{ t: string | null }>(`SELECT to_regclass(n) AS t FROM unnest($1::text[]) n`, {
      bind: [names],
      type: QueryTypes.SELECT,
    });
    expect(rows.map((r) => r.t)).toEqual(names);
    // It is a partition like the others: attached, with the history indexes.
    const [idx] = await t.db.sequelize.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_indexes WHERE tablename = $1`, {
      bind: [day(7)],
      type: QueryTypes.SELECT,
    });
    expect(idx!.n).toBe(4);
    const [again] = await t.db.sequelize.query<{ made: number }>(
      `SELECT ensure_message_partitions((now() AT TIME ZONE 'UTC')::date - 1, (now() AT TIME ZONE 'UTC')::date + 7) AS made`,
      { type: QueryTypes.SELECT },
    );
    expect(again!.made).toBe(0);
  });
});
