import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { contactIn } from "../helpers/builders";
import { expectProblem } from "../helpers/expect";

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ services: ["gateway", "auth", "contacts"] });
});
afterAll(() => t?.stop());

describe("POST /contacts", () => {
  it("creates a contact with its phone in E.164 and answers 201 with every field", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const res = await a.api.post("/contacts", {
      firstName: "Ana",
      lastName: "Silva",
      phoneNumber: "+351 912 345 678",
      email: "Ana@Example.COM",
      gender: "FEMALE",
    });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      firstName: "Ana",
      lastName: "Silva",
      gender: "FEMALE",
      phoneNumber: "+351912345678",
      email: "ana@example.com",
      customFields: {},
      isTest: false,
      isValid: true,
      communicationSupported: ["SMS"],
      lastContactType: null,
      lastCampaignType: null,
      optedOut: [],
      createdAt: expect.any(String),
      updatedAt: expect.any(String),
    });
    expect(res.headers.get("location")).toBe(`/api/partner-gateway/v1/contacts/${res.body.id}`);
  });

  it("accepts an email alone, with no channel supported", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const res = await a.api.post("/contacts", { email: "solo@example.com" });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ phoneNumber: null, email: "solo@example.com", communicationSupported: [], isValid: true });
  });

  it.each([
    ["neither phone nor email", { firstName: "X" }, "phoneNumber"],
    ["a malformed phone", { phoneNumber: "12345" }, "phoneNumber"],
    ["a phone without its country code", { phoneNumber: "912345678" }, "phoneNumber"],
    ["a malformed email", { email: "not-an-email" }, "email"],
    ["an unknown gender", { email: "g@example.com", gender: "ROBOT" }, "gender"],
    ["an unknown field", { email: "u@example.com", nickname: "x" }, "nickname"],
    ["a wrong type", { email: "w@example.com", isTest: "yes" }, "isTest"],
    ["a NUL character", { email: "n@example.com", firstName: "a\u0000b" }, "firstName"],
    ["an unpaired surrogate", { email: "s@example.com", lastName: "x\ud800" }, "lastName"],
  ])("answers 400 for %s, naming the field, and writes nothing", async (_n, body, path) => {
    const a = await t.newAccount(["CONTACTS"]);
    const res = await a.api.post("/contacts", body);
    expectProblem(res, 400);
    expect(res.body.errors.map((e: { path: string }) => e.path)).toContain(path);
    expect((await a.api.get("/contacts")).body.total).toBe(0);
  });

  it("answers 409 naming the existing contact for a taken phone or email (any spelling)", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const first = await a.api.post("/contacts", { phoneNumber: "+351912000111", email: "dup@example.com" });
    const byPhone = await a.api.post("/contacts", { phoneNumber: "00351 912 000 111" });
    expectProblem(byPhone, 409);
    expect(byPhone.body.existingId).toBe(first.body.id);
    const byEmail = await a.api.post("/contacts", { email: "DUP@example.com" });
    expectProblem(byEmail, 409);
    expect(byEmail.body.existingId).toBe(first.body.id);
    // Another account may have the same number.
    const b = await t.newAccount(["CONTACTS"]);
    expect((await b.api.post("/contacts", { phoneNumber: "+351912000111" })).status).toBe(201);
  });

  it("answers 409 (not 500) when two requests race for the same number", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const results = await Promise.all(Array.from({ length: 6 }, () => a.api.post("/contacts", { phoneNumber: "+351912777888" })));
    expect(results.filter((r) => r.status === 201)).toHaveLength(1);
    expect(results.filter((r) => r.status === 409)).toHaveLength(5);
  });

  it("needs the CONTACTS operation", async () => {
    const sms = await t.newAccount(["SMS"]);
    expectProblem(await sms.api.post("/contacts", contactIn()), 401);
    expectProblem(await sms.api.get("/contacts"), 401);
  });
});

