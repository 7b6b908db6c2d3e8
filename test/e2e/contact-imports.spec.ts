import ExcelJS from "exceljs";
import { readdirSync, statSync } from "node:fs";
import http from "node:http";
import path from "node:path";
import { MAX_EXPANDED_BYTES } from "../../lib/http/upload";
import { IMPORT_TASK_BUDGET_MS } from "../../services/contacts/contacts.runner";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";
import { zip, type ZipPart } from "../helpers/zip";
import { describeOncePerRun } from "../helpers/db";

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ services: ["gateway", "auth", "contacts"] });
});
afterAll(() => t?.stop());

type Body = string | Buffer | Uint8Array;
function form(file: Body | null, fields: Record<string, string> = {}, name = "contacts.csv", field = "file"): FormData {
  const f = new FormData();
  for (const [k, v] of Object.entries(fields)) f.append(k, v);
  if (file !== null) f.append(field, new Blob([typeof file === "string" ? file : new Uint8Array(file)]), name);
  return f;
}

const upload = (
  a: Account,
  file: Body | null,
  fields: Record<string, string> = {},
  opts: { path?: string; name?: string; headers?: Record<string, string> } = {},
) => a.api.request("POST", opts.path ?? "/contacts/upload", { form: form(file, fields, opts.name), headers: opts.headers });

/** Polls GET /contacts/imports/{id} (as partners do) until the import has ended. */
function finished(a: Account, importId: string) {
  return eventually(
    async () => {
      const res = await a.api.get(`/contacts/imports/${importId}`);
      expect(res.status).toBe(200);
      expect(["COMPLETED", "FAILED"]).toContain(res.body.status);
      return res.body;
    },
    { timeoutMs: 30_000 },
  );
}

async function imported(a: Account, file: Body, fields: Record<string, string> = {}, opts: { path?: string; name?: string } = {}) {
  const res = await upload(a, file, fields, opts);
  expect(res.status).toBe(202);
  return finished(a, res.body.importId);
}

const byPhone = async (a: Account, phone: string) => {
  const res = await a.api.get(`/contacts?phoneNumber=${encodeURIComponent(phone)}`);
  expect(res.status).toBe(200);
  return res.body.data[0];
};

