/**
 * Opt-outs through the partner API (contract section 7): create, list, filter and remove per
 * (account, channel, number); a contact's derived `optedOut` and the `optedOut` filter of
 * GET /contacts (and of contact exports, which share it); the import column `optedOut`; and the
 * fixed path /contacts/opt-outs never taken for a contact id.
 */
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { contactIn, phone } from "../helpers/builders";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ services: ["gateway", "auth", "contacts", "exports"], config: { rateLimitRps: 10000 } });
}, 60_000);
afterAll(() => t?.stop());

const optOut = (a: Account, channel: string, phoneNumber: string) => a.api.post("/contacts/opt-outs", { channel, phoneNumber });
const remove = (a: Account, channel: string, phoneNumber: string) => a.api.delete(`/contacts/opt-outs/${channel}/${encodeURIComponent(phoneNumber)}`);

describe("the partner API", () => {
  it("creates an opt-out (201), answers a repeat 200 unchanged, lists it newest first and removes it (204, then 404)", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const n = phone();
    const created = await optOut(a, "SMS", n.replace("+351", "00351 "));
    expect(created.status).toBe(201);
    expect(created.body).toEqual({ channel: "SMS", phoneNumber: n, source: "API", createdAt: expect.any(String) });
    expect(created.headers.get("location")).toBe(`/api/partner-gateway/v1/contacts/opt-outs?channel=SMS&phoneNumber=${encodeURIComponent(n)}`);
    const again = await optOut(a, "SMS", n);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(created.body);
    expect((await optOut(a, "RCS", n)).status).toBe(201);
    const other = phone();
    expect((await optOut(a, "WHATSAPP", other)).status).toBe(201);

    const all = await a.api.get("/contacts/opt-outs");
    expect(all.status).toBe(200);
    expect(all.body).toMatchObject({ page: 0, limit: 10, total: 3, totalPages: 1 });
    expect(all.body.data.map((o: { channel: string; phoneNumber: string }) => `${o.channel} ${o.phoneNumber}`)).toEqual([
      `WHATSAPP ${other}`,
      `RCS ${n}`,
      `SMS ${n}`,
    ]);
    expect((await a.api.get("/contacts/opt-outs?channel=RCS")).body.data).toEqual([expect.objectContaining({ channel: "RCS", phoneNumber: n })]);
    const byNumber = await a.api.get(`/contacts/opt-outs?phoneNumber=${encodeURIComponent(n.replace("+351", "+351 "))}`);
    expect(byNumber.body.total).toBe(2);
    expect((await a.api.get(`/contacts/opt-outs?channel=WHATSAPP&phoneNumber=${encodeURIComponent(n)}`)).body.total).toBe(0);
    expect((await a.api.get("/contacts/opt-outs?limit=1&page=1")).body.data).toEqual([expect.objectContaining({ channel: "RCS" })]);

    expect((await remove(a, "SMS", n)).status).toBe(204);
    expectProblem(await remove(a, "SMS", n), 404);
    expect((await a.api.get("/contacts/opt-outs")).body.total).toBe(2);
    // Removed, then opted out again: a new opt-out (201).
    expect((await optOut(a, "SMS", n)).status).toBe(201);
    // The + of the number may also come unencoded in the path.
    expect((await a.api.delete(`/contacts/opt-outs/SMS/${n}`)).status).toBe(204);
  });

  it("keeps accounts apart: another account's opt-out is not listed and removing it is a 404", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const b = await t.newAccount(["CONTACTS"]);
    const n = phone();
    expect((await optOut(a, "SMS", n)).status).toBe(201);
    expect((await b.api.get("/contacts/opt-outs")).body.total).toBe(0);
    expectProblem(await remove(b, "SMS", n), 404);
    expect((await optOut(b, "SMS", n)).status).toBe(201);
    expect((await remove(b, "SMS", n)).status).toBe(204);
    expect((await a.api.get("/contacts/opt-outs")).body.data).toEqual([expect.objectContaining({ phoneNumber: n, channel: "SMS" })]);
  });

  it("answers 400 for a bad channel or number, and 401 without CONTACTS", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const n = phone();
    const badChannel = await optOut(a, "EMAIL", n);
    expectProblem(badChannel, 400);
    expect(badChannel.body.errors).toEqual([expect.objectContaining({ path: "channel" })]);
    expect((await optOut(a, "SMS", "912345678")).body.errors).toEqual([expect.objectContaining({ path: "phoneNumber" })]);
    const invalid = await optOut(a, "SMS", "+351 000");
    expectProblem(invalid, 400);
    expect(invalid.body.errors).toEqual([expect.objectContaining({ path: "phoneNumber" })]);
    expectProblem(await a.api.post("/contacts/opt-outs", { channel: "SMS" }), 400);
    expectProblem(await a.api.post("/contacts/opt-outs", { channel: "SMS", phoneNumber: n, source: "KEYWORD" }), 400);
    expectProblem(await a.api.get("/contacts/opt-outs?channel=sms"), 400);
    expectProblem(await a.api.get("/contacts/opt-outs?phoneNumber=%2B351000"), 400);
    expectProblem(await a.api.delete(`/contacts/opt-outs/FAX/${encodeURIComponent(n)}`), 400);
    expectProblem(await a.api.delete(`/contacts/opt-outs/SMS/123`), 400);
    for (const odd of ["%2B", "%00", "%2B" + "9".repeat(500), "%F0%9F%91%8D"])
      expect([odd, (await a.api.delete(`/contacts/opt-outs/SMS/${odd}`)).status]).toEqual([odd, 400]);
    // An encoded slash splits the path, as everywhere: no such route.
    expectProblem(await a.api.delete(`/contacts/opt-outs/SMS/%2B351%2F912345678`), 404);
    const noScope = await t.newAccount(["SMS"]);
    expectProblem(await noScope.api.get("/contacts/opt-outs"), 401);
    expectProblem(await noScope.api.post("/contacts/opt-outs", { channel: "SMS", phoneNumber: n }), 401);
  });

  it("never reads /contacts/opt-outs as a contact id: GET lists, PUT and DELETE are 405 with the path's own methods", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const list = await a.api.get("/contacts/opt-outs");
    expect(list.status).toBe(200);
    expect(list.body).toMatchObject({ data: [], total: 0 });
    for (const method of ["PUT", "DELETE", "PATCH"]) {
      const res = await a.api.request(method, "/contacts/opt-outs", { body: {} });
      expectProblem(res, 405);
      expect(res.headers.get("allow")).toBe("GET, POST");
    }
    const res = await a.api.request("GET", `/contacts/opt-outs/SMS/${encodeURIComponent(phone())}`);
    expectProblem(res, 405);
    expect(res.headers.get("allow")).toBe("DELETE");
  });
});

