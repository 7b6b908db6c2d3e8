/**
 * Issue 30's small fixes outside the inbox, through HTTP: campaign statistics for a campaign id in
 * upper case, file names cut by character (extension kept), one media given in two letter cases
 * stored once in a campaign, one social profile per externalId whatever its Unicode form, and
 * HEAD on a media's content.
 */
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { messageIn } from "../helpers/builders";
import { campaignIn, seedList } from "../helpers/campaigns";
import { expectProblem } from "../helpers/expect";
import { gif, mediaForm, png, readContent, uploadMedia } from "../helpers/media";

let t: TestApp;
let a: Account;
beforeAll(async () => {
  t = await startTestApp({
    services: ["gateway", "auth", "contacts", "tracking", "campaigns", "media", "profiles", "inbox"],
    config: { rateLimitRps: 10000 },
  });
  a = await t.newAccount(["CAMPAIGNS", "CONTACTS", "SMS", "RCS", "MEDIA", "SOCIAL_PROFILES"]);
}, 60_000);
afterAll(() => t?.stop());

const upload = async (bytes: Buffer, name: string) => {
  const r = await uploadMedia(a, bytes, name);
  expect([r.status, r.text]).toEqual([201, expect.any(String)]);
  return r.body as { id: string; fileName: string };
};
const codePoints = (s: string) => [...s].length;
const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

describe("campaign statistics", () => {
  it("answers the same for a campaignId in upper case as in lower case", async () => {
    const { listId } = await seedList(a.api, 1);
    const c = (await a.api.post("/campaigns", campaignIn([listId]))).body;
    for (let i = 0; i < 3; i++) expect((await t.ingress.post("/messages", messageIn(a.companyId, { campaignId: c.id }))).status).toBe(202);
    const lower = await a.api.get(`/campaigns/stats?campaignId=${c.id}`);
    expect([lower.status, lower.body.total]).toEqual([200, 3]);
    const upper = await a.api.get(`/campaigns/stats?campaignId=${c.id.toUpperCase()}`);
    expect([upper.status, upper.body]).toEqual([200, lower.body]);
  });
});

describe("file names", () => {
  it("keeps a name of at most 255 characters whole, however many UTF-16 units its emoji take", async () => {
    const name = `${"😀".repeat(200)}.png`; // 204 characters, 404 UTF-16 units
    const m = await upload(png(), name);
    expect(m.fileName).toBe(name);
    expect((await a.api.get(`/media/${m.id}`)).body.fileName).toBe(name);
  });

  it("cuts a longer name between characters (no emoji split, no half of a pair) and keeps its extension", async () => {
    const long = await upload(png(), `${"a".repeat(300)}.png`);
    expect(long.fileName).toBe(`${"a".repeat(251)}.png`);
    // An emoji across the cut: the whole emoji goes, never half of it.
    const emoji = await upload(png(), `${"b".repeat(250)}😀😀${"c".repeat(20)}.jpeg`);
    expect(emoji.fileName).toBe(`${"b".repeat(250)}.jpeg`);
    // A family emoji (5 code points joined) across the cut goes whole too.
    const family = await upload(gif(), `${"d".repeat(248)}👨‍👩‍👧${"e".repeat(20)}.gif`);
    expect(family.fileName).toBe(`${"d".repeat(248)}.gif`);
    for (const m of [long, emoji, family]) {
      expect(codePoints(m.fileName)).toBeLessThanOrEqual(255);
      expect(loneSurrogate.test(m.fileName)).toBe(false);
      expect((await a.api.get(`/media/${m.id}`)).body.fileName).toBe(m.fileName);
    }
  });

  it("cuts a contact import's file name the same way", async () => {
    const name = `${"📇".repeat(200)}${"x".repeat(100)}.csv`; // 304 characters, 504 UTF-16 units
    const up = await a.api.request("POST", "/contacts/upload", { form: mediaForm("firstName,phoneNumber\nAna,+351911234567\n", name) });
    expect([up.status, up.text]).toEqual([202, expect.any(String)]);
    const imp = await a.api.get(`/contacts/imports/${up.body.importId}`);
    expect(imp.body.fileName).toBe(`${"📇".repeat(200)}${"x".repeat(51)}.csv`);
  });
});