describe("contact imports: CSV", () => {
  it("answers 202 with the import id and a Location, then imports every row", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    await a.api.post("/contacts/custom-fields", { key: "tier", type: "TEXT" });
    await a.api.post("/contacts/custom-fields", { key: "score", type: "NUMBER" });
    const csv =
      "firstName,lastName,phoneNumber,email,gender,isTest,tier,score\n" +
      "Ana,Silva,+351 912 345 678,Ana@Example.com,female,false,gold,12.5\n" +
      "Rui,Costa,00351912345679,,MALE,true,,\n";
    const res = await upload(a, csv);
    expect(res.status).toBe(202);
    expect(res.body).toEqual({ importId: expect.stringMatching(/^[0-9a-f-]{36}$/), status: "QUEUED" });
    expect(res.headers.get("location")).toBe(`/api/partner-gateway/v1/contacts/imports/${res.body.importId}`);
    const done = await finished(a, res.body.importId);
    expect(done).toEqual({
      importId: res.body.importId,
      status: "COMPLETED",
      fileName: "contacts.csv",
      listId: null,
      totalRows: 2,
      created: 2,
      updated: 0,
      skipped: 0,
      errors: [],
      failureReason: null,
      createdAt: expect.any(String),
      startedAt: expect.any(String),
      finishedAt: expect.any(String),
    });
    const ana = await byPhone(a, "+351912345678");
    expect(ana).toMatchObject({
      firstName: "Ana",
      lastName: "Silva",
      email: "ana@example.com",
      gender: "FEMALE",
      isTest: false,
      customFields: { tier: "gold", score: 12.5 },
      communicationSupported: ["SMS"],
    });
    expect(await byPhone(a, "+351912345679")).toMatchObject({ firstName: "Rui", email: null, gender: "MALE", isTest: true, customFields: {} });
  });

  it("updates the contact a row matches by phone or by email, leaving fields of empty cells as they were", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const byP = (await a.api.post("/contacts", { firstName: "Old", lastName: "Name", phoneNumber: "+351912000001", email: "keep@x.pt" })).body;
    const byE = (await a.api.post("/contacts", { firstName: "Eve", email: "eve@x.pt" })).body;
    const csv = "phoneNumber,email,firstName,lastName\n+351912000001,,New,\n+351912000002,EVE@x.pt,,Adams\n+351912000003,new@x.pt,Neo,\n";
    const done = await imported(a, csv);
    expect(done).toMatchObject({ status: "COMPLETED", totalRows: 3, created: 1, updated: 2, skipped: 0 });
    const p = (await a.api.get(`/contacts/${byP.id}`)).body;
    expect(p).toMatchObject({ firstName: "New", lastName: "Name", email: "keep@x.pt", phoneNumber: "+351912000001" });
    const e = (await a.api.get(`/contacts/${byE.id}`)).body;
    expect(e).toMatchObject({ firstName: "Eve", lastName: "Adams", email: "eve@x.pt", phoneNumber: "+351912000002", communicationSupported: ["SMS"] });
    expect((await a.api.get("/contacts")).body.total).toBe(3);
  });

  it("reports bad rows with their data row number and skips only them", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    await a.api.post("/contacts/custom-fields", { key: "born", type: "DATE" });
    const csv = [
      "email,phoneNumber,gender,born",
      "ok1@x.pt,,,",
      "bad-email,,,",
      ",12345,,",
      "ok2@x.pt,,unicorn,",
      ",,,",
      "ok3@x.pt,,,1990-02-30",
      "ok4@x.pt,+351912000010,other,1990-02-03",
      "ok5@x.pt,,,,extra",
      ",,FEMALE,",
    ].join("\n");
    const done = await imported(a, csv);
    expect(done).toMatchObject({ status: "COMPLETED", totalRows: 8, created: 2, updated: 0, skipped: 6 });
    expect(done.errors).toEqual([
      { row: 2, message: "email must be a valid email address" },
      { row: 3, message: expect.stringMatching(/^phoneNumber must be a valid phone number/) },
      { row: 4, message: "gender must be one of MALE, FEMALE, OTHER" },
      { row: 6, message: "customFields.born must be a date YYYY-MM-DD" },
      { row: 8, message: "the row has 5 fields, the header 4" },
      { row: 9, message: "a phone number or an email is required" },
    ]);
    const list = (await a.api.get("/contacts?sortBy=email")).body.data.map((c: { email: string }) => c.email);
    expect(list).toEqual(["ok1@x.pt", "ok4@x.pt"]);
    expect((await byPhone(a, "+351912000010")).customFields).toEqual({ born: "1990-02-03" });
  });

  it("a second row for the same phone number updates the contact the first created; a row naming two contacts is refused whole", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const p = (await a.api.post("/contacts", { phoneNumber: "+351912000020" })).body;
    const e = (await a.api.post("/contacts", { email: "other@x.pt" })).body;
    const csv = "phoneNumber,email,firstName\n+351912000021,,First\n+351912000021,twice@x.pt,Second\n+351912000020,other@x.pt,Both\n";
    const done = await imported(a, csv);
    expect(done).toMatchObject({ totalRows: 3, created: 1, updated: 1, skipped: 1 });
    expect(done.errors).toEqual([{ row: 3, message: `the phone number belongs to contact ${p.id} and the email to contact ${e.id}` }]);
    expect(await byPhone(a, "+351912000021")).toMatchObject({ firstName: "Second", email: "twice@x.pt" });
    expect((await a.api.get(`/contacts/${p.id}`)).body).toMatchObject({ firstName: null, email: null });
    expect((await a.api.get(`/contacts/${e.id}`)).body).toMatchObject({ firstName: null, phoneNumber: null });
  });

  it("adds every imported contact (created or updated) to listId", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const list = (await a.api.post("/contacts/list", { name: "Imported" })).body;
    await a.api.post("/contacts", { email: "already@x.pt" });
    const done = await imported(a, "email\nalready@x.pt\nfresh@x.pt\nbroken\n", { listId: String(list.id) });
    expect(done).toMatchObject({ status: "COMPLETED", listId: list.id, created: 1, updated: 1, skipped: 1 });
    const members = (await a.api.get(`/contacts/list/${list.id}/contacts?sortBy=email`)).body;
    expect(members.data.map((c: { email: string }) => c.email)).toEqual(["already@x.pt", "fresh@x.pt"]);
    // Imported again: no duplicate membership.
    await imported(a, "email\nalready@x.pt\n", { listId: String(list.id) });
    expect((await a.api.get(`/contacts/list/${list.id}`)).body.contactCount).toBe(2);
  });

  it("refuses a listId of another account, a deleted list or a bad value (400 naming listId), importing nothing", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const b = await t.newAccount(["CONTACTS"]);
    const theirs = (await b.api.post("/contacts/list", { name: "Theirs" })).body;
    const gone = (await a.api.post("/contacts/list", { name: "Gone" })).body;
    await a.api.request("DELETE", "/contacts/list", { body: { ids: [gone.id] } });
    for (const listId of [String(theirs.id), String(gone.id), "abc", "0"]) {
      const res = await upload(a, "email\nx@x.pt\n", { listId });
      expectProblem(res, 400);
      expect(res.body.errors).toEqual([expect.objectContaining({ path: "listId" })]);
    }
    expect((await a.api.get("/contacts")).body.total).toBe(0);
  });

  it("takes a mapping from column header to field; null ignores a column; unnamed columns match by header", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    await a.api.post("/contacts/custom-fields", { key: "vip", type: "BOOLEAN" });
    const csv = "Mobile,E-mail address,Notes,First Name,VIP\n+351912000030,m@x.pt,call later,Mia,yes\n";
    const mapping = JSON.stringify({ Mobile: "phoneNumber", "e-mail address": "email", Notes: null });
    const done = await imported(a, csv, { mapping });
    expect(done).toMatchObject({ status: "COMPLETED", created: 1, skipped: 0 });
    expect(await byPhone(a, "+351912000030")).toMatchObject({ email: "m@x.pt", firstName: "Mia", customFields: { vip: true } });
  });

  it.each([
    ["not JSON", "{", "mapping"],
    ["not an object", "[1]", "mapping"],
    ["an unknown field", JSON.stringify({ Mobile: "telephone" }), "mapping.Mobile"],
    ["an undeclared custom field", JSON.stringify({ Mobile: "customFields.nope" }), "mapping.Mobile"],
    ["a value that is not a name", JSON.stringify({ Mobile: 3 }), "mapping.Mobile"],
  ])("refuses a mapping that is %s (400)", async (_n, mapping, path) => {
    const a = await t.newAccount(["CONTACTS"]);
    const res = await upload(a, "Mobile\n+351912000031\n", { mapping });
    expectProblem(res, 400);
    expect(res.body.errors).toEqual([expect.objectContaining({ path })]);
  });

  it("ends FAILED, naming why, when the file has no phone or email column or the mapping names a missing column", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const noKey = await imported(a, "firstName,lastName\nAna,Silva\n");
    expect(noKey).toMatchObject({ status: "FAILED", created: 0, failureReason: expect.stringContaining("no column for phoneNumber or email") });
    const missing = await imported(a, "email\na@x.pt\n", { mapping: JSON.stringify({ Mobile: "phoneNumber" }) });
    expect(missing).toMatchObject({ status: "FAILED", created: 0, failureReason: expect.stringContaining('"Mobile"') });
    const twice = await imported(a, "email,Email\na@x.pt,b@x.pt\n");
    expect(twice).toMatchObject({ status: "FAILED", failureReason: expect.stringContaining("both feed email") });
    expect((await a.api.get("/contacts")).body.total).toBe(0);
  });

  it("reads semicolon-separated files, quoted fields with line breaks, a BOM and Windows-1252 text", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const utf8 = '\ufeffemail;firstName;lastName\n"semi@x.pt";"José";"da ""Silva""\nJr"\n';
    const done = await imported(a, utf8);
    expect(done).toMatchObject({ status: "COMPLETED", created: 1 });
    const c = (await a.api.get("/contacts?email=semi@x.pt")).body.data[0];
    expect(c).toMatchObject({ firstName: "José", lastName: 'da "Silva"\nJr' });
    const cp1252 = Buffer.from("email,firstName\nlatin@x.pt,Fran\xe7ois \x80\n", "latin1");
    expect(await imported(a, cp1252)).toMatchObject({ status: "COMPLETED", created: 1 });
    expect((await a.api.get("/contacts?email=latin@x.pt")).body.data[0].firstName).toBe("François €");
  });

  it("ends FAILED on an unterminated quote or a runaway record, keeping what was written before it", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const open = await imported(a, 'email,firstName\nq4@x.pt,D\nq5@x.pt,"never closed\nq6@x.pt,E\n');
    expect(open).toMatchObject({ status: "FAILED", created: 1, failureReason: expect.stringContaining("cannot be read as CSV") });
    const huge = await imported(a, `email,firstName\nq7@x.pt,${"x".repeat(1100 * 1024)}\nq8@x.pt,F\n`);
    expect(huge).toMatchObject({ status: "FAILED", created: 0, failureReason: expect.stringContaining("cannot be read as CSV") });
    expect((await a.api.get("/contacts?sortBy=email")).body.data.map((c: { email: string }) => c.email)).toEqual(["q4@x.pt"]);
  });

  it("refuses a cell holding NUL as that row's error and imports the rest", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    // Past the 64 KiB a file's kind is judged by: the NUL is in the data, not a sign of a binary file.
    const padding = Array.from({ length: 2000 }, (_, i) => `pad${i}@x.pt,${"p".repeat(30)}`).join("\n");
    const done = await imported(a, `email,firstName\n${padding}\nn1@x.pt,Bad\u0000Name\nn2@x.pt,Good\n`);
    expect(done).toMatchObject({ status: "COMPLETED", created: 2001, skipped: 1 });
    expect(done.errors).toEqual([{ row: 2001, message: "firstName must not contain NUL or unpaired surrogate characters" }]);
  });

  it("imports files of several batches, counting exactly, and keeps the first 1000 errors while counting all", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const lines = ["email,firstName"];
    for (let i = 1; i <= 5200; i++) lines.push(i % 4 === 0 ? `broken-${i},X` : `bulk${i}@x.pt,N${i}`);
    const done = await imported(a, lines.join("\n") + "\n");
    expect(done).toMatchObject({ status: "COMPLETED", totalRows: 5200, created: 3900, updated: 0, skipped: 1300 });
    expect(done.errors).toHaveLength(1000);
    expect(done.errors[0]).toEqual({ row: 4, message: "email must be a valid email address" });
    expect(done.errors[999].row).toBe(4000);
    expect((await a.api.get("/contacts?limit=1")).body.total).toBe(3900);
  });
});