describe("GET, PUT, DELETE /contacts/{id}", () => {
  it("reads, replaces and deletes a contact", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const created = (await a.api.post("/contacts", contactIn({ email: "r@example.com", gender: "OTHER" }))).body;
    expect((await a.api.get(`/contacts/${created.id}`)).body).toEqual(created);
    const put = await a.api.put(`/contacts/${created.id}`, { email: "new@example.com", firstName: "Nova" });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({
      id: created.id,
      email: "new@example.com",
      firstName: "Nova",
      lastName: null,
      phoneNumber: null,
      gender: null,
      communicationSupported: [],
    });
    expect((await a.api.delete(`/contacts/${created.id}`)).status).toBe(204);
    expectProblem(await a.api.get(`/contacts/${created.id}`), 404);
    expectProblem(await a.api.delete(`/contacts/${created.id}`), 404);
  });

  it("answers 404 for another account's contact and leaves it alone", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const b = await t.newAccount(["CONTACTS"]);
    const theirs = (await b.api.post("/contacts", contactIn())).body;
    expectProblem(await a.api.get(`/contacts/${theirs.id}`), 404);
    expectProblem(await a.api.put(`/contacts/${theirs.id}`, { email: "steal@example.com" }), 404);
    expectProblem(await a.api.delete(`/contacts/${theirs.id}`), 404);
    expect((await b.api.get(`/contacts/${theirs.id}`)).body).toEqual(theirs);
  });

  it("answers 400 for a malformed id and for a replacement without phone or email", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    expectProblem(await a.api.get("/contacts/123"), 400);
    const c = (await a.api.post("/contacts", contactIn())).body;
    expectProblem(await a.api.put(`/contacts/${c.id}`, { firstName: "only" }), 400);
    expect((await a.api.get(`/contacts/${c.id}`)).body).toEqual(c);
  });

  it("answers 404, not 409, when the contact to replace does not exist", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    await a.api.post("/contacts", { phoneNumber: "+351912555666" });
    expectProblem(await a.api.put("/contacts/00000000-0000-4000-8000-000000000000", { phoneNumber: "+351912555666" }), 404);
  });

  it("answers 409 when a replacement takes another contact's email", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const one = (await a.api.post("/contacts", { email: "one@example.com" })).body;
    const two = (await a.api.post("/contacts", { email: "two@example.com" })).body;
    const res = await a.api.put(`/contacts/${two.id}`, { email: "one@example.com" });
    expectProblem(res, 409);
    expect(res.body.existingId).toBe(one.id);
    expect((await a.api.put(`/contacts/${two.id}`, { email: "two@example.com", firstName: "Same" })).status).toBe(200);
  });
});

describe("custom fields", () => {
  let a: Account;
  beforeAll(async () => {
    a = await t.newAccount(["CONTACTS"]);
    for (const f of [
      { key: "tier", type: "TEXT" },
      { key: "score", type: "NUMBER" },
      { key: "vip", type: "BOOLEAN" },
      { key: "birthday", type: "DATE" },
    ]) {
      expect((await a.api.post("/contacts/custom-fields", f)).status).toBe(201);
    }
  });

  it("lists the declared fields and refuses a second declaration of a key", async () => {
    const res = await a.api.get("/contacts/custom-fields");
    expect(res.body.data.map((f: { key: string; type: string }) => `${f.key}:${f.type}`)).toEqual([
      "birthday:DATE",
      "score:NUMBER",
      "tier:TEXT",
      "vip:BOOLEAN",
    ]);
    expectProblem(await a.api.post("/contacts/custom-fields", { key: "tier", type: "NUMBER" }), 409);
    expectProblem(await a.api.post("/contacts/custom-fields", { key: "bad key", type: "TEXT" }), 400);
    expectProblem(await a.api.post("/contacts/custom-fields", { key: "x", type: "JSON" }), 400);
  });

  it("checks values on every write: undeclared keys and wrong types are 400", async () => {
    const ok = await a.api.post("/contacts", contactIn({ customFields: { tier: "gold", score: 7.5, vip: true, birthday: "1990-02-28" } }));
    expect(ok.status).toBe(201);
    expect(ok.body.customFields).toEqual({ tier: "gold", score: 7.5, vip: true, birthday: "1990-02-28" });
    for (const customFields of [{ nope: "x" }, { score: "7" }, { vip: "true" }, { birthday: "1990-02-30" }, { tier: 5 }]) {
      const res = await a.api.post("/contacts", contactIn({ customFields }));
      expectProblem(res, 400);
      expect(res.body.errors[0].path).toMatch(/^customFields\./);
    }
    expectProblem(await a.api.put(`/contacts/${ok.body.id}`, { phoneNumber: ok.body.phoneNumber, customFields: { score: "high" } }), 400);
  });

  it("filters contacts by a custom field of any type", async () => {
    const gold = (await a.api.post("/contacts", contactIn({ customFields: { tier: "platinum", score: 99, vip: false } }))).body;
    const q = async (qs: string) => (await a.api.get(`/contacts?${qs}`)).body.data.map((c: { id: string }) => c.id);
    expect(await q("customFields.tier=platinum")).toEqual([gold.id]);
    expect(await q("customFields.score=99")).toEqual([gold.id]);
    expect(await q("customFields.vip=false")).toEqual([gold.id]);
    expectProblem(await a.api.get("/contacts?customFields.colour=red"), 400);
    expectProblem(await a.api.get("/contacts?customFields.score=lots"), 400);
  });

  it("deletes a declaration and its values", async () => {
    const b = await t.newAccount(["CONTACTS"]);
    await b.api.post("/contacts/custom-fields", { key: "temp", type: "TEXT" });
    const c = (await b.api.post("/contacts", contactIn({ customFields: { temp: "x" } }))).body;
    expect((await b.api.delete("/contacts/custom-fields/temp")).status).toBe(204);
    expect((await b.api.get(`/contacts/${c.id}`)).body.customFields).toEqual({});
    expectProblem(await b.api.delete("/contacts/custom-fields/temp"), 404);
    expectProblem(await b.api.post("/contacts", contactIn({ customFields: { temp: "x" } })), 400);
  });

  it("answers 404 for deleting another account's custom field, whose declaration and values stay", async () => {
    const owner = await t.newAccount(["CONTACTS"]);
    const other = await t.newAccount(["CONTACTS"]);
    expect((await owner.api.post("/contacts/custom-fields", { key: "region", type: "TEXT" })).status).toBe(201);
    const c = (await owner.api.post("/contacts", contactIn({ customFields: { region: "north" } }))).body;
    expectProblem(await other.api.delete("/contacts/custom-fields/region"), 404);
    expect((await owner.api.get("/contacts/custom-fields")).body.data).toEqual([expect.objectContaining({ key: "region", type: "TEXT" })]);
    expect((await owner.api.get(`/contacts/${c.id}`)).body.customFields).toEqual({ region: "north" });
    expect((await owner.api.get("/contacts?customFields.region=north")).body.data.map((x: { id: string }) => x.id)).toEqual([c.id]);
    expect((await other.api.get("/contacts/custom-fields")).body.data).toEqual([]);
  });
});

