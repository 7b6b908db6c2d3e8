/**
 * The whole loop with webhook events: a campaign sent on the simulator produces, through the
 * tracking ingress and the notifier, one DELIVERY event per SMS part of every real recipient at the
 * account's webhook (a real HTTPS receiver), with the campaign's customerMessageIds, and none for
 * contacts of test lists (simulation: true).
 */
import { startTestApp, type TestApp } from "../helpers/app";
import { campaignIn, seedList, untilStatus } from "../helpers/campaigns";
import { startReceiver, testCa, type Receiver } from "../helpers/receiver";

let t: TestApp;
let r: Receiver;

beforeAll(async () => {
  const ca = await testCa();
  t = await startTestApp({
    services: ["gateway", "auth", "contacts", "tracking", "notifier", "campaigns", "simulator"],
    config: {
      webhookAllowPrivateTargets: true,
      extraCaCerts: ca.file,
      notifierPollMs: 20,
      simulatorProfile: "all-delivered",
      simulatorMaxDelayMs: 200,
      campaignPollMs: 50,
      rateLimitRps: 10000,
    },
  });
  r = await startReceiver();
}, 60_000);
afterAll(async () => {
  await t?.stop();
  await r?.close();
});

it("delivers one DELIVERY event per SMS part of each real recipient, none for test-list contacts", async () => {
  const a = await t.newAccount(["CAMPAIGNS", "CONTACTS", "SMS", "WEBHOOKS"]);
  expect((await a.api.post("/webhooks/delivery-status", { callbackUrl: r.url("/campaign") })).status).toBe(201);
  r.behave(() => ({ status: 200 }));
  const real = await seedList(a.api, 2);
  const test = await seedList(a.api, 1, { list: { isTest: true } });
  const c = (await a.api.post("/campaigns", campaignIn([real.listId, test.listId], { message: { text: `{{firstName}} ${"y".repeat(200)}` } }))).body;
  await a.api.put(`/campaigns/${c.id}/confirm`);
  await untilStatus(a, c.id, "SENT");
  const events = await r.waitFor(4, 20_000);
  await new Promise((res) => setTimeout(res, 1000)); // nothing more comes (no simulated message's event)
  expect(r.received).toHaveLength(4);
  const got = events.map((e) => e.json);
  expect(got.every((e) => e.eventType === "DELIVERY" && e.statusCode === 3 && e.totalParts === 2 && String(e.messageId).startsWith(`cmp-${c.id}-`))).toBe(true);
  const parts = got.map((e) => `${e.messageId}#${e.numPart}`).sort();
  expect(new Set(parts).size).toBe(4);
  expect(new Set(got.map((e) => e.messageId)).size).toBe(2);
  for (const id of test.contactIds) expect(got.some((e) => e.messageId === `cmp-${c.id}-${id}`)).toBe(false);
}, 60_000);