describe("contacts", () => {
  it("shows optedOut on every contact answer, from the number's opt-outs, and keeps it when the contact is deleted and created again", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const n = phone();
    expect((await optOut(a, "WHATSAPP", n)).status).toBe(201);
    expect((await optOut(a, "SMS", n)).status).toBe(201);
    const c = await a.api.post("/contacts", contactIn({ phoneNumber: n }));
    expect(c.status).toBe(201);
    expect(c.body.optedOut).toEqual(["SMS", "WHATSAPP"]);
    expect((await a.api.get(`/contacts/${c.body.id}`)).body.optedOut).toEqual(["SMS", "WHATSAPP"]);
    expect((await a.api.get(`/contacts?phoneNumber=${encodeURIComponent(n)}`)).body.data[0].optedOut).toEqual(["SMS", "WHATSAPP"]);
    const moved = await a.api.put(`/contacts/${c.body.id}`, { phoneNumber: phone() });
    expect(moved.body.optedOut).toEqual([]);
    const back = await a.api.put(`/contacts/${c.body.id}`, { phoneNumber: n });
    expect(back.body.optedOut).toEqual(["SMS", "WHATSAPP"]);
    expect((await a.api.post("/contacts", { email: "nophone@example.com" })).body.optedOut).toEqual([]);
    expect((await a.api.delete(`/contacts/${c.body.id}`)).status).toBe(204);
    expect((await a.api.post("/contacts", contactIn({ phoneNumber: n }))).body.optedOut).toEqual(["SMS", "WHATSAPP"]);
    // Another account's contact with the same number is not opted out.
    const b = await t.newAccount(["CONTACTS"]);
    expect((await b.api.post("/contacts", contactIn({ phoneNumber: n }))).body.optedOut).toEqual([]);
  });

  it("filters contacts by optedOut=<channel> and optedOut=none, in GET /contacts, a list's contacts and contact exports", async () => {
    const a = await t.newAccount(["CONTACTS", "EXPORTS"]);
    const sms = await a.api.post("/contacts", contactIn());
    const both = await a.api.post("/contacts", contactIn());
    const none = await a.api.post("/contacts", contactIn());
    const emailOnly = await a.api.post("/contacts", { email: "only@example.com" });
    expect((await optOut(a, "SMS", sms.body.phoneNumber)).status).toBe(201);
    expect((await optOut(a, "SMS", both.body.phoneNumber)).status).toBe(201);
    expect((await optOut(a, "RCS", both.body.phoneNumber)).status).toBe(201);
    // A number no contact has, and a removed opt-out, filter nothing.
    expect((await optOut(a, "RCS", phone())).status).toBe(201);
    expect((await optOut(a, "WHATSAPP", none.body.phoneNumber)).status).toBe(201);
    expect((await remove(a, "WHATSAPP", none.body.phoneNumber)).status).toBe(204);

    const ids = async (query: string) => {
      const res = await a.api.get(`/contacts?${query}&limit=100`);
      expect(res.status).toBe(200);
      return (res.body.data as Array<{ id: string }>).map((c) => c.id).sort();
    };
    expect(await ids("optedOut=SMS")).toEqual([sms.body.id, both.body.id].sort());
    expect(await ids("optedOut=RCS")).toEqual([both.body.id]);
    expect(await ids("optedOut=WHATSAPP")).toEqual([]);
    expect(await ids("optedOut=none")).toEqual([none.body.id, emailOnly.body.id].sort());
    expect((await a.api.get("/contacts?optedOut=SMS")).body.total).toBe(2);
    expectProblem(await a.api.get("/contacts?optedOut=EMAIL"), 400);
    expectProblem(await a.api.get("/contacts?optedOut=true"), 400);

    const list = await a.api.post("/contacts/list", { name: "all" });
    await a.api.post("/contacts/list/contacts", { listIds: [list.body.id], allContacts: true });
    const members = await a.api.get(`/contacts/list/${list.body.id}/contacts?optedOut=RCS`);
    expect(members.body.data.map((c: { id: string }) => c.id)).toEqual([both.body.id]);

    expectProblem(await a.api.post("/exports/contacts", { optedOut: "FAX" }), 400);
    const job = await a.api.post("/exports/contacts", { optedOut: "SMS" });
    expect(job.status).toBe(202);
    const done = await eventually(async () => {
      const res = await a.api.get("/exports");
      const found = res.body.data.find((j: { exportId: string }) => j.exportId === job.body.exportId);
      expect(found.status).toBe("COMPLETED");
      return found;
    });
    expect(done.rowCount).toBe(2);
  });
});

