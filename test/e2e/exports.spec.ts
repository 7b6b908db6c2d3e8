/**
 * Exports through the real gateway: jobs (create, list, get, regenerate), the signed download, the
 * files' contents (message history, delivery reports, contacts) parsed back cell by cell, expiry
 * and the sweeper, and jobs a dead node left behind. Messages come in through the real ingress.
 */
import { parse } from "csv-parse/sync";
import { randomUUID } from "node:crypto";
import { existsSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import path from "node:path";
import { gunzipSync } from "node:zlib";
import { QueryTypes } from "sequelize";
import { API_PREFIX } from "../../lib/http/api";
import { UrlSigner } from "../../services/exports/exports.signing";
import { startTestApp, TEST_SIGNING_KEY, type Account, type TestApp } from "../helpers/app";
import { contactIn } from "../helpers/builders";
import { eventually } from "../helpers/eventually";
import { HISTORY_HEADER } from "../helpers/exports";
import { expectProblem } from "../helpers/expect";
import { describeOncePerRun } from "../helpers/db";

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({
    services: ["gateway", "auth", "contacts", "tracking", "exports"],
    config: { exportWorkers: 1, publicBaseUrl: "https://api.example.test/" },
  });
});
afterAll(() => t?.stop());

const ingest = async (path: string, body: unknown) => {
  const res = await t.ingress.post(path, body);
  expect(res.status).toBe(202);
};

/** Polls GET /exports (as partners do) until the job has left QUEUED and PROCESSING. */
function settled(a: Account, exportId: string) {
  return eventually(
    async () => {
      const res = await a.api.get("/exports?limit=1000");
      const job = res.body.data.find((j: { exportId: string }) => j.exportId === exportId);
      expect(job).toBeDefined();
      expect(["QUEUED", "PROCESSING"]).not.toContain(job.status);
      return job;
    },
    { timeoutMs: 30_000, intervalMs: 25 },
  );
}

interface Got {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** A plain HTTP GET of a full URL on the test gateway (no automatic decompression, no path normalisation). */
function fetchRaw(pathAndQuery: string, headers: Record<string, string> = {}): Promise<Got> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: "127.0.0.1", port: t.app.port!, path: pathAndQuery, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end();
  });
}

/** The path of a download URL (its host is PUBLIC_BASE_URL, which the test gateway does not listen on). */
const pathOf = (url: string) => new URL(url).pathname;

async function exportAndDownload(a: Account, createPath: string, body: unknown = {}) {
  const created = await a.api.post(createPath, body);
  expect(created.status).toBe(202);
  const job = await settled(a, created.body.exportId);
  expect(job.status).toBe("COMPLETED");
  const link = await a.api.get(`/exports/${job.exportId}`);
  expect(link.status).toBe(200);
  const file = await fetchRaw(pathOf(link.body.downloadUrl));
  expect(file.status).toBe(200);
  const rows: string[][] = parse(file.body, { bom: false, relax_column_count: false });
  return { job, link: link.body, file, header: rows[0]!, rows: rows.slice(1) };
}

/** The file of an export's completed run in the test node's EXPORT_DIR. */
const fileOf = (exportId: string) => {
  const name = readdirSync(t.config.exportDir).find((n) => n.startsWith(`${exportId}.`) && n.endsWith(".csv.gz"));
  return name ? path.join(t.config.exportDir, name) : null;
};