describe("campaign media ids", () => {
  it("stores one media given in two letter cases once, in lower case", async () => {
    const { listId } = await seedList(a.api, 1);
    const m = await upload(png(), "one.png");
    const created = await a.api.post("/campaigns", campaignIn([listId], { channel: "RCS", message: { text: "Look", mediaIds: [m.id.toUpperCase(), m.id] } }));
    expect([created.status, created.text]).toEqual([201, expect.any(String)]);
    expect(created.body.message.mediaIds).toEqual([m.id]);
    const updated = await a.api.put(`/campaigns/${created.body.id}`, { message: { text: "Look", mediaIds: [m.id, m.id.toUpperCase()] } });
    expect([updated.status, updated.body.message?.mediaIds]).toEqual([200, [m.id]]);
    expect((await a.api.get(`/campaigns/${created.body.id}`)).body.message.mediaIds).toEqual([m.id]);
    const busy = await a.api.delete(`/media/${m.id}`);
    expectProblem(busy, 409);
    expect(busy.body.referencedBy).toEqual([`campaign:${created.body.id}`]);
  });
});

describe("social profiles", () => {
  it("treats an externalId in two Unicode forms as one (NFC): the second is a 409 naming the first", async () => {
    const nfc = "caf\u00e9-shop";
    const nfd = "cafe\u0301-shop";
    const first = await a.api.post("/social-profiles", { network: "INSTAGRAM", externalId: nfd, accessToken: "tok-1" });
    expect(first.status).toBe(201);
    expect(first.body.externalId).toBe(nfc);
    const again = await a.api.post("/social-profiles", { network: "INSTAGRAM", externalId: nfc, accessToken: "tok-2" });
    expectProblem(again, 409);
    expect(again.body.existingId).toBe(first.body.id);
    const list = await a.api.get("/social-profiles?limit=100");
    expect(list.body.data.filter((p: { externalId: string }) => p.externalId.normalize("NFC") === nfc)).toHaveLength(1);
  });
});

describe("HEAD /media/{id}/content", () => {
  const head = (id: string, headers: Record<string, string> = {}) =>
    fetch(`${a.api.baseUrl}/media/${id}/content`, { method: "HEAD", headers: { "x-api-key": a.key.apiKey, ...headers } });
  const CONTENT_HEADERS = ["content-type", "content-length", "etag", "accept-ranges", "cache-control", "x-content-type-options", "content-disposition"];

  it("answers GET's headers without the body; 304 to a current If-None-Match; a Range is ignored", async () => {
    const bytes = gif(4, 4);
    const m = await upload(bytes, "été.gif");
    const get = await readContent(a, m.id);
    const res = await head(m.id);
    expect(res.status).toBe(200);
    expect(Buffer.from(await res.arrayBuffer()).length).toBe(0);
    for (const h of CONTENT_HEADERS) expect([h, res.headers.get(h)]).toEqual([h, get.headers.get(h)]);
    expect(res.headers.get("content-length")).toBe(String(bytes.length));
    expect(res.headers.get("x-request-id")).toEqual(expect.any(String));
    const fresh = await head(m.id, { "if-none-match": get.headers.get("etag")! });
    expect([fresh.status, fresh.headers.get("etag")]).toEqual([304, get.headers.get("etag")]);
    const ranged = await head(m.id, { range: "bytes=0-1" });
    expect([ranged.status, ranged.headers.get("content-length"), ranged.headers.get("content-range")]).toEqual([200, String(bytes.length), null]);
  });

  it("answers 404 for an unknown or another account's media, 401 without a key", async () => {
    const m = await upload(png(), "mine.png");
    const b = await t.newAccount(["MEDIA"]);
    const theirs = await fetch(`${a.api.baseUrl}/media/${m.id}/content`, { method: "HEAD", headers: { "x-api-key": b.key.apiKey } });
    expect([theirs.status, theirs.headers.get("content-type")]).toEqual([404, expect.stringMatching(/problem\+json/)]);
    expect((await head("5f0c6a1e-3b7d-4c2a-9e51-8d4f2b6a7c10")).status).toBe(404);
    expect((await fetch(`${a.api.baseUrl}/media/${m.id}/content`, { method: "HEAD" })).status).toBe(401);
  });

  it("lists HEAD beside GET in the Allow of a 405 on the content path", async () => {
    const m = await upload(png(), "allow.png");
    const res = await a.api.request("PUT", `/media/${m.id}/content`);
    expectProblem(res, 405);
    expect(res.headers.get("allow")!.split(/,\s*/).sort()).toEqual(["GET", "HEAD"]);
  });
});