describe("contact imports: XLSX and vCard", () => {
  it("imports the first sheet of an XLSX workbook, typed cells included", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    await a.api.post("/contacts/custom-fields", { key: "since", type: "DATE" });
    await a.api.post("/contacts/custom-fields", { key: "visits", type: "NUMBER" });
    await a.api.post("/contacts/custom-fields", { key: "active", type: "BOOLEAN" });
    const wb = new ExcelJS.Workbook();
    const ws = wb.addWorksheet("Contacts");
    ws.addRow(["Phone Number", "Email", "First name", "since", "visits", "active"]);
    ws.addRow(["+351912000040", "x1@x.pt", "Xana", new Date(Date.UTC(2020, 4, 17)), 7, true]);
    ws.addRow([]);
    ws.addRow(["+351 912 000 041", { text: "x2@x.pt", hyperlink: "mailto:x2@x.pt" }, { richText: [{ text: "Ri" }, { text: "ta" }] }, "2021-01-02", "8", "no"]);
    ws.addRow(["12", "x3@x.pt"]);
    wb.addWorksheet("Ignored").addRow(["email"]);
    const xlsx = Buffer.from(await wb.xlsx.writeBuffer());
    const done = await imported(a, xlsx, {}, { name: "book.xlsx" });
    expect(done).toMatchObject({ status: "COMPLETED", totalRows: 3, created: 2, skipped: 1 });
    expect(done.errors).toEqual([{ row: 4, message: expect.stringMatching(/^phoneNumber must be/) }]);
    expect(await byPhone(a, "+351912000040")).toMatchObject({
      email: "x1@x.pt",
      firstName: "Xana",
      customFields: { since: "2020-05-17", visits: 7, active: true },
    });
    expect(await byPhone(a, "+351912000041")).toMatchObject({
      email: "x2@x.pt",
      firstName: "Rita",
      customFields: { since: "2021-01-02", visits: 8, active: false },
    });
  });

  it("ends FAILED for a zip that claims a workbook but cannot be read", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const wb = new ExcelJS.Workbook();
    wb.addWorksheet("S").addRow(["email"]);
    const good = Buffer.from(await wb.xlsx.writeBuffer());
    // Damage the compressed data but keep the zip's directory (so it still looks like a workbook).
    const broken = Buffer.from(good);
    for (let i = 200; i < Math.min(broken.length - 200, 2000); i++) broken[i] = (broken[i]! + 97) & 0xff;
    const res = await upload(a, broken, {}, { name: "broken.xlsx" });
    if (res.status === 415) return; // the damage reached the directory: refused at upload instead
    expect(res.status).toBe(202);
    expect(await finished(a, res.body.importId)).toMatchObject({ status: "FAILED", failureReason: expect.stringContaining("XLSX") });
  });

  it("imports vCard 3.0 and 4.0 cards, one contact per card, reporting bad cards by number", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const vcf = [
      "BEGIN:VCARD",
      "VERSION:3.0",
      "N:Silva;Ana;;;",
      "FN:Ana Silva",
      "TEL;TYPE=HOME:+351 212 345 678",
      "TEL;TYPE=CELL:+351 912 000 050",
      "EMAIL;TYPE=INTERNET:ana@vc.pt",
      "END:VCARD",
      "BEGIN:VCARD",
      "VERSION:4.0",
      "FN:Bruno Mar",
      "TEL;VALUE=uri;PREF=1:tel:+351-912-000-051",
      "GENDER:M",
      "END:VCARD",
      "BEGIN:VCARD",
      "VERSION:4.0",
      "FN:No Reach",
      "END:VCARD",
      "BEGIN:VCARD",
      "VERSION:3.0",
      "FN:Long",
      "EMAIL:long@vc.pt",
      "NOTE:folded",
      "  line",
      "END:VCARD",
      "",
    ].join("\r\n");
    const done = await imported(a, vcf, {}, { path: "/contacts/upload/vcard", name: "people.vcf" });
    expect(done).toMatchObject({ status: "COMPLETED", totalRows: 4, created: 3, skipped: 1 });
    expect(done.errors).toEqual([{ row: 3, message: "a phone number or an email is required" }]);
    expect(await byPhone(a, "+351912000050")).toMatchObject({ firstName: "Ana", lastName: "Silva", email: "ana@vc.pt" });
    expect(await byPhone(a, "+351912000051")).toMatchObject({ firstName: "Bruno", lastName: "Mar", gender: "MALE" });
    expect((await a.api.get("/contacts?email=long@vc.pt")).body.data[0].firstName).toBe("Long");
  });
});

