import { QueryTypes } from "sequelize";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { email, listIn } from "../helpers/builders";
import { itWithPostgres, TEST_DATABASE_URL } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ services: ["gateway", "auth", "contacts"] });
});
afterAll(() => t?.stop());

let seq = 0;
/** `n` contacts of `a`, each with an email and a first name that sorts in creation order. */
async function contacts(a: Account, n: number, over: Record<string, unknown> = {}): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const res = await a.api.post("/contacts", { firstName: `C${String(++seq).padStart(4, "0")}`, email: email(), ...over });
    expect(res.status).toBe(201);
    ids.push(res.body.id);
  }
  return ids;
}
const list = async (a: Account, body: Record<string, unknown> = {}) => {
  const res = await a.api.post("/contacts/list", listIn(body));
  expect(res.status).toBe(201);
  return res.body as { id: number; name: string };
};

describe("contact lists", () => {
  it("creates a list (201, numeric id), gets it with its count, updates it without touching members", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const res = await a.api.post("/contacts/list", { name: "VIP", description: "big spenders", isTest: true });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      id: expect.any(Number),
      name: "VIP",
      description: "big spenders",
      isTest: true,
      createdAt: expect.any(String),
      updatedAt: expect.any(String),
      contactCount: 0,
      deleted: false,
      deletedAt: null,
    });
    const [c1, c2] = await contacts(a, 2);
    expect((await a.api.post("/contacts/list/contacts", { listIds: [res.body.id], contactIds: [c1, c2] })).status).toBe(201);
    expect((await a.api.get(`/contacts/list/${res.body.id}`)).body.contactCount).toBe(2);
    const put = await a.api.put(`/contacts/list/${res.body.id}`, { name: "VIP 2" });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({ name: "VIP 2", description: null, isTest: false, contactCount: 2 });
  });

  it.each([
    ["a missing name", {}],
    ["an empty name", { name: "" }],
    ["a wrong type", { name: "x", isTest: "yes" }],
    ["an unknown field", { name: "x", colour: "red" }],
  ])("answers 400 for %s", async (_n, body) => {
    const a = await t.newAccount(["CONTACTS"]);
    expectProblem(await a.api.post("/contacts/list", body), 400);
    expect((await a.api.get("/contacts/list")).body.total).toBe(0);
  });

  it("finds lists by search, id, contactIds and isTest, sorted by name, deleted ones only on request", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const alpha = await list(a, { name: "Alpha customers" });
    const beta = await list(a, { name: "beta testers", isTest: true });
    const gamma = await list(a, { name: "Gamma" });
    const [c] = await contacts(a, 1);
    await a.api.post("/contacts/list/contacts", { listIds: [beta.id, gamma.id], contactIds: [c] });
    const ids = async (qs: string) => (await a.api.get(`/contacts/list?${qs}`)).body.data.map((l: { id: number }) => l.id);
    expect(await ids("")).toEqual([alpha.id, beta.id, gamma.id]);
    expect(await ids("sortOrder=desc")).toEqual([gamma.id, beta.id, alpha.id]);
    expect(await ids("search=CUSTOM")).toEqual([alpha.id]);
    expect(await ids(`id=${alpha.id},${gamma.id}`)).toEqual([alpha.id, gamma.id]);
    expect(await ids(`contactIds=${c}`)).toEqual([beta.id, gamma.id]);
    expect(await ids("isTest=true")).toEqual([beta.id]);
    expect(await ids("isTest=false")).toEqual([alpha.id, gamma.id]);
    const del = await a.api.delete(`/contacts/list?ids=${gamma.id}`);
    expect(del.body).toEqual({ deleted: [gamma.id], notFound: [] });
    expect(await ids("")).toEqual([alpha.id, beta.id]);
    expect(await ids("includeDeleted=true")).toEqual([alpha.id, beta.id, gamma.id]);
    const page = await a.api.get("/contacts/list?limit=1&page=1");
    expect(page.body).toMatchObject({ page: 1, limit: 1, total: 2, totalPages: 2 });
    for (const qs of ["limit=1001", "page=-1", "sortBy=secret", "sortOrder=up", "includeDeleted=perhaps", "id=x"])
      expectProblem(await a.api.get(`/contacts/list?${qs}`), 400);
  });

  it("deletes lists softly and for good: associations go, contacts stay, 404 everywhere but get", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const b = await t.newAccount(["CONTACTS"]);
    const mine = await list(a);
    const theirs = await list(b);
    const cs = await contacts(a, 3);
    await a.api.post("/contacts/list/contacts", { listIds: [mine.id], contactIds: cs });
    const res = await a.api.delete(`/contacts/list?ids=${mine.id},${theirs.id},999999999`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ deleted: [mine.id], notFound: [theirs.id, 999999999] });
    const got = await a.api.get(`/contacts/list/${mine.id}`);
    expect(got.body).toMatchObject({ id: mine.id, deleted: true, deletedAt: expect.any(String), contactCount: 0 });
    expectProblem(await a.api.put(`/contacts/list/${mine.id}`, { name: "revive" }), 404);
    expectProblem(await a.api.get(`/contacts/list/${mine.id}/contacts`), 404);
    expectProblem(await a.api.post("/contacts/list/contacts", { listIds: [mine.id], contactIds: cs }), 400);
    expect((await a.api.delete(`/contacts/list?ids=${mine.id}`)).body).toEqual({ deleted: [], notFound: [mine.id] });
    expect((await a.api.get("/contacts")).body.total).toBe(3);
    expect((await b.api.get(`/contacts/list/${theirs.id}`)).body.deleted).toBe(false);
    expectProblem(await a.api.delete("/contacts/list"), 400);
  });

  it("answers 404 for another account's list on every path", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const b = await t.newAccount(["CONTACTS"]);
    const theirs = await list(b);
    expectProblem(await a.api.get(`/contacts/list/${theirs.id}`), 404);
    expectProblem(await a.api.put(`/contacts/list/${theirs.id}`, { name: "mine now" }), 404);
    expectProblem(await a.api.get(`/contacts/list/${theirs.id}/contacts`), 404);
    expectProblem(await a.api.get("/contacts/list/abc"), 400);
  });

  it("lists the contacts of a list with the contact filters, sorted by fullName", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const l = await list(a);
    const [x, y] = await contacts(a, 2, {});
    const [z] = await contacts(a, 1, { isTest: true });
    await contacts(a, 1); // not a member
    await a.api.post("/contacts/list/contacts", { listIds: [l.id], contactIds: [z, y, x] });
    const res = await a.api.get(`/contacts/list/${l.id}/contacts`);
    expect(res.body.data.map((c: { id: string }) => c.id)).toEqual([x, y, z]);
    expect(res.body).toMatchObject({ total: 3, page: 0, limit: 10 });
    expect((await a.api.get(`/contacts/list/${l.id}/contacts?isTest=true`)).body.data.map((c: { id: string }) => c.id)).toEqual([z]);
    expect((await a.api.get(`/contacts?listIds=${l.id}&isTest=false`)).body.total).toBe(2);
    expectProblem(await a.api.get(`/contacts/list/${l.id}/contacts?listIds=1`), 400);
    expectProblem(await a.api.get(`/contacts/list/${l.id}/contacts?limit=5000`), 400);
  });
});

