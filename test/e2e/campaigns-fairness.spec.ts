/**
 * A campaigns node's sending slots (4) are shared between accounts (campaigns.runner.ts): one
 * partner's long campaigns never hold another partner's campaign back until they end. Campaigns are
 * taken in turns between accounts; an account holding more than its share gives a slot up at once to
 * an account with none; when more accounts send than there are slots, the campaign that has held
 * its slot longest gives it up after CAMPAIGN_SLICE_MS. Every campaign still sends each recipient
 * exactly once.
 */
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { campaignIn, messagesPerDestination, seedList, untilStatus } from "../helpers/campaigns";
import { eventually } from "../helpers/eventually";
import { q, sendingCampaigns } from "../../services/campaigns/campaigns.queries";

const SLOW = 30; // recipients of a slow campaign, sent one a second: it holds its slot for 30 s

/** A confirmed campaign of `a` to `n` new contacts, at most `rate` messages a second (null: as fast as the upstream takes them). */
async function confirmed(a: Account, n: number, rate: number | null): Promise<string> {
  const { listId } = await seedList(a.api, n);
  const made = await a.api.post("/campaigns", campaignIn([listId], { sendRatePerSecond: rate }));
  expect(made.status).toBe(201);
  const c = made.body;
  expect((await a.api.put(`/campaigns/${c.id}/confirm`)).status).toBe(202);
  return c.id as string;
}

const sending = async (a: Account, id: string) => (await a.api.get(`/campaigns/${id}`)).body as { status: string; progress: { sent: number } };

async function cancelAll(a: Account, ids: string[]): Promise<void> {
  for (const id of ids) await a.api.put(`/campaigns/${id}/cancel`);
}

/** An app of its own for the describe block that calls it, with CAMPAIGN_SLICE_MS `sliceMs`; answers its getter. */
function appWithSlice(sliceMs: number): () => TestApp {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      services: ["gateway", "auth", "contacts", "tracking", "campaigns", "simulator"],
      config: { simulatorProfile: "all-delivered", simulatorMaxDelayMs: 100, campaignPollMs: 50, campaignSliceMs: sliceMs, rateLimitRps: 10000 },
    });
  }, 60_000);
  afterAll(() => t?.stop());
  return () => t;
}

describe("an account holding every slot", () => {
  // A slice far longer than the test: only the share can free a slot here.
  const app = appWithSlice(600_000);

  it("takes SENDING campaigns in turns between accounts", async () => {
    const a = await app().newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
    const b = await app().newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
    // Sent one a second: still SENDING when the order is read.
    const mine = [await confirmed(a, 3, 1), await confirmed(a, 3, 1), await confirmed(a, 3, 1)];
    const theirs = await confirmed(b, 3, 1);
    await eventually(async () => {
      for (const [x, id] of [
        [a, mine[0]!],
        [a, mine[1]!],
        [a, mine[2]!],
        [b, theirs],
      ] as const)
        expect((await sending(x, id)).status).toBe("SENDING");
    });
    const order = (await sendingCampaigns(q(app().db.sequelize), 16)).map((c) => c.id).filter((id) => [...mine, theirs].includes(id));
    expect(order).toEqual([mine[0], theirs, mine[1], mine[2]]);
    await cancelAll(a, mine);
    await cancelAll(b, [theirs]);
  }, 60_000);

  it("gives a slot up at once to another account's campaign, which is sent while the first account's go on", async () => {
    const a = await app().newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
    const b = await app().newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
    const slow: string[] = [];
    for (let i = 0; i < 4; i++) slow.push(await confirmed(a, SLOW, 1));
    // All four hold the node's four slots.
    await eventually(
      async () => {
        for (const id of slow) expect((await sending(a, id)).progress.sent).toBeGreaterThan(0);
      },
      { timeoutMs: 15_000 },
    );
    const quick = await confirmed(b, 2, null);
    // Before the share, it waited for one of the slow ones to end (30 s).
    const done = await untilStatus(b, quick, "SENT", 12_000);
    expect(done.progress).toEqual({ audience: 2, sent: 2, failed: 0, skipped: 0 });
    // The first account's campaigns are still sending, none lost or sent twice so far.
    const states = await Promise.all(slow.map((id) => sending(a, id)));
    expect(states.map((s) => s.status)).toEqual(["SENDING", "SENDING", "SENDING", "SENDING"]);
    await cancelAll(a, slow);
    for (const id of slow) expect([...(await messagesPerDestination(app(), id)).values()].every((n) => n === 1)).toBe(true);
  }, 90_000);
});

describe("more accounts sending than slots", () => {
  const app = appWithSlice(1000);

  it("turns the slots over every CAMPAIGN_SLICE_MS, so that a fifth account's campaign is sent", async () => {
    const holders: { a: Account; id: string }[] = [];
    for (let i = 0; i < 4; i++) {
      const a = await app().newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
      holders.push({ a, id: await confirmed(a, SLOW, 1) });
    }
    await eventually(
      async () => {
        for (const h of holders) expect((await sending(h.a, h.id)).progress.sent).toBeGreaterThan(0);
      },
      { timeoutMs: 15_000 },
    );
    const e = await app().newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
    const quick = await confirmed(e, 2, null);
    const done = await untilStatus(e, quick, "SENT", 12_000);
    expect(done.progress.sent).toBe(2);
    // The one that gave its slot up is taken up again: every holder keeps sending.
    const before = await Promise.all(holders.map((h) => sending(h.a, h.id)));
    await eventually(
      async () => {
        const now = await Promise.all(holders.map((h) => sending(h.a, h.id)));
        expect(now.every((s, i) => s.progress.sent > before[i]!.progress.sent)).toBe(true);
      },
      { timeoutMs: 15_000 },
    );
    for (const h of holders) await cancelAll(h.a, [h.id]);
    for (const h of holders) expect([...(await messagesPerDestination(app(), h.id)).values()].every((n) => n === 1)).toBe(true);
  }, 90_000);
});

describe("a node's rate for all its campaigns (CAMPAIGN_NODE_RATE)", () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      services: ["gateway", "auth", "contacts", "tracking", "campaigns", "simulator"],
      config: { simulatorProfile: "all-delivered", simulatorMaxDelayMs: 100, campaignPollMs: 50, campaignNodeRate: 20, rateLimitRps: 10000 },
    });
  }, 60_000);
  afterAll(() => t?.stop());

  it("hands the upstream at most that many recipients a second, however many campaigns and accounts send, each recipient once", async () => {
    const made: { a: Account; id: string }[] = [];
    for (let i = 0; i < 5; i++) {
      const a = await t.newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
      const { listId } = await seedList(a.api, 20);
      made.push({ a, id: (await a.api.post("/campaigns", campaignIn([listId]))).body.id as string });
    }
    // Confirmed together: 100 recipients at 20 a second, the last batch cannot start before 4 s (unpaced: well under one).
    const t0 = Date.now();
    for (const m of made) expect((await m.a.api.put(`/campaigns/${m.id}/confirm`)).status).toBe(202);
    const done = await Promise.all(made.map((m) => untilStatus(m.a, m.id, "SENT", 30_000)));
    const last = Math.max(...done.map((d) => Date.parse(d.completedAt)));
    expect(last - t0).toBeGreaterThanOrEqual(3500);
    expect(done.map((d) => d.progress.sent)).toEqual([20, 20, 20, 20, 20]);
    for (const m of made) expect([...(await messagesPerDestination(t, m.id)).values()].every((n) => n === 1)).toBe(true);
  }, 60_000);
});
