/**
 * A campaigns node does not find work by polling: with the safety poll (CAMPAIGN_POLL_MS) at a
 * minute, a confirmed campaign starts at once (the campaigns.due broadcast) and a scheduled one at
 * its scheduledAt (the node's timer for the earliest scheduled campaign), neither at the next poll.
 */
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { campaignIn, seedList } from "../helpers/campaigns";
import { mediaDouble } from "../helpers/media-double";

let t: TestApp;
let a: Account;
const media = mediaDouble();

beforeAll(async () => {
  t = await startTestApp({
    services: ["gateway", "auth", "contacts", "tracking", "campaigns", "simulator"],
    extraServices: [media.schema],
    config: { simulatorProfile: "all-delivered", simulatorMaxDelayMs: 200, campaignPollMs: 60_000, rateLimitRps: 10000 },
  });
  a = await t.newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
}, 60_000);
afterAll(() => t?.stop());

/** Milliseconds from `from` until the campaign has sent every message (fails past `limitMs`). */
async function sentWithin(id: string, from: number, limitMs: number): Promise<number> {
  for (;;) {
    const c = (await a.api.get(`/campaigns/${id}`)).body;
    if (c.status === "SENT" || c.progress?.sent === c.audience) return Date.now() - from;
    if (Date.now() - from > limitMs) throw new Error(`campaign ${id} still ${c.status} (sent ${c.progress?.sent}) after ${limitMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

it("starts a confirmed campaign at once, not at the next poll", async () => {
  const { listId } = await seedList(a.api, 2);
  const c = (await a.api.post("/campaigns", campaignIn([listId]))).body;
  const confirmed = Date.now();
  expect((await a.api.put(`/campaigns/${c.id}/confirm`)).status).toBe(202);
  await sentWithin(c.id, confirmed, 5000);
}, 30_000);

it("starts a scheduled campaign at its scheduledAt, not at the next poll", async () => {
  const { listId } = await seedList(a.api, 2);
  const at = Date.now() + 1500;
  const c = (await a.api.post("/campaigns", campaignIn([listId], { scheduledAt: new Date(at).toISOString() }))).body;
  expect((await a.api.put(`/campaigns/${c.id}/confirm`)).status).toBe(202);
  await new Promise((r) => setTimeout(r, 500));
  expect((await a.api.get(`/campaigns/${c.id}`)).body.progress.sent).toBe(0);
  await sentWithin(c.id, at, 5000);
}, 30_000);