describe("POST /messages/history/export and the file", () => {
  let a: Account;
  const sent = (min: number) => new Date(Date.UTC(2026, 10, 20, 10, min)).toISOString();
  beforeAll(async () => {
    a = await t.newAccount(["EXPORTS", "SMS"]);
    await ingest("/messages", [
      {
        companyId: a.companyId,
        channel: "SMS",
        customerMessageId: "m-1",
        destination: "+351911000001",
        sentAt: sent(1),
        text: '=HYPERLINK("http://evil")',
        campaignId: "spring",
      },
      {
        companyId: a.companyId,
        channel: "SMS",
        customerMessageId: "m-2",
        destination: "+351911000002",
        sentAt: sent(2),
        text: 'comma, "quote"\nnew line — ünïcødé 😀',
        totalParts: 2,
      },
      { companyId: a.companyId, channel: "RCS", customerMessageId: "@m-3", destination: "+351911000003", sentAt: sent(3), text: "" },
      {
        companyId: a.companyId,
        channel: "WHATSAPP",
        customerMessageId: "m-4",
        destination: "+351911000004",
        sentAt: sent(4),
        text: "-1+1",
        campaignId: "spring",
        simulation: true,
      },
      { companyId: a.companyId, channel: "SMS", customerMessageId: "m-5", destination: "+351911000005", sentAt: sent(5), text: "\tTabbed" },
    ]);
    await ingest("/receipts/sms", {
      companyId: a.companyId,
      MESSAGE_ID: "m-1",
      DESTINATION: "+351911000001",
      DELIVERY_STATUS: 3,
      DELIVERY_DATE: sent(10),
      PRICE: 0.05,
    });
    await ingest("/receipts/rcs", { companyId: a.companyId, messageId: "@m-3", destination: "+351911000003", statusCode: 9, eventDate: sent(11) });
    // Another account's message never shows.
    const other = await t.newAccount(["EXPORTS"]);
    await ingest("/messages", { companyId: other.companyId, channel: "SMS", customerMessageId: "other-1", destination: "+351911000009", sentAt: sent(6) });
  });

  it("answers 202 with the job at once, with Location, then completes; partners poll GET /exports", async () => {
    const res = await a.api.post("/messages/history/export", {});
    expect(res.status).toBe(202);
    expect(res.headers.get("location")).toBe(`${API_PREFIX}/exports/${res.body.exportId}`);
    expect(res.body).toEqual({
      exportId: expect.stringMatching(/^[0-9a-f-]{36}$/),
      type: "MESSAGE_HISTORY",
      status: "QUEUED",
      isAvailableForDownload: false,
      rowCount: null,
      createdAt: expect.any(String),
      completedAt: null,
      expiresAt: null,
      error: null,
    });
    const job = await settled(a, res.body.exportId);
    expect(job).toMatchObject({ status: "COMPLETED", isAvailableForDownload: true, rowCount: 5, error: null });
    expect(Date.parse(job.expiresAt) - Date.parse(job.completedAt)).toBeCloseTo(86400_000, -4);
  });

  it("writes every sent message of the account, newest first, with status fields, neutralising formulas", async () => {
    const { header, rows, file, link } = await exportAndDownload(a, "/messages/history/export");
    expect(link.downloadUrl.startsWith(`https://api.example.test${API_PREFIX}/exports/${link.exportId}/download/`)).toBe(true);
    expect(file.headers["content-type"]).toBe("text/csv; charset=utf-8");
    expect(file.headers["content-disposition"]).toMatch(/^attachment; filename="message-history-\d{4}-\d{2}-\d{2}-[0-9a-f]{8}\.csv"$/);
    expect(file.headers["content-encoding"]).toBeUndefined();
    expect(header).toEqual(HISTORY_HEADER);
    expect(rows.map((r) => r[0])).toEqual(["m-5", "m-4", "'@m-3", "m-2", "m-1"]);
    const byId = new Map(rows.map((r) => [r[0], Object.fromEntries(header.map((h, i) => [h, r[i]]))]));
    expect(byId.get("m-1")).toEqual({
      customerMessageId: "m-1",
      channel: "SMS",
      destination: "'+351911000001",
      sentAt: sent(1),
      deliveryStatus: "DELIVERED",
      statusCode: "3",
      description: "delivered",
      deliveryDate: sent(10),
      readAt: "",
      text: '\'=HYPERLINK("http://evil")',
      campaignId: "spring",
      totalParts: "1",
      price: "0.05",
      simulation: "false",
    });
    expect(byId.get("m-2")).toMatchObject({
      text: 'comma, "quote"\nnew line — ünïcødé 😀',
      deliveryStatus: "ACCEPTED",
      statusCode: "1",
      totalParts: "2",
      price: "",
      deliveryDate: "",
    });
    expect(byId.get("'@m-3")).toMatchObject({ channel: "RCS", deliveryStatus: "ERROR", statusCode: "9", description: "general error", text: "" });
    expect(byId.get("m-4")).toMatchObject({ text: "'-1+1", simulation: "true", deliveryStatus: "UNKNOWN", statusCode: "0" });
    expect(byId.get("m-5")).toMatchObject({ text: "'\tTabbed" });
  });

  it("sends the stored gzip to clients that accept it, and the same bytes decoded to those that do not", async () => {
    const { link, file } = await exportAndDownload(a, "/messages/history/export");
    const gz = await fetchRaw(pathOf(link.downloadUrl), { "Accept-Encoding": "gzip, deflate" });
    expect(gz.status).toBe(200);
    expect(gz.headers["content-encoding"]).toBe("gzip");
    expect(gz.headers.vary).toBe("Accept-Encoding");
    expect(Number(gz.headers["content-length"])).toBe(gz.body.length);
    expect(gunzipSync(gz.body).equals(file.body)).toBe(true);
    const refused = await fetchRaw(pathOf(link.downloadUrl), { "Accept-Encoding": "gzip;q=0, identity" });
    expect(refused.headers["content-encoding"]).toBeUndefined();
    expect(refused.body.equals(file.body)).toBe(true);
  });

  it("applies the history filters", async () => {
    const ids = async (body: object) => (await exportAndDownload(a, "/messages/history/export", body)).rows.map((r) => r[0]);
    expect(await ids({ channel: "SMS" })).toEqual(["m-5", "m-2", "m-1"]);
    expect(await ids({ status: "DELIVERED" })).toEqual(["m-1"]);
    expect(await ids({ campaignId: "spring" })).toEqual(["m-4", "m-1"]);
    expect(await ids({ destination: "+351911000002" })).toEqual(["m-2"]);
    expect(await ids({ from: sent(2), to: sent(4) })).toEqual(["'@m-3", "m-2"]);
  });

  it("refuses unknown filters and bad dates with a 400 and creates nothing", async () => {
    const before = (await a.api.get("/exports")).body.total;
    for (const body of [
      { colour: "red" },
      { from: "2026-13-45T00:00:00Z" },
      { to: "yesterday" },
      { from: sent(5), to: sent(1) },
      { channel: "TELEGRAM" },
      { status: "LOST" },
      { limit: 10 },
      { cursor: "x" },
    ]) {
      expectProblem(await a.api.post("/messages/history/export", body), 400);
    }
    expectProblem(await a.api.post("/messages/history/export", [1, 2]), 400);
    expect((await a.api.get("/exports")).body.total).toBe(before);
  });

  it("needs EXPORTS (a channel key is not enough) and a key", async () => {
    const smsOnly = await t.newAccount(["SMS"]);
    expectProblem(await smsOnly.api.post("/messages/history/export", {}), 401);
    expectProblem(await smsOnly.api.get("/exports"), 401);
    expectProblem(await t.api.post("/messages/history/export", {}), 401);
  });

  it("honours Idempotency-Key: a repeat answers the same job", async () => {
    const key = randomUUID();
    const first = await a.api.post("/messages/history/export", { channel: "RCS" }, { headers: { "Idempotency-Key": key } });
    const again = await a.api.post("/messages/history/export", { channel: "RCS" }, { headers: { "Idempotency-Key": key } });
    expect(first.status).toBe(202);
    expect(again.status).toBe(202);
    expect(again.body.exportId).toBe(first.body.exportId);
    expect(first.headers.get("location")).toBe(`${API_PREFIX}/exports/${first.body.exportId}`);
    expect(again.headers.get("location")).toBe(`${API_PREFIX}/exports/${first.body.exportId}`);
    await settled(a, first.body.exportId);
  });
});