describeOncePerRun("contact imports: refused uploads", () => {
  const png = Buffer.from(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63f8ffff3f0005fe02fea7d6a00000000049454e44ae426082",
    "hex",
  );

  it.each([
    ["a PNG picture", "/contacts/upload", png, "photo.csv"],
    ["a vCard sent as a spreadsheet", "/contacts/upload", "BEGIN:VCARD\r\nVERSION:3.0\r\nEMAIL:a@b.pt\r\nEND:VCARD\r\n", "c.csv"],
    ["a CSV sent as vCards", "/contacts/upload/vcard", "email\na@b.pt\n", "c.vcf"],
    ["a zip that holds no workbook", "/contacts/upload", Buffer.from("504b0506000000000000000000000000000000000000", "hex"), "c.xlsx"],
  ])("answers 415 for %s (judged by content, not by name)", async (_n, path, body, name) => {
    const a = await t.newAccount(["CONTACTS"]);
    expectProblem(await upload(a, body, {}, { path, name }), 415);
  });

  it("answers 415 for a body that is not multipart", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    expectProblem(await a.api.post("/contacts/upload", { file: "email\na@b.pt" }), 415);
  });

  it.each([
    ["no file", () => form(null, { listId: "1" }), "file"],
    ["the file as a text field", () => form(null, { file: "email\na@b.pt" }), "file"],
    ["an empty file", () => form(""), "file"],
    ["a file in another field", () => form("email\na@b.pt\n", {}, "c.csv", "upload"), "upload"],
    ["an unknown field", () => form("email\na@b.pt\n", { colour: "red" }), "colour"],
  ])("answers 400 for %s", async (_n, make, path) => {
    const a = await t.newAccount(["CONTACTS"]);
    const res = await a.api.request("POST", "/contacts/upload", { form: make() });
    expectProblem(res, 400);
    expect(JSON.stringify(res.body.errors ?? [])).toContain(path);
  });

  it("answers 400 for two files", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const f = form("email\na@b.pt\n");
    f.append("file", new Blob(["email\nc@d.pt\n"]), "second.csv");
    expectProblem(await a.api.request("POST", "/contacts/upload", { form: f }), 400);
  });

  it("answers 413 for a file over 100 MiB, declared or streamed, and keeps nothing", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const boundary = "----pgwtest";
    const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.csv"\r\nContent-Type: text/csv\r\n\r\nemail\n`);
    const chunk = Buffer.alloc(1024 * 1024, 0x62);
    // Declared (Content-Length over the limit): the answer may come, and the connection close, while
    // the client is still sending, so the answer is read as soon as it comes (fetch would report
    // the reset instead, depending on how far the upload got).
    const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
    const declared = await new Promise<{ status: number; headers: Headers; body: any }>((resolve, reject) => {
      const req = http.request(`${a.api.baseUrl}/contacts/upload`, {
        method: "POST",
        headers: {
          "x-api-key": a.key.apiKey,
          "content-type": `multipart/form-data; boundary=${boundary}`,
          "content-length": String(head.length + 101 * chunk.length + tail.length),
        },
      });
      req.on("response", (res) => {
        const parts: Buffer[] = [];
        res.on("data", (c: Buffer) => parts.push(c));
        res.on("end", () => {
          const text = Buffer.concat(parts).toString("utf8");
          resolve({ status: res.statusCode!, headers: new Headers(res.headers as Record<string, string>), body: text ? JSON.parse(text) : null });
        });
        res.on("error", reject);
      });
      req.on("error", (err) => (req.writableEnded ? undefined : reject(err)));
      (async () => {
        for (const piece of [head, ...Array.from({ length: 101 }, () => chunk), tail]) {
          if (req.destroyed) return;
          if (!req.write(piece)) await new Promise((r) => req.once("drain", r).once("close", r));
        }
        req.end();
      })().catch(() => undefined);
    });
    expectProblem(declared, 413);
    // Chunked (no Content-Length): refused once the limit is crossed.
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(c) {
        if (sent === 0) c.enqueue(head);
        if (sent++ < 102) c.enqueue(chunk);
        else {
          c.enqueue(Buffer.from(`\r\n--${boundary}--\r\n`));
          c.close();
        }
      },
    });
    const r = await fetch(`${a.api.baseUrl}/contacts/upload`, {
      method: "POST",
      headers: { "x-api-key": a.key.apiKey, "content-type": `multipart/form-data; boundary=${boundary}` },
      body: stream,
      duplex: "half",
    } as RequestInit).catch((e: Error) => e);
    if (r instanceof Error) throw r;
    expect(r.status).toBe(413);
    expect((await a.api.get("/contacts")).body.total).toBe(0);
  });

  it("needs a key with CONTACTS; another account's import is a 404, a malformed id a 400", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const b = await t.newAccount(["CONTACTS"]);
    const noScope = await t.newAccount(["SMS"]);
    expectProblem(await upload(noScope, "email\na@b.pt\n"), 401);
    const res = await upload(a, "email\nmine@x.pt\n");
    await finished(a, res.body.importId);
    expectProblem(await b.api.get(`/contacts/imports/${res.body.importId}`), 404);
    expectProblem(await a.api.get("/contacts/imports/0b6e4c1e-8a8c-4f5e-9a0e-3d2f1c4b5a69"), 404);
    expectProblem(await a.api.get("/contacts/imports/nope"), 400);
  });

  it("honours Idempotency-Key: the same upload answers the same import; another file with the key is a 422", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const headers = { "idempotency-key": "import-1" };
    const first = await upload(a, "email\nidem@x.pt\n", {}, { headers });
    expect(first.status).toBe(202);
    const again = await upload(a, "email\nidem@x.pt\n", {}, { headers });
    expect(again.status).toBe(202);
    expect(again.body.importId).toBe(first.body.importId);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expectProblem(await upload(a, "email\nother@x.pt\n", {}, { headers }), 422);
    await finished(a, first.body.importId);
    expect((await a.api.get("/contacts")).body.total).toBe(1);
  });

  it("ends FAILED an import whose node stopped answering (swept by any contacts node)", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const id = "5b1f9a52-1111-4a1a-9a1a-1a1a1a1a1a1a";
    await t.db.sequelize.query(
      `INSERT INTO contact_imports (id, company_id, kind, file_name, file_size, file_sha256, node_id, status, heartbeat_at)
       VALUES ($1, $2, 'csv', 'lost.csv', 10, repeat('0', 64), 'gone-node', 'PROCESSING', now() - interval '10 minutes')`,
      { bind: [id, a.companyId] },
    );
    expect((await a.api.get(`/contacts/imports/${id}`)).body.status).toBe("PROCESSING");
    expect(await t.app.broker.call("contacts.sweepImports")).toEqual({ failed: 1 });
    expect((await a.api.get(`/contacts/imports/${id}`)).body).toMatchObject({ status: "FAILED", failureReason: expect.stringContaining("stopped") });
  });
});