describe("GET /contacts filters and sorting", () => {
  let a: Account;
  const ids: Record<string, string> = {};
  beforeAll(async () => {
    a = await t.newAccount(["CONTACTS"]);
    const make = async (name: string, body: Record<string, unknown>) => {
      const res = await a.api.post("/contacts", body);
      expect(res.status).toBe(201);
      ids[name] = res.body.id;
    };
    await make("zoe", { firstName: "Zoe", lastName: "Adams", phoneNumber: "+14155550101", gender: "FEMALE" });
    await make("bob", { firstName: "Bob", lastName: "Brown", email: "bob@corp.example", gender: "MALE", isTest: true });
    await make("amy", { firstName: "Amy", lastName: "Clark", phoneNumber: "+14155550102", email: "amy@corp.example", gender: "FEMALE" });
    await make("nameless", { email: "x_1%@example.com" });
  });
  const names = async (qs: string) => {
    const res = await a.api.get(`/contacts?${qs}`);
    expect(res.status).toBe(200);
    const byId = Object.fromEntries(Object.entries(ids).map(([k, v]) => [v, k]));
    return res.body.data.map((c: { id: string }) => byId[c.id]);
  };

  it("sorts by fullName by default, stably, in the page envelope", async () => {
    expect(await names("")).toEqual(["amy", "bob", "zoe", "nameless"]); // nameless contacts last
    expect(await names("sortBy=fullName&sortOrder=desc")).toEqual(["zoe", "bob", "amy", "nameless"]);
    expect(await names("sortBy=createdAt")).toEqual(["zoe", "bob", "amy", "nameless"]);
    const page = await a.api.get("/contacts?limit=2&page=1");
    expect(page.body).toMatchObject({ page: 1, limit: 2, total: 4, totalPages: 2 });
  });

  it("filters by each attribute", async () => {
    expect(await names("fullName=am")).toEqual(["amy", "zoe"]);
    expect(await names("search=corp.example")).toEqual(["amy", "bob"]);
    expect(await names("search=4155550101")).toEqual(["zoe"]);
    expect(await names("search=x_1%25")).toEqual(["nameless"]); // LIKE characters are literal
    expect(await names("search=x_")).toEqual(["nameless"]);
    expect(await names("isTest=true")).toEqual(["bob"]);
    expect(await names("isValid=true")).toHaveLength(4);
    expect(await names("isValid=false")).toEqual([]);
    expect(await names("communicationSupported=SMS")).toEqual(["amy", "zoe"]);
    expect(await names("communicationSupported=WHATSAPP")).toEqual([]);
    expect(await names("phoneNumber=%2B1%20415%20555%200102")).toEqual(["amy"]);
    expect(await names("email=BOB@corp.example")).toEqual(["bob"]);
    expect(await names("gender=FEMALE")).toEqual(["amy", "zoe"]);
    expect(await names("gender=FEMALE&fullName=zoe")).toEqual(["zoe"]);
    expect(await names("lastContactType=SMS")).toEqual([]);
    expect(await names("lastCampaignType=RCS")).toEqual([]);
  });

  it.each([
    ["limit over 1000", "limit=1001"],
    ["a negative page", "page=-1"],
    ["an unknown sortBy", "sortBy=password"],
    ["a bad sortOrder", "sortOrder=random"],
    ["an unknown filter", "colour=red"],
    ["an unknown gender", "gender=ROBOT"],
    ["an unknown channel", "communicationSupported=FAX"],
    ["a malformed phone filter", "phoneNumber=12"],
    ["a non-boolean isTest", "isTest=maybe"],
    ["an empty listIds", "listIds="],
    ["non-numeric listIds", "listIds=a,b"],
  ])("answers 400 for %s", async (_n, qs) => {
    expectProblem(await a.api.get(`/contacts?${qs}`), 400);
  });

  it("never shows another account's contacts", async () => {
    const b = await t.newAccount(["CONTACTS"]);
    expect((await b.api.get("/contacts")).body.total).toBe(0);
    expect((await b.api.get("/contacts?search=corp")).body.data).toEqual([]);
  });
});