describe("memberships", () => {
  it("adds contacts to lists, keeping existing associations without duplicates", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const l1 = await list(a);
    const l2 = await list(a);
    const [c1, c2, c3] = await contacts(a, 3);
    const first = await a.api.post("/contacts/list/contacts", { listIds: [l1.id], contactIds: [c1, c2] });
    expect(first.status).toBe(201);
    expect(first.body).toEqual({ ids: [expect.any(Number), expect.any(Number)], created: 2, existing: 0 });
    const again = await a.api.post("/contacts/list/contacts", { listIds: [l1.id, l2.id], contactIds: [c1, c2, c3] });
    expect(again.body).toMatchObject({ created: 4, existing: 2 });
    expect(again.body.ids).toHaveLength(4);
    const [{ n }] = await t.db.sequelize.query<{ n: string }>("SELECT count(*) AS n FROM contact_list_members WHERE list_id = :l", {
      replacements: { l: l1.id },
      type: QueryTypes.SELECT,
    });
    expect(Number(n)).toBe(3);
  });

  it("adds all contacts but the excluded ones in one go, and removes them the same way", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const l = await list(a);
    const cs = await contacts(a, 5);
    const add = await a.api.post("/contacts/list/contacts", { listIds: [l.id], allContacts: true, excludeIdsAllContacts: [cs[0]] });
    expect(add.body).toMatchObject({ created: 4, existing: 0 });
    expect((await a.api.get(`/contacts/list/${l.id}`)).body.contactCount).toBe(4);
    const del = await a.api.delete("/contacts/list/contacts", { body: { listIds: [l.id], allContacts: true, excludeIdsAllContacts: [cs[1]] } });
    expect(del.status).toBe(200);
    expect(del.body).toEqual({ deleted: 3 });
    expect((await a.api.get(`/contacts/list/${l.id}/contacts`)).body.data.map((c: { id: string }) => c.id)).toEqual([cs[1]]);
    expect((await a.api.get("/contacts")).body.total).toBe(5); // removing deletes no contact
  });

  it("accepts an empty contactIds beside allContacts: true, adding and removing all contacts (and still refuses it when allContacts is false)", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const l = await list(a);
    await contacts(a, 3);
    const add = await a.api.post("/contacts/list/contacts", { listIds: [l.id], allContacts: true, contactIds: [] });
    expect(add.status).toBe(201);
    expect(add.body).toMatchObject({ created: 3, existing: 0 });
    const del = await a.api.delete("/contacts/list/contacts", { body: { listIds: [l.id], allContacts: true, contactIds: [] } });
    expect(del.status).toBe(200);
    expect(del.body).toEqual({ deleted: 3 });
    expectProblem(await a.api.post("/contacts/list/contacts", { listIds: [l.id], allContacts: false, contactIds: [] }), 400);
    expectProblem(await a.api.post("/contacts/list/contacts", { listIds: [l.id], contactIds: [] }), 400);
    expect((await a.api.get(`/contacts/list/${l.id}`)).body.contactCount).toBe(0);
  });

  it("counts a repeated id once", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const l = await list(a);
    const [c] = await contacts(a, 1);
    const res = await a.api.post("/contacts/list/contacts", { listIds: [l.id, l.id], contactIds: [c, c!.toUpperCase()] });
    expect(res.body).toMatchObject({ created: 1, existing: 0 });
    expect((await a.api.get(`/contacts?listIds=${l.id},${l.id}`)).body.total).toBe(1);
  });

  it("removes named contacts from lists, and one association by id", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const l = await list(a);
    const cs = await contacts(a, 3);
    const added = await a.api.post("/contacts/list/contacts", { listIds: [l.id], contactIds: cs });
    // Association ids say nothing of which contact each is (the insert's order is the planner's).
    const one = await a.api.delete(`/contacts/list/contacts/${added.body.ids[1]}`);
    expect(one.status).toBe(200);
    expect(one.body).toEqual({ deleted: 1 });
    expectProblem(await a.api.delete(`/contacts/list/contacts/${added.body.ids[1]}`), 404);
    expect((await a.api.get(`/contacts/list/${l.id}`)).body.contactCount).toBe(2);
    const del = await a.api.delete("/contacts/list/contacts", { body: { listIds: [l.id], contactIds: cs } });
    expect(del.body).toEqual({ deleted: 2 });
    expect((await a.api.get(`/contacts/list/${l.id}`)).body.contactCount).toBe(0);
  });

  it("keeps accounts apart: foreign lists and contacts are a 400 naming them, foreign associations 404", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const b = await t.newAccount(["CONTACTS"]);
    const mine = await list(a);
    const theirs = await list(b);
    const [myContact] = await contacts(a, 1);
    const [theirContact] = await contacts(b, 1);
    const foreignList = await a.api.post("/contacts/list/contacts", { listIds: [mine.id, theirs.id], contactIds: [myContact] });
    expectProblem(foreignList, 400);
    expect(foreignList.body.errors).toEqual([{ path: "listIds", message: expect.stringContaining(String(theirs.id)) }]);
    const foreignContact = await a.api.post("/contacts/list/contacts", { listIds: [mine.id], contactIds: [myContact, theirContact] });
    expectProblem(foreignContact, 400);
    expect(foreignContact.body.errors).toEqual([{ path: "contactIds", message: expect.stringContaining(theirContact!) }]);
    expect((await a.api.get(`/contacts/list/${mine.id}`)).body.contactCount).toBe(0); // nothing half-written
    const theirAssoc = await b.api.post("/contacts/list/contacts", { listIds: [theirs.id], contactIds: [theirContact] });
    expectProblem(await a.api.delete(`/contacts/list/contacts/${theirAssoc.body.ids[0]}`), 404);
    const all = await a.api.post("/contacts/list/contacts", { listIds: [mine.id], allContacts: true });
    expect(all.body.created).toBe(1); // only the account's own contacts
  });

  it("refuses another account's lists or contacts on DELETE /contacts/list/contacts (400 naming them), changing nothing of either account", async () => {
    const a = await t.newAccount(["CONTACTS"]);
    const b = await t.newAccount(["CONTACTS"]);
    const mine = await list(a);
    const theirs = await list(b);
    const myContacts = await contacts(a, 2);
    const theirContacts = await contacts(b, 2);
    expect((await a.api.post("/contacts/list/contacts", { listIds: [mine.id], contactIds: myContacts })).status).toBe(201);
    expect((await b.api.post("/contacts/list/contacts", { listIds: [theirs.id], contactIds: theirContacts })).status).toBe(201);
    const members = async (who: Account, listId: number) =>
      (await who.api.get(`/contacts/list/${listId}/contacts`)).body.data.map((c: { id: string }) => c.id).sort();

    const foreignList = await a.api.delete("/contacts/list/contacts", { body: { listIds: [mine.id, theirs.id], contactIds: myContacts } });
    expectProblem(foreignList, 400);
    expect(foreignList.body.errors).toEqual([{ path: "listIds", message: expect.stringContaining(String(theirs.id)) }]);
    const foreignContact = await a.api.delete("/contacts/list/contacts", { body: { listIds: [mine.id], contactIds: [myContacts[0], theirContacts[0]] } });
    expectProblem(foreignContact, 400);
    expect(foreignContact.body.errors).toEqual([{ path: "contactIds", message: expect.stringContaining(theirContacts[0]!) }]);
    const allOfTheirs = await a.api.delete("/contacts/list/contacts", { body: { listIds: [theirs.id], allContacts: true } });
    expectProblem(allOfTheirs, 400);
    expect(allOfTheirs.body.errors).toEqual([{ path: "listIds", message: expect.stringContaining(String(theirs.id)) }]);

    // Nothing half-done on either side.
    expect(await members(a, mine.id)).toEqual([...myContacts].sort());
    expect(await members(b, theirs.id)).toEqual([...theirContacts].sort());
    expect((await b.api.get(`/contacts/list/${theirs.id}`)).body.contactCount).toBe(2);
  });

  it.each([
    ["an empty listIds", "POST", { listIds: [], contactIds: [] }],
    ["a missing listIds", "POST", { contactIds: [] }],
    ["no contactIds and allContacts false (add)", "POST", { listIds: [1] }],
    ["no contactIds and allContacts false (remove)", "DELETE", { listIds: [1], allContacts: false }],
    ["a malformed contact id", "POST", { listIds: [1], contactIds: ["123"] }],
    ["a non-numeric list id", "DELETE", { listIds: ["one"], contactIds: [] }],
  ])("answers 400 for %s", async (_n, method, body) => {
    const a = await t.newAccount(["CONTACTS"]);
    const l = await list(a);
    const fixed = JSON.parse(JSON.stringify(body).replace(/\[1\]/, `[${l.id}]`));
    expectProblem(await a.api.request(method, "/contacts/list/contacts", { body: fixed }), 400);
  });
});