describeOncePerRun("contact imports: hostile cells and the time budget", () => {
  it("refuses a 1 MiB NUMBER cell promptly as that row's error and imports the rest", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    await a.api.post("/contacts/custom-fields", { key: "score", type: "NUMBER" });
    // Just under the 1 MiB a CSV record may hold: digits, then a character no number has.
    const cell = `${"1".repeat(1024 * 1024 - 1024)}x`;
    const started = Date.now();
    const done = await imported(a, `email,score\nbig@x.pt,${cell}\nok@x.pt,12.5\n`);
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(done).toMatchObject({ status: "COMPLETED", totalRows: 2, created: 1, skipped: 1 });
    expect(done.errors).toEqual([{ row: 1, message: "customFields.score must be a number" }]);
    expect((await a.api.get("/contacts?email=ok@x.pt")).body.data[0].customFields).toEqual({ score: 12.5 });
  });

  it("stops an import past its time budget, ending it FAILED with the reason, and frees the thread", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const importer = (t.app.broker.getLocalService("contacts") as unknown as { importer: { taskBudgetMs: number } }).importer;
    const lines = ["email,firstName"];
    for (let i = 1; i <= 20_000; i++) lines.push(`slow${i}@x.pt,N${i}`);
    importer.taskBudgetMs = 25;
    let done: Record<string, unknown> & { totalRows: number };
    try {
      done = await imported(a, lines.join("\n") + "\n");
    } finally {
      importer.taskBudgetMs = IMPORT_TASK_BUDGET_MS;
    }
    expect(done).toMatchObject({ status: "FAILED", failureReason: expect.stringMatching(/^The import took longer than 25 ms and was stopped;/) });
    expect(done.totalRows).toBeLessThan(20_000);
    // The next import runs on a fresh thread.
    expect(await imported(a, "email\nafter@x.pt\n")).toMatchObject({ status: "COMPLETED", created: 1 });
  });
});