describe("imports: the optedOut column", () => {
  const finished = (a: Account, importId: string) =>
    eventually(
      async () => {
        const res = await a.api.get(`/contacts/imports/${importId}`);
        expect(["COMPLETED", "FAILED"]).toContain(res.body.status);
        return res.body;
      },
      { timeoutMs: 30_000 },
    );
  const imported = async (a: Account, csv: string) => {
    const form = new FormData();
    form.append("file", new Blob([csv]), "contacts.csv");
    const res = await a.api.request("POST", "/contacts/upload", { form });
    expect(res.status).toBe(202);
    return finished(a, res.body.importId);
  };
  const optedOutOf = async (a: Account, n: string) => (await a.api.get(`/contacts?phoneNumber=${encodeURIComponent(n)}`)).body.data[0]?.optedOut;

  it("sets opt-outs (source IMPORT) from true, false or a list of channels, and reports bad cells by row", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const [all, some, none, bad] = [phone(), phone(), phone(), phone()];
    const csv = `phoneNumber,firstName,Opted Out\n${all},All,true\n${some},Some,"sms, whatsapp"\n${none},None,false\n${bad},Bad,maybe\n`;
    const done = await imported(a, csv);
    expect(done).toMatchObject({ status: "COMPLETED", totalRows: 4, created: 3, skipped: 1 });
    expect(done.errors).toEqual([{ row: 4, message: expect.stringMatching(/^optedOut must be true, false or a list of channels/) }]);
    expect(await optedOutOf(a, all)).toEqual(["SMS", "RCS", "WHATSAPP"]);
    expect(await optedOutOf(a, some)).toEqual(["SMS", "WHATSAPP"]);
    expect(await optedOutOf(a, none)).toEqual([]);
    expect(await optedOutOf(a, bad)).toBeUndefined();
    const listed = await a.api.get(`/contacts/opt-outs?phoneNumber=${encodeURIComponent(some)}`);
    expect(listed.body.data).toEqual([
      expect.objectContaining({ channel: "SMS", source: "IMPORT" }),
      expect.objectContaining({ channel: "WHATSAPP", source: "IMPORT" }),
    ]);
  });

  it("an import again states the number's channels: it removes what an import set, never an opt-out made otherwise", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const n = phone();
    expect((await imported(a, `phoneNumber,optedOut\n${n},true\n`)).status).toBe("COMPLETED");
    expect((await remove(a, "RCS", n)).status).toBe(204);
    expect((await optOut(a, "RCS", n)).status).toBe(201); // now the partner's own (API)
    expect((await imported(a, `phoneNumber,optedOut\n${n},SMS\n`)).status).toBe("COMPLETED");
    expect(await optedOutOf(a, n)).toEqual(["SMS", "RCS"]);
    expect((await imported(a, `phoneNumber,optedOut\n${n},false\n`)).status).toBe("COMPLETED");
    expect(await optedOutOf(a, n)).toEqual(["RCS"]);
    // An empty cell leaves the opt-outs as they are.
    expect((await imported(a, `phoneNumber,optedOut,firstName\n${n},,Kept\n`)).status).toBe("COMPLETED");
    expect(await optedOutOf(a, n)).toEqual(["RCS"]);
  });

  it("lets a later row of the same file win: opted out in row 1, not in row 2, ends not opted out (and the other way round)", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const [n, m] = [phone(), phone()];
    const done = await imported(a, `phoneNumber,optedOut\n${n},SMS\n${n},false\n${m},false\n${m},SMS\n`);
    expect(done.status).toBe("COMPLETED");
    expect(await optedOutOf(a, n)).toEqual([]);
    expect(await optedOutOf(a, m)).toEqual(["SMS"]);
  });

  it("opts out the number of the contact a row matches by email, and refuses optedOut on a row without any number", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const c = (await a.api.post("/contacts", contactIn({ email: "match@example.com" }))).body;
    await a.api.post("/contacts", { email: "nonumber@example.com" });
    const done = await imported(a, "email,optedOut\nmatch@example.com,whatsapp\nnonumber@example.com,true\n");
    expect(done).toMatchObject({ status: "COMPLETED", updated: 1, skipped: 1 });
    expect(done.errors).toEqual([{ row: 2, message: expect.stringMatching(/^optedOut needs a phone number/) }]);
    expect((await a.api.get(`/contacts/${c.id}`)).body.optedOut).toEqual(["WHATSAPP"]);
  });
});