describe("POST /exports/delivery-reports", () => {
  it("lists the messages that have a receipt, newest receipt first, with the history filters", async () => {
    const a = await t.newAccount(["EXPORTS"]);
    const at = (min: number) => new Date(Date.UTC(2026, 10, 21, 9, min)).toISOString();
    await ingest("/messages", [
      { companyId: a.companyId, channel: "SMS", customerMessageId: "d-1", destination: "+351912000001", sentAt: at(1) },
      { companyId: a.companyId, channel: "SMS", customerMessageId: "d-2", destination: "+351912000002", sentAt: at(2) },
      { companyId: a.companyId, channel: "WHATSAPP", customerMessageId: "d-3", destination: "+351912000003", sentAt: at(3) },
    ]);
    await ingest("/receipts/sms", {
      companyId: a.companyId,
      MESSAGE_ID: "d-2",
      DESTINATION: "+351912000002",
      DELIVERY_STATUS: 6,
      DELIVERY_DATE: at(20),
      PRICE: 0.04,
    });
    await ingest("/receipts/whatsapp", { companyId: a.companyId, messageId: "d-3", destination: "+351912000003", statusCode: 3, eventDate: at(10) });
    await ingest("/reads/whatsapp", { companyId: a.companyId, messageId: "d-3", destination: "+351912000003", eventDate: at(15) });
    const { header, rows, file, job } = await exportAndDownload(a, "/exports/delivery-reports");
    expect(job.type).toBe("DELIVERY_REPORTS");
    expect(file.headers["content-disposition"]).toMatch(/filename="delivery-reports-/);
    expect(header).toEqual([
      "customerMessageId",
      "channel",
      "destination",
      "sentAt",
      "deliveryStatus",
      "statusCode",
      "description",
      "deliveryDate",
      "readAt",
      "totalParts",
      "price",
      "simulation",
      "campaignId",
    ]);
    expect(rows.map((r) => [r[0], r[4], r[7], r[8], r[10]])).toEqual([
      ["d-2", "UNDELIVERABLE", at(20), "", "0.04"],
      ["d-3", "DELIVERED", at(10), at(15), ""],
    ]);
    const smsOnly = await exportAndDownload(a, "/exports/delivery-reports", { channel: "WHATSAPP" });
    expect(smsOnly.rows.map((r) => r[0])).toEqual(["d-3"]);
    expectProblem(await a.api.post("/exports/delivery-reports", { deliveredOnly: true }), 400);
  });
});

describe("POST /exports/contacts", () => {
  let a: Account;
  beforeAll(async () => {
    a = await t.newAccount(["EXPORTS", "CONTACTS"]);
    for (const f of [
      { key: "tier", type: "TEXT" },
      { key: "score", type: "NUMBER" },
      { key: "vip", type: "BOOLEAN" },
    ])
      expect((await a.api.post("/contacts/custom-fields", f)).status).toBe(201);
    const list = await a.api.post("/contacts/list", { name: "gold" });
    const c1 = await a.api.post("/contacts", {
      firstName: "Ana",
      lastName: "Silva",
      phoneNumber: "+351913000001",
      gender: "FEMALE",
      customFields: { tier: "gold", score: 42, vip: true },
    });
    const c2 = await a.api.post("/contacts", { firstName: "=cmd|' /C calc'!A0", email: "bruno@example.com", customFields: { tier: "silver" } });
    const c3 = await a.api.post("/contacts", { firstName: "Carla", phoneNumber: "+351913000003", isTest: true });
    for (const c of [c1, c2, c3]) expect(c.status).toBe(201);
    expect((await a.api.post("/contacts/list/contacts", { listIds: [list.body.id], contactIds: [c1.body.id, c3.body.id] })).status).toBe(201);
    (a as Account & { listId: number }).listId = list.body.id;
  });

  it("writes every contact field and one column per custom field, sorted as GET /contacts", async () => {
    const { header, rows, job } = await exportAndDownload(a, "/exports/contacts");
    expect(job).toMatchObject({ type: "CONTACTS", rowCount: 3 });
    expect(header).toEqual([
      "id",
      "firstName",
      "lastName",
      "gender",
      "phoneNumber",
      "email",
      "isTest",
      "isValid",
      "communicationSupported",
      "lastContactType",
      "lastCampaignType",
      "createdAt",
      "updatedAt",
      "customFields.score",
      "customFields.tier",
      "customFields.vip",
    ]);
    const contacts = (await a.api.get("/contacts?limit=100")).body.data as Array<Record<string, unknown>>;
    expect(rows.map((r) => r[0])).toEqual(contacts.map((c) => c.id));
    const ana = Object.fromEntries(header.map((h, i) => [h, rows.find((r) => r[1] === "Ana")![i]]));
    const fromApi = contacts.find((c) => c.firstName === "Ana")!;
    expect(ana).toEqual({
      id: fromApi.id,
      firstName: "Ana",
      lastName: "Silva",
      gender: "FEMALE",
      phoneNumber: "'+351913000001",
      email: "",
      isTest: "false",
      isValid: "true",
      communicationSupported: "SMS",
      lastContactType: "",
      lastCampaignType: "",
      createdAt: fromApi.createdAt,
      updatedAt: fromApi.updatedAt,
      "customFields.score": "42",
      "customFields.tier": "gold",
      "customFields.vip": "true",
    });
    expect(rows.find((r) => r[5] === "bruno@example.com")![1]).toBe("'=cmd|' /C calc'!A0");
  });

  it("writes only the caller's contacts and custom fields, next to another account's", async () => {
    const mine = await t.newAccount(["EXPORTS", "CONTACTS"]);
    const theirs = await t.newAccount(["EXPORTS", "CONTACTS"]);
    expect((await theirs.api.post("/contacts/custom-fields", { key: "secret", type: "TEXT" })).status).toBe(201);
    const theirIds: string[] = [];
    for (const body of [
      contactIn({ phoneNumber: "+351913100001", customFields: { secret: "x" } }),
      contactIn({ email: "shared@example.com" }),
      contactIn({ firstName: "Zed" }),
    ]) {
      const res = await theirs.api.post("/contacts", body);
      expect(res.status).toBe(201);
      theirIds.push(res.body.id);
    }
    // The same phone and email in the caller's account: different contacts.
    const myIds: string[] = [];
    for (const body of [contactIn({ phoneNumber: "+351913100001" }), contactIn({ email: "shared@example.com" })]) {
      const res = await mine.api.post("/contacts", body);
      expect(res.status).toBe(201);
      myIds.push(res.body.id);
    }
    const { header, rows, job } = await exportAndDownload(mine, "/exports/contacts");
    expect(job.rowCount).toBe(2);
    expect(rows.map((r) => r[0]).sort()).toEqual([...myIds].sort());
    expect(header.filter((h) => h.startsWith("customFields."))).toEqual([]);
    for (const id of theirIds) expect(rows.flat()).not.toContain(id);
    // And the other way round.
    const other = await exportAndDownload(theirs, "/exports/contacts");
    expect(other.rows.map((r) => r[0]).sort()).toEqual([...theirIds].sort());
    expect(other.header).toContain("customFields.secret");
  });

  it("applies the filters of GET /contacts, custom fields included", async () => {
    const listId = (a as Account & { listId: number }).listId;
    const names = async (body: object) => (await exportAndDownload(a, "/exports/contacts", body)).rows.map((r) => r[1]);
    expect(await names({ listIds: [listId] })).toEqual(["Ana", "Carla"]);
    expect(await names({ "customFields.tier": "silver" })).toEqual(["'=cmd|' /C calc'!A0"]);
    expect(await names({ isTest: true })).toEqual(["Carla"]);
    expect(await names({ sortBy: "firstName", sortOrder: "desc" })).toEqual(["Carla", "Ana", "'=cmd|' /C calc'!A0"]);
  });

  it("refuses unknown filters, undeclared custom fields and bad values with a 400", async () => {
    const before = (await a.api.get("/exports")).body.total;
    for (const body of [
      { colour: "red" },
      { "customFields.nope": "x" },
      { "customFields.score": "many" },
      { gender: "ROBOT" },
      { listIds: [] },
      { sortBy: "shoeSize" },
      { phoneNumber: "not a number" },
    ]) {
      expectProblem(await a.api.post("/exports/contacts", body), 400);
    }
    expect((await a.api.get("/exports")).body.total).toBe(before);
  });

  it("ends FAILED with an error when a custom field it filters on was removed before it ran", async () => {
    const b = await t.newAccount(["EXPORTS", "CONTACTS"]);
    expect((await b.api.post("/contacts/custom-fields", { key: "region", type: "TEXT" })).status).toBe(201);
    const id = randomUUID();
    // Queued as a job made before the removal would be (the runner checks again when it runs).
    expect((await b.api.delete("/contacts/custom-fields/region")).status).toBe(204);
    await t.db.sequelize.query("INSERT INTO export_jobs (id, company_id, type, filters, status) VALUES ($1, $2, 'CONTACTS', $3, 'QUEUED')", {
      bind: [id, b.companyId, JSON.stringify({ "customFields.region": "north" })],
    });
    const job = await settled(b, id);
    expect(job).toMatchObject({ status: "FAILED", isAvailableForDownload: false });
    expect(job.error).toMatch(/customFields\.region is not a custom field/);
    expectProblem(await b.api.get(`/exports/${id}`), 409);
  });
});

describeOncePerRun("GET /exports, GET /exports/{exportId}", () => {
  it("pages the account's jobs newest first; limit over 1000 or a negative page is a 400", async () => {
    const a = await t.newAccount(["EXPORTS"]);
    const made: string[] = [];
    for (let i = 0; i < 3; i++) made.push((await a.api.post("/messages/history/export", {})).body.exportId);
    const page = await a.api.get("/exports?limit=2");
    expect(page.status).toBe(200);
    expect(page.body).toMatchObject({ page: 0, limit: 2, total: 3, totalPages: 2 });
    expect(page.body.data.map((j: { exportId: string }) => j.exportId)).toEqual([made[2], made[1]]);
    expect((await a.api.get("/exports?limit=2&page=1")).body.data.map((j: { exportId: string }) => j.exportId)).toEqual([made[0]]);
    expect((await a.api.get("/exports")).body.limit).toBe(10);
    expectProblem(await a.api.get("/exports?limit=1001"), 400);
    expectProblem(await a.api.get("/exports?page=-1"), 400);
    expectProblem(await a.api.get("/exports?limit=0"), 400);
    expectProblem(await a.api.get("/exports?sort=x"), 400);
    const other = await t.newAccount(["EXPORTS"]);
    expect((await other.api.get("/exports")).body.total).toBe(0);
    for (const id of made) await settled(a, id);
  });

  it("404 for an unknown export or another account's; 400 for a malformed id", async () => {
    const a = await t.newAccount(["EXPORTS"]);
    const b = await t.newAccount(["EXPORTS"]);
    const job = (await a.api.post("/messages/history/export", {})).body;
    await settled(a, job.exportId);
    expectProblem(await b.api.get(`/exports/${job.exportId}`), 404);
    expectProblem(await b.api.post(`/exports/${job.exportId}`), 404);
    expectProblem(await a.api.get(`/exports/${randomUUID()}`), 404);
    expectProblem(await a.api.post(`/exports/${randomUUID()}`), 404);
    expectProblem(await a.api.get("/exports/not-an-id"), 400);
  });

  it("409 while the job is running, and when it failed", async () => {
    const a = await t.newAccount(["EXPORTS"]);
    const running = randomUUID();
    const failed = randomUUID();
    await t.db.sequelize.query(
      `INSERT INTO export_jobs (id, company_id, type, filters, status, node_id, leased_until, attempts) VALUES ($1, $2, 'MESSAGE_HISTORY', '{}', 'PROCESSING', 'elsewhere', now() + interval '1 hour', 1)`,
      { bind: [running, a.companyId] },
    );
    await t.db.sequelize.query(
      `INSERT INTO export_jobs (id, company_id, type, filters, status, error, completed_at) VALUES ($1, $2, 'MESSAGE_HISTORY', '{}', 'FAILED', 'it broke', now())`,
      {
        bind: [failed, a.companyId],
      },
    );
    const r = await a.api.get(`/exports/${running}`);
    expectProblem(r, 409);
    expect(r.body.detail).toMatch(/PROCESSING/);
    const f = await a.api.get(`/exports/${failed}`);
    expectProblem(f, 409);
    expect(f.body.detail).toMatch(/it broke/);
    // Regenerating a running job answers it as it is.
    const again = await a.api.post(`/exports/${running}`);
    expect(again.status).toBe(202);
    expect(again.body.status).toBe("PROCESSING");
  });
});

describeOncePerRun("the signed download URL", () => {
  let a: Account;
  let url: string;
  let exportId: string;
  beforeAll(async () => {
    a = await t.newAccount(["EXPORTS"]);
    await ingest("/messages", {
      companyId: a.companyId,
      channel: "SMS",
      customerMessageId: "s-1",
      destination: "+351914000001",
      sentAt: "2026-11-20T10:00:00.000Z",
    });
    const r = await exportAndDownload(a, "/messages/history/export");
    url = pathOf(r.link.downloadUrl);
    exportId = r.job.exportId;
    expect(Date.parse(r.link.expiresAt) - Date.now()).toBeGreaterThan(890_000);
    expect(Date.parse(r.link.expiresAt) - Date.now()).toBeLessThanOrEqual(900_000);
  });

  const parts = () => {
    const m = /\/exports\/([^/]+)\/download\/([^/]+)\/([^/]+)$/.exec(url)!;
    return { id: m[1]!, expires: m[2]!, signature: m[3]! };
  };
  const build = (p: { id: string; expires: string; signature: string }) => `${API_PREFIX}/exports/${p.id}/download/${p.expires}/${p.signature}`;

  it("needs no key, and refuses (403) a URL whose id, expiry or signature was changed", async () => {
    expect((await fetchRaw(url)).status).toBe(200);
    const p = parts();
    const other = (await a.api.post("/messages/history/export", {})).body.exportId;
    await settled(a, other);
    const flip = (s: string, i: number) => s.slice(0, i) + (s[i] === "A" ? "B" : "A") + s.slice(i + 1);
    for (const altered of [
      { ...p, id: other },
      { ...p, id: p.id.toUpperCase() },
      { ...p, expires: String(Number(p.expires) + 1) },
      { ...p, expires: `0${p.expires}` },
      { ...p, signature: flip(p.signature, 0) },
      { ...p, signature: flip(p.signature, p.signature.length - 1) },
      { ...p, signature: p.signature.slice(1) },
      { ...p, signature: "" + p.signature + "A" },
    ]) {
      const res = await fetchRaw(build(altered));
      expect(res.status).toBe(403);
      expect(res.headers["content-type"]).toMatch(/application\/problem\+json/);
    }
  });

  it("refuses (403) a URL past its expiry, even with a good signature", async () => {
    const signer = new UrlSigner(Buffer.from(TEST_SIGNING_KEY), "http://x");
    const run = Number(
      (await t.db.sequelize.query<{ run: number }>("SELECT run FROM export_jobs WHERE id = $1", { bind: [exportId], type: QueryTypes.SELECT }))[0]!.run,
    );
    const expired = pathOf(signer.url(exportId, run, new Date(Date.now() - 1000)));
    const res = await fetchRaw(expired);
    expect(res.status).toBe(403);
    expect(JSON.parse(res.body.toString()).detail).toMatch(/expired/);
    // The same key and a future expiry: accepted (the refusal above is the expiry's alone).
    expect((await fetchRaw(pathOf(signer.url(exportId, run, new Date(Date.now() + 60_000))))).status).toBe(200);
  });

  it("never serves a file outside the export folder: traversal attempts are 403 or 404", async () => {
    const p = parts();
    for (const attempt of [
      `${API_PREFIX}/exports/..%2F..%2F..%2Fetc%2Fpasswd/download/${p.expires}/${p.signature}`,
      `${API_PREFIX}/exports/${p.id}/download/${p.expires}/..%2F..%2F..%2Fetc%2Fpasswd`,
      `${API_PREFIX}/exports/${p.id}/download/..%2F..%2Fetc/${p.signature}`,
      `${API_PREFIX}/exports/../../../../etc/passwd`,
      `${API_PREFIX}/exports/${p.id}/download/${p.expires}/${p.signature}/../../../../../etc/passwd`,
      `${API_PREFIX}/exports/%2e%2e%2f%2e%2e%2fetc%2fpasswd/download/${p.expires}/${p.signature}`,
    ]) {
      const res = await fetchRaw(attempt);
      expect([403, 404]).toContain(res.status);
      expect(res.body.toString()).not.toMatch(/root:/);
    }
  });

  it("stops working when the export is regenerated; the fresh run gets a fresh URL and today's data", async () => {
    const before = await settled(a, exportId);
    await ingest("/messages", {
      companyId: a.companyId,
      channel: "SMS",
      customerMessageId: "s-2",
      destination: "+351914000002",
      sentAt: "2026-11-20T11:00:00.000Z",
    });
    const again = await a.api.post(`/exports/${exportId}`);
    expect(again.status).toBe(202);
    expect(again.body).toMatchObject({ exportId, status: "QUEUED", isAvailableForDownload: false, rowCount: null });
    const job = await settled(a, exportId);
    expect(job).toMatchObject({ status: "COMPLETED", rowCount: before.rowCount + 1 });
    expect((await fetchRaw(url)).status).toBe(403);
    const fresh = (await a.api.get(`/exports/${exportId}`)).body.downloadUrl;
    expect(pathOf(fresh)).not.toBe(url);
    const file = await fetchRaw(pathOf(fresh));
    expect(file.status).toBe(200);
    expect(file.body.toString()).toMatch(/^customerMessageId,.*\ns-2,/s);
    url = pathOf(fresh);
  });
});

describeOncePerRun("expiry and the sweeper", () => {
  it("an expired export reads EXPIRED, not available, 409 on GET, 403 on its URL, and its file is deleted", async () => {
    const a = await t.newAccount(["EXPORTS"]);
    const { job, link } = await exportAndDownload(a, "/messages/history/export");
    const file = fileOf(job.exportId)!;
    expect(path.basename(file)).toMatch(new RegExp(`^${job.exportId}\\.1\\.[0-9a-f]{12}\\.csv\\.gz$`));
    expect(existsSync(file)).toBe(true);
    await t.db.sequelize.query("UPDATE export_jobs SET expires_at = now() - interval '1 second' WHERE id = $1", { bind: [job.exportId] });
    // Past its expiry it is no longer offered, even before the sweeper has run.
    const listed = (await a.api.get("/exports")).body.data[0];
    expect(listed).toMatchObject({ exportId: job.exportId, status: "EXPIRED", isAvailableForDownload: false });
    await t.app.broker.call("exports.sweep");
    expect(existsSync(file)).toBe(false);
    const [row] = await t.db.sequelize.query<{ status: string }>("SELECT status FROM export_jobs WHERE id = $1", {
      bind: [job.exportId],
      type: QueryTypes.SELECT,
    });
    expect(row!.status).toBe("EXPIRED");
    const get = await a.api.get(`/exports/${job.exportId}`);
    expectProblem(get, 409);
    expect(get.body.detail).toMatch(/expired/);
    expect((await fetchRaw(pathOf(link.downloadUrl))).status).toBe(403);
    // Regenerating brings it back.
    expect((await a.api.post(`/exports/${job.exportId}`)).status).toBe(202);
    expect((await settled(a, job.exportId)).status).toBe("COMPLETED");
    expect(path.basename(fileOf(job.exportId)!)).toMatch(new RegExp(`^${job.exportId}\\.2\\.`));
  });

  it("deletes stray files no job needs (a dead run's temporary file, a regenerated run's file), keeps the live ones", async () => {
    const a = await t.newAccount(["EXPORTS"]);
    const { job } = await exportAndDownload(a, "/messages/history/export");
    const dir = t.config.exportDir;
    const live = path.basename(fileOf(job.exportId)!);
    // An unknown job's file, another attempt's file of this run, a later run's, a dead attempt's temporary file.
    const stray = [
      `${randomUUID()}.1.0123456789ab.csv.gz`,
      `${job.exportId}.1.0123456789ab.csv.gz`,
      `${job.exportId}.7.0123456789ab.csv.gz`,
      `${job.exportId}.1.0123456789ab.tmp`,
    ];
    for (const n of stray) rmSync(path.join(dir, n), { force: true });
    for (const n of stray) writeFileSync(path.join(dir, n), "x");
    writeFileSync(path.join(dir, "notes.txt"), "not ours");
    await t.app.broker.call("exports.sweep");
    const left = readdirSync(dir);
    for (const n of stray) expect(left).not.toContain(n);
    expect(left).toContain(live);
    expect(left).toContain("notes.txt");
  });

  it("a file missing from its node is a 404 problem on download, never a 500", async () => {
    const a = await t.newAccount(["EXPORTS"]);
    const { job, link } = await exportAndDownload(a, "/messages/history/export");
    rmSync(fileOf(job.exportId)!);
    const res = await fetchRaw(pathOf(link.downloadUrl));
    expect(res.status).toBe(404);
    expect(res.headers["content-type"]).toMatch(/problem\+json/);
  });
});

describe("jobs a dead node left behind", () => {
  it("a PROCESSING job whose lease ran out is run again by a live node", async () => {
    const a = await t.newAccount(["EXPORTS"]);
    await ingest("/messages", {
      companyId: a.companyId,
      channel: "SMS",
      customerMessageId: "z-1",
      destination: "+351915000001",
      sentAt: "2026-11-20T10:00:00.000Z",
    });
    const id = randomUUID();
    await t.db.sequelize.query(
      `INSERT INTO export_jobs (id, company_id, type, filters, status, node_id, leased_until, attempts, started_at)
       VALUES ($1, $2, 'MESSAGE_HISTORY', '{}', 'PROCESSING', 'dead-node', now() - interval '1 second', 1, now() - interval '2 minutes')`,
      { bind: [id, a.companyId] },
    );
    const job = await settled(a, id);
    expect(job).toMatchObject({ status: "COMPLETED", rowCount: 1 });
    const [row] = await t.db.sequelize.query<{ attempts: number; node_id: string }>("SELECT attempts, node_id FROM export_jobs WHERE id = $1", {
      bind: [id],
      type: QueryTypes.SELECT,
    });
    expect(row).toEqual({ attempts: 2, node_id: t.app.broker.nodeID });
  });

  it("after its last allowed attempt it ends FAILED with an error, never stuck", async () => {
    const a = await t.newAccount(["EXPORTS"]);
    const id = randomUUID();
    await t.db.sequelize.query(
      `INSERT INTO export_jobs (id, company_id, type, filters, status, node_id, leased_until, attempts)
       VALUES ($1, $2, 'MESSAGE_HISTORY', '{}', 'PROCESSING', 'dead-node', now() - interval '1 second', 3)`,
      { bind: [id, a.companyId] },
    );
    const job = await settled(a, id);
    expect(job).toMatchObject({ status: "FAILED", isAvailableForDownload: false });
    expect(job.error).toMatch(/interrupted 3 times/);
  });

  it("a job still leased by a live node is left alone", async () => {
    const a = await t.newAccount(["EXPORTS"]);
    const id = randomUUID();
    await t.db.sequelize.query(
      `INSERT INTO export_jobs (id, company_id, type, filters, status, node_id, leased_until, attempts)
       VALUES ($1, $2, 'MESSAGE_HISTORY', '{}', 'PROCESSING', 'busy-node', now() + interval '1 hour', 1)`,
      { bind: [id, a.companyId] },
    );
    // Two exports of another account run from start to end after it: the runner has claimed since
    // (twice), and passed over the leased job.
    const b = await t.newAccount(["EXPORTS"]);
    for (let i = 0; i < 2; i++) expect((await settled(b, (await b.api.post("/messages/history/export", {})).body.exportId)).status).toBe("COMPLETED");
    const [row] = await t.db.sequelize.query<{ status: string; node_id: string }>("SELECT status, node_id FROM export_jobs WHERE id = $1", {
      bind: [id],
      type: QueryTypes.SELECT,
    });
    expect(row).toEqual({ status: "PROCESSING", node_id: "busy-node" });
  });
});

describe("metrics", () => {
  it("counts runs, rows and durations, and shows the queue from the database", async () => {
    const a = await t.newAccount(["EXPORTS"]);
    await ingest("/messages", {
      companyId: a.companyId,
      channel: "SMS",
      customerMessageId: "q-1",
      destination: "+351916000001",
      sentAt: "2026-11-20T10:00:00.000Z",
    });
    const value = (text: string, series: string) => Number(new RegExp(`^${series.replace(/[{}]/g, "\\$&")} (\\S+)$`, "m").exec(text)?.[1] ?? "0");
    const before = (await t.root.get("/metrics")).text;
    await exportAndDownload(a, "/messages/history/export");
    const after = (await t.root.get("/metrics")).text;
    expect(value(after, 'export_runs_total{type="MESSAGE_HISTORY",outcome="COMPLETED"}')).toBe(
      value(before, 'export_runs_total{type="MESSAGE_HISTORY",outcome="COMPLETED"}') + 1,
    );
    expect(value(after, 'export_rows_total{type="MESSAGE_HISTORY"}')).toBe(value(before, 'export_rows_total{type="MESSAGE_HISTORY"}') + 1);
    expect(after).toMatch(/^export_run_duration_seconds_count\{type="MESSAGE_HISTORY"\} \d+$/m);
    expect(after).toMatch(/^export_jobs\{status="QUEUED"\} \d+$/m);
    expect(after).toMatch(/^export_queue_oldest_age_seconds \d/m);
    // The node's runtime: the worker pool that wrote the file, the database pool, Node's event loop.
    expect(value(after, 'worker_pool_threads{pool="exports.worker"}')).toBeGreaterThanOrEqual(1);
    expect(after).toMatch(/^worker_pool_queue_size\{pool="exports.worker"\} 0$/m);
    const utilization = value(after, 'worker_pool_utilization{pool="exports.worker"}');
    expect(utilization).toBeGreaterThan(0);
    expect(utilization).toBeLessThanOrEqual(1);
    expect(value(after, "db_pool_max")).toBe(10);
    expect(value(after, 'db_pool_connections{state="open"}')).toBeGreaterThanOrEqual(1);
    expect(after).toMatch(/^db_pool_waiting \d+$/m);
    expect(after).toMatch(/^nodejs_eventloop_lag_p99_seconds \d/m);
    // Every series once: one exposition, no name registered twice.
    const names = after
      .split("\n")
      .filter((l) => l.startsWith("# TYPE "))
      .map((l) => l.split(" ")[2]);
    expect(names.filter((n, i) => names.indexOf(n) !== i)).toEqual([]);
  });
});

describe("retention of ended jobs", () => {
  it("the sweep deletes EXPIRED and FAILED jobs that ended more than 30 days ago, and keeps the rest", async () => {
    const a = await t.newAccount(["EXPORTS"]);
    const days = (n: number) => new Date(Date.now() - n * 86400_000).toISOString();
    const rows: Array<{ name: string; status: string; created: string; completed: string | null }> = [
      { name: "expired-old", status: "EXPIRED", created: days(45), completed: days(40) },
      { name: "failed-old", status: "FAILED", created: days(33), completed: days(31) },
      { name: "failed-old-no-end", status: "FAILED", created: days(31), completed: null },
      { name: "expired-recent", status: "EXPIRED", created: days(35), completed: days(29) },
      { name: "failed-recent", status: "FAILED", created: days(2), completed: days(2) },
      { name: "completed-old", status: "COMPLETED", created: days(60), completed: days(60) },
      { name: "queued-old", status: "QUEUED", created: days(60), completed: null },
    ];
    const ids = new Map<string, string>(rows.map((r) => [r.name, randomUUID()]));
    for (const r of rows) {
      await t.db.sequelize.query(
        `INSERT INTO export_jobs (id, company_id, type, filters, status, created_at, completed_at, expires_at)
         VALUES ($1, $2, 'CONTACTS', '{}', $3, $4, $5, CASE WHEN $3 = 'COMPLETED' THEN now() + interval '1 day' END)`,
        { bind: [ids.get(r.name), a.companyId, r.status, r.created, r.completed] },
      );
    }
    const runner = (t.app.broker.getLocalService("exports") as unknown as { runner: { sweep(): Promise<void> } }).runner;
    await runner.sweep();
    const left = await t.db.sequelize.query<{ id: string }>("SELECT id FROM export_jobs WHERE company_id = $1", {
      bind: [a.companyId],
      type: QueryTypes.SELECT,
    });
    const byId = new Map([...ids].map(([name, id]) => [id, name]));
    expect(left.map((r) => byId.get(r.id)).sort()).toEqual(["completed-old", "expired-recent", "failed-recent", "queued-old"]);
    // The listing never shows a purged job.
    const listed = await a.api.get("/exports?limit=1000");
    expect(listed.body.data.map((j: { exportId: string }) => byId.get(j.exportId)).sort()).toEqual([
      "completed-old",
      "expired-recent",
      "failed-recent",
      "queued-old",
    ]);
  });
});