describeOncePerRun("contact imports: XLSX zip bombs", () => {
  const cell = (ref: string, text: string) => `<c r="${ref}" t="inlineStr"><is><t>${text}</t></is></c>`;
  /** A minimal workbook whose one sheet holds `rows`, `padding` bytes of blanks between them; the sheet may come first in the zip. */
  function workbook(rows: string[][], opts: { padding?: number; declareSheet?: number; sheetFirst?: boolean } = {}): Buffer {
    const xml = (s: string) => Buffer.from(`<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n${s}`);
    const body = rows.map((r, i) => `<row r="${i + 1}">${r.map((v, j) => cell(`${String.fromCharCode(65 + j)}${i + 1}`, v)).join("")}</row>`);
    const sheet: ZipPart = {
      name: "xl/worksheets/sheet1.xml",
      data: Buffer.concat([
        xml(`<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>${body[0] ?? ""}`),
        Buffer.alloc(opts.padding ?? 0, " "),
        Buffer.from(`${body.slice(1).join("")}</sheetData></worksheet>`),
      ]),
      declare: opts.declareSheet,
    };
    const rest: ZipPart[] = [
      {
        name: "[Content_Types].xml",
        data: xml(
          `<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/></Types>`,
        ),
      },
      {
        name: "_rels/.rels",
        data: xml(
          `<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>`,
        ),
      },
      {
        name: "xl/workbook.xml",
        data: xml(
          `<workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets><sheet name="Contacts" sheetId="1" r:id="rId1"/></sheets></workbook>`,
        ),
      },
      {
        name: "xl/_rels/workbook.xml.rels",
        data: xml(
          `<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet1.xml"/></Relationships>`,
        ),
      },
    ];
    return zip(opts.sheetFirst ? [sheet, ...rest] : [...rest, sheet]);
  }
  const importer = () => (t.app.broker.getLocalService("contacts") as unknown as { importer: { expandedBudgetBytes: number } }).importer;
  /** What IMPORT_DIR holds but tsx's compile cache (the worker threads' TMPDIR is IMPORT_DIR). */
  const held = () => readdirSync(t.config.importDir).filter((f) => !f.startsWith("tsx-"));
  const dirBytes = () => held().reduce((n, f) => n + statSync(path.join(t.config.importDir, f)).size, 0);

  /** Uploads `file` and follows the import to its end, measuring the most IMPORT_DIR held meanwhile. */
  async function importWatchingDisk(a: Account, file: Buffer) {
    let most = 0;
    const watch = setInterval(() => {
      try {
        most = Math.max(most, dirBytes());
      } catch {
        // a file removed while it was measured
      }
    }, 5);
    try {
      const done = await imported(a, file, {}, { name: "bomb.xlsx" });
      await eventually(() => expect(held()).toEqual([]), { timeoutMs: 5_000 });
      return { done, most };
    } finally {
      clearInterval(watch);
    }
  }

  it("ends FAILED, leaving nothing in IMPORT_DIR, a workbook whose sheet inflates past the budget", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const file = workbook([["email"], ["bomb@x.pt"]], { padding: 64 * 1024 * 1024 });
    expect(file.length).toBeLessThan(1024 * 1024);
    importer().expandedBudgetBytes = 8 * 1024 * 1024;
    let result: Awaited<ReturnType<typeof importWatchingDisk>>;
    try {
      result = await importWatchingDisk(a, file);
    } finally {
      importer().expandedBudgetBytes = MAX_EXPANDED_BYTES;
    }
    expect(result.done).toMatchObject({ status: "FAILED", failureReason: expect.stringMatching(/^The workbook expands to more than 8 MiB/) });
    expect(result.most).toBeLessThanOrEqual(file.length);
    expect((await a.api.get("/contacts?email=bomb@x.pt")).body.data).toEqual([]);
  });

  it("ends FAILED, leaving nothing in IMPORT_DIR, a workbook whose zip headers declare tiny sizes", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const file = workbook([["email"], ["liar@x.pt"]], { padding: 64 * 1024 * 1024, declareSheet: 1000 });
    const { done, most } = await importWatchingDisk(a, file);
    expect(done).toMatchObject({ status: "FAILED", failureReason: expect.stringMatching(/^The workbook expands to more than/) });
    expect(most).toBeLessThanOrEqual(file.length);
    expect((await a.api.get("/contacts?email=liar@x.pt")).body.data).toEqual([]);
  });

  it("still imports a well-made workbook, its sheet stored before the parts it needs, without a temporary file", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const file = workbook(
      [
        ["email", "First name"],
        ["fine1@x.pt", "Ana"],
        ["fine2@x.pt", "Rui"],
      ],
      { padding: 1024 * 1024, sheetFirst: true },
    );
    const { done, most } = await importWatchingDisk(a, file);
    expect(done).toMatchObject({ status: "COMPLETED", totalRows: 2, created: 2 });
    expect(most).toBeLessThanOrEqual(file.length);
    expect((await a.api.get("/contacts?email=fine2@x.pt")).body.data[0]).toMatchObject({ firstName: "Rui" });
  });
});

