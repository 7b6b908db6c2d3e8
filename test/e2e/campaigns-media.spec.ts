/**
 * Campaigns with the real media service (services/media, POST /media): a campaign's media cannot be
 * deleted while the campaign is not final (409 MEDIA_IN_USE naming `campaign:<id>`), and can once
 * it is (a deleted draft, a sent campaign).
 */
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { campaignIn, seedList, untilStatus } from "../helpers/campaigns";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";
import { png, uploadMedia } from "../helpers/media";

let t: TestApp;
let a: Account;

beforeAll(async () => {
  t = await startTestApp({
    services: ["gateway", "auth", "contacts", "tracking", "campaigns", "simulator", "media"],
    config: { simulatorProfile: "all-delivered", simulatorMaxDelayMs: 200, campaignPollMs: 50, rateLimitRps: 10000 },
  });
  a = await t.newAccount(["CAMPAIGNS", "CONTACTS", "RCS", "MEDIA"]);
}, 60_000);
afterAll(() => t?.stop());

const upload = async () => {
  const r = await uploadMedia(a, png(), "tiny.png");
  expect(r.status).toBe(201);
  return r.body.id as string;
};

it("holds a draft's media (409 MEDIA_IN_USE naming campaign:<id>) until the draft is deleted", async () => {
  const { listId } = await seedList(a.api, 1);
  const m = await upload();
  const created = await a.api.post("/campaigns", campaignIn([listId], { channel: "RCS", message: { text: "Look", mediaIds: [m] } }));
  expect([created.status, created.text]).toEqual([201, expect.anything()]);
  const c = created.body;
  const busy = await a.api.delete(`/media/${m}`);
  expectProblem(busy, 409);
  expect(busy.body.referencedBy).toEqual([`campaign:${c.id}`]);
  expect((await a.api.delete(`/campaigns/${c.id}`)).status).toBe(204);
  expect((await a.api.delete(`/media/${m}`)).status).toBe(204);
});

it("holds a sending campaign's media, and lets it go once the campaign is SENT", async () => {
  const { listId } = await seedList(a.api, 2);
  const m = await upload();
  const c = (await a.api.post("/campaigns", campaignIn([listId], { channel: "RCS", message: { text: "Look", mediaIds: [m] } }))).body;
  expect((await a.api.delete(`/media/${m}`)).body.referencedBy).toEqual([`campaign:${c.id}`]);
  await a.api.put(`/campaigns/${c.id}/confirm`);
  await untilStatus(a, c.id, "SENT");
  await eventually(async () => expect((await a.api.delete(`/media/${m}`)).status).toBe(204));
});