describe("heavy operations (HEAVY_OPS_PER_ACCOUNT, statement_timeout)", () => {
  let h: TestApp;
  beforeAll(async () => {
    if (TEST_DATABASE_URL) h = await startTestApp({ services: ["gateway", "auth", "contacts"], config: { heavyOpsPerAccount: 1 } });
  });
  afterAll(() => h?.stop());

  /** Queries of other sessions waiting for a lock on contact_list_members. */
  const waiters = async () =>
    h.db.sequelize.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
          AND wait_event_type = 'Lock' AND query ILIKE '%contact_list_members%'`,
      { type: QueryTypes.SELECT },
    );
  /** Holds contact_list_members (EXCLUSIVE) in a transaction of its own until `release`. */
  async function holdMembers() {
    const tx = await h.db.sequelize.transaction();
    await h.db.sequelize.query("LOCK TABLE contact_list_members IN EXCLUSIVE MODE", { transaction: tx });
    return { release: () => tx.commit() };
  }

  itWithPostgres("refuses a second heavy operation of the same account with 429, while another account's runs", async () => {
    const a = await h.newAccount(["CONTACTS"]);
    const b = await h.newAccount(["CONTACTS"]);
    const la = (await a.api.post("/contacts/list", listIn())).body.id as number;
    const lb = (await b.api.post("/contacts/list", listIn())).body.id as number;
    await a.api.post("/contacts", { email: email() });
    await b.api.post("/contacts", { email: email() });
    const { release } = await holdMembers();
    const first = a.api.post("/contacts/list/contacts", { listIds: [la], allContacts: true });
    await eventually(async () => expect(await waiters()).toHaveLength(1));
    // Every slot of the account is taken: the other heavy operations of it are refused at once...
    const second = await a.api.delete("/contacts/list/contacts", { body: { listIds: [la], allContacts: true } });
    expectProblem(second, 429);
    expect(second.body).toMatchObject({ detail: "Too many heavy operations of this account are running; retry shortly.", retryAfter: expect.any(Number) });
    expect(second.headers.get("retry-after")).toBe(String(second.body.retryAfter));
    expect((await a.api.post("/contacts/custom-fields", { key: "tier", type: "TEXT" })).status).toBe(201);
    expectProblem(await a.api.delete("/contacts/custom-fields/tier"), 429);
    // ...while another account has slots of its own.
    const other = b.api.post("/contacts/list/contacts", { listIds: [lb], allContacts: true });
    await eventually(async () => expect(await waiters()).toHaveLength(2));
    await release();
    expect((await first).status).toBe(201);
    expect((await other).status).toBe(201);
    // The slot went with the transaction.
    expect((await a.api.delete("/contacts/list/contacts", { body: { listIds: [la], allContacts: true } })).body).toEqual({ deleted: 1 });
    expect((await a.api.delete("/contacts/custom-fields/tier")).status).toBe(204);
  });

  itWithPostgres("stops the SQL of a heavy operation when its call times out (statement_timeout)", async () => {
    const a = await h.newAccount(["CONTACTS"]);
    const l = (await a.api.post("/contacts/list", listIn())).body.id as number;
    await a.api.post("/contacts", { email: email() });
    const { release } = await holdMembers();
    try {
      const call = h.app.broker.call("contacts.addMembers", { listIds: [l], allContacts: true }, { timeout: 1500, meta: { companyId: a.companyId } });
      await expect(call).rejects.toThrow();
      // The statement was cancelled by the server, not left waiting for the lock after the caller gave up.
      await eventually(async () => expect(await waiters()).toHaveLength(0), { timeoutMs: 2000 });
    } finally {
      await release();
    }
    expect((await a.api.get(`/contacts/list/${l}`)).body.contactCount).toBe(0);
  });
});