describe("contact imports: disk budgets (the gateway's spool and IMPORT_DIR)", () => {
  const SPOOL = 40_000;
  const QUEUE = 10_000;
  let d: TestApp;
  beforeAll(async () => {
    // An account may hold half of each budget (UPLOAD_ACCOUNT_SHARE).
    d = await startTestApp({
      services: ["gateway", "auth", "contacts"],
      config: { spoolMaxBytes: SPOOL, importQueueMaxBytes: QUEUE, uploadAccountShare: 0.5 },
    });
  });
  afterAll(() => d?.stop());

  type Ledger = { used(account?: string): number };
  const contacts = () => d.app.broker.getLocalService("contacts") as unknown as { importer: Record<string, any> & { disk: Ledger } };
  const gateway = () => d.app.broker.getLocalService("gateway") as unknown as { spoolBudget: Ledger; spoolDir: string };
  /** Holds every import queued from now on until the returned function is called (their files stay in IMPORT_DIR). */
  function holdImports(): () => void {
    const importer = contacts().importer;
    const run = importer.run;
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    importer.run = async (...args: unknown[]) => {
      await gate;
      return run.apply(importer, args);
    };
    return () => {
      importer.run = run;
      open();
    };
  }
  const dirBytes = (dir: string, keep = (_f: string) => true) =>
    readdirSync(dir)
      .filter((f) => !f.startsWith("tsx-") && keep(f))
      .reduce((n, f) => n + statSync(path.join(dir, f)).size, 0);
  /** A CSV of exactly `n` bytes. */
  const csvOf = (n: number) => {
    const head = "email\nok@x.pt\n";
    return head + "x".repeat(n - head.length - 1) + "\n";
  };
  const expectFull = (res: { status: number; headers: Headers; body: any }) => {
    expectProblem(res, 503);
    expect(res.body.type).toMatch(/SERVICE_UNAVAILABLE|service-unavailable/i);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
  };
  /** Past the account's own share: 429 with Retry-After, never 503 (another account still fits). */
  const expectShareHeld = (res: { status: number; headers: Headers; body: any }) => {
    expectProblem(res, 429);
    expect(res.body.type).toBe("/docs#problem-upload-share-exceeded");
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
  };
  const drained = () =>
    eventually(() => {
      expect(contacts().importer.disk.used()).toBe(0);
      expect(gateway().spoolBudget.used()).toBe(0);
    });

  it("keeps concurrent uploads within IMPORT_QUEUE_MAX_BYTES: those that fit are 202, the others 503 with Retry-After", async () => {
    const accounts = await Promise.all(Array.from({ length: 8 }, () => d.newAccount(["CONTACTS"])));
    const release = holdImports();
    try {
      const answers = await Promise.all(accounts.map((a) => upload(a, csvOf(2000))));
      const accepted = answers.filter((r) => r.status === 202);
      expect(accepted).toHaveLength(QUEUE / 2000);
      for (const r of answers.filter((x) => x.status !== 202)) expectFull(r);
      expect(dirBytes(d.config.importDir)).toBeLessThanOrEqual(QUEUE);
      expect(contacts().importer.disk.used()).toBe(accepted.length * 2000);
    } finally {
      release();
    }
    await drained();
    // Room comes back as imports end.
    expect((await upload(accounts[0]!, csvOf(2000))).status).toBe(202);
    await drained();
  });

  it("keeps one account within its share of the import queue (429 past it): another account's upload still fits", async () => {
    const a = await d.newAccount(["CONTACTS"]);
    const b = await d.newAccount(["CONTACTS"]);
    const release = holdImports();
    try {
      expect((await upload(a, csvOf(2000))).status).toBe(202);
      expect((await upload(a, csvOf(2000))).status).toBe(202);
      expectShareHeld(await upload(a, csvOf(2000)));
      expect((await upload(b, csvOf(2000))).status).toBe(202);
      expect(contacts().importer.disk.used(a.companyId)).toBe(4000);
    } finally {
      release();
    }
    await drained();
  });

  it("reserves the gateway's spool before writing: past the account's share 429, a full spool 503, both with Retry-After, and aborted uploads give their room back", async () => {
    const [a, b, c, e] = await Promise.all(Array.from({ length: 4 }, () => d.newAccount(["CONTACTS"])));
    const boundary = "----pgwbudget";
    const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.csv"\r\nContent-Type: text/csv\r\n\r\nemail\n`);
    /** An upload that declares `length` bytes and sends only its first part, held open until destroyed. */
    const holdUpload = (acct: Account, length: number) => {
      const req = http.request(`${acct.api.baseUrl}/contacts/upload`, {
        method: "POST",
        headers: { "x-api-key": acct.key.apiKey, "content-type": `multipart/form-data; boundary=${boundary}`, "content-length": String(length) },
      });
      req.on("error", () => undefined);
      req.write(Buffer.concat([head, Buffer.alloc(1000, 0x61)]));
      return req;
    };
    const held = [holdUpload(a!, 19_800)];
    await eventually(() => expect(gateway().spoolBudget.used(a!.companyId)).toBe(19_800));
    // The account's share (half the spool) is taken; another account still fits.
    expectShareHeld(await upload(a!, csvOf(500)));
    held.push(holdUpload(b!, 19_800));
    await eventually(() => expect(gateway().spoolBudget.used()).toBe(39_600));
    // The node's spool is full: declared or chunked, an upload is refused.
    expectFull(await upload(c!, csvOf(500)));
    const chunked = await fetch(`${e!.api.baseUrl}/contacts/upload`, {
      method: "POST",
      headers: { "x-api-key": e!.key.apiKey, "content-type": `multipart/form-data; boundary=${boundary}` },
      body: Buffer.concat([head, Buffer.alloc(8000, 0x62), Buffer.from(`\n\r\n--${boundary}--\r\n`)]),
    });
    // (fetch sends a Buffer with its length; a stream goes chunked)
    expectFull({ status: chunked.status, headers: chunked.headers, body: await chunked.json() });
    let sent = false;
    const stream = new ReadableStream<Uint8Array>({
      pull(ctl) {
        if (sent) return ctl.close();
        sent = true;
        ctl.enqueue(Buffer.concat([head, Buffer.alloc(8000, 0x62), Buffer.from(`\n\r\n--${boundary}--\r\n`)]));
      },
    });
    const streamed = await fetch(`${e!.api.baseUrl}/contacts/upload`, {
      method: "POST",
      headers: { "x-api-key": e!.key.apiKey, "content-type": `multipart/form-data; boundary=${boundary}` },
      body: stream,
      duplex: "half",
    } as RequestInit);
    expectFull({ status: streamed.status, headers: streamed.headers, body: await streamed.json() });
    expect(dirBytes(gateway().spoolDir)).toBeLessThanOrEqual(SPOOL);
    // Aborted uploads give their room back.
    for (const r of held) r.destroy();
    await eventually(() => expect(gateway().spoolBudget.used()).toBe(0));
    expect((await upload(c!, csvOf(500))).status).toBe(202);
    await drained();
  });
});
