/**
 * Custom fields are data, not code (contract section 9): a key named like a JavaScript built-in works
 * like any other key, and rendering never shows anything but the contact's value or the fallback
 * (issue 30, item 4: `{{customFields.constructor|fb}}` rendered "function Object() { [native code] }"
 * and was sent as 2 SMS parts).
 */
import { QueryTypes } from "sequelize";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { campaignIn, seedList, untilStatus } from "../helpers/campaigns";
import { mediaDouble } from "../helpers/media-double";

let t: TestApp;
let a: Account;
const media = mediaDouble();
const BUILT_INS = ["constructor", "toString", "valueOf", "hasOwnProperty"];

beforeAll(async () => {
  t = await startTestApp({
    services: ["gateway", "auth", "contacts", "tracking", "campaigns", "simulator"],
    extraServices: [media.schema],
    config: { simulatorProfile: "all-delivered", simulatorMaxDelayMs: 200, campaignPollMs: 50, rateLimitRps: 10000 },
  });
  a = await t.newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
  for (const key of BUILT_INS) expect((await a.api.post("/contacts/custom-fields", { key, type: "TEXT" })).status).toBe(201);
}, 60_000);
afterAll(() => t?.stop());

describe("custom fields named like built-ins", () => {
  it("refuses a key that is not a plain name (__proto__) at declaration", async () => {
    const res = await a.api.post("/contacts/custom-fields", { key: "__proto__", type: "TEXT" });
    expect(res.status).toBe(400);
    expect(res.body.errors[0].path).toBe("key");
  });

  it("stores, filters and shows them like any other key", async () => {
    const c = await a.api.post("/contacts", { phoneNumber: "+14155550190", customFields: { constructor: "Ctor", toString: "Str" } });
    expect(c.status).toBe(201);
    expect(c.body.customFields).toEqual({ constructor: "Ctor", toString: "Str" });
    const found = await a.api.get(`/contacts?customFields.constructor=Ctor`);
    expect(found.status).toBe(200);
    expect(found.body.data.map((x: { id: string }) => x.id)).toEqual([c.body.id]);
  });

  it("renders the fallback for a contact without the value, and the value for one with it, in the preview and in what is sent", async () => {
    const text = BUILT_INS.map((k) => `{{customFields.${k}|fb}}`).join(" ");
    const { listId, contactIds } = await seedList(a.api, 2, {
      contact: (i) =>
        i === 0 ? { firstName: "Without" } : { firstName: "With", customFields: { constructor: "C", toString: "T", valueOf: "V", hasOwnProperty: "H" } },
    });
    const created = await a.api.post("/campaigns", campaignIn([listId], { message: { text } }));
    expect(created.status).toBe(201);
    const id = created.body.id as string;

    const preview = await a.api.get(`/campaigns/${id}/preview`);
    expect(preview.status).toBe(200);
    expect(preview.body.audience).toBe(2);
    expect(preview.body.parts).toBe(2); // one part each
    const texts = new Map(preview.body.samples.map((s: { contactId: string; text: string }) => [s.contactId, s.text]));
    expect(texts.get(contactIds[0])).toBe("fb fb fb fb");
    expect(texts.get(contactIds[1])).toBe("C T V H");

    expect((await a.api.put(`/campaigns/${id}/confirm`)).status).toBe(202);
    await untilStatus(a, id, "SENT");
    const sent = await t.db.sequelize.query<{ text: string }>(`SELECT text FROM messages WHERE campaign_id = $1 ORDER BY text`, {
      bind: [id],
      type: QueryTypes.SELECT,
    });
    expect(sent.map((r) => r.text)).toEqual(["C T V H", "fb fb fb fb"]);
  });
});
