/**
 * A campaign that starts while no node serves the upstream adapter (UPSTREAM_MODE=simulator, the
 * simulator's node not up yet, as in a cluster starting or a restart) waits: its batches are given
 * back without an attempt, it neither pauses itself nor fails a recipient, and once a simulator node
 * comes it is sent, one message per recipient.
 */
import { startTestApp, uid, type TestApp } from "../helpers/app";
import { campaignIn, messagesPerDestination, seedList, untilStatus } from "../helpers/campaigns";
import { createTestDatabase, describeOverNats, TEST_NATS_URL, type TestDatabase } from "../helpers/db";
import { QueryTypes } from "sequelize";

describeOverNats("a campaign before any simulator node", () => {
  let tdb: TestDatabase;
  let core: TestApp;
  let simulator: TestApp | undefined;
  const namespace = uid("noupstream");
  const cluster = () => ({ transporter: TEST_NATS_URL, databaseUrl: tdb.db.url, internalTokenDisabled: true });

  beforeAll(async () => {
    tdb = await createTestDatabase();
    core = await startTestApp({
      services: ["gateway", "auth", "contacts", "tracking", "campaigns"],
      db: tdb.db,
      config: { ...cluster(), campaignPollMs: 50 },
      broker: { namespace, nodeID: `${namespace}-core` },
    });
  }, 60_000);

  afterAll(async () => {
    await simulator?.stop();
    await core?.stop();
    await tdb?.drop();
  });

  it("gives its batches back without an attempt until a simulator node comes, then sends each recipient once", async () => {
    const a = await core.newAccount(["CAMPAIGNS", "CONTACTS", "SMS"]);
    const { listId } = await seedList(a.api, 3);
    const c = (await a.api.post("/campaigns", campaignIn([listId]))).body;
    expect((await a.api.put(`/campaigns/${c.id}/confirm`)).status).toBe(202);
    // Batches are claimed and given back (once a second) for a while: three judged failures would have paused it.
    await new Promise((r) => setTimeout(r, 3000));
    const waiting = (await a.api.get(`/campaigns/${c.id}`)).body;
    expect(waiting).toMatchObject({ status: "SENDING", progress: { audience: 3, sent: 0, failed: 0, skipped: 0 } });
    const recipients = await tdb.db.sequelize.query<{ status: string; attempts: number }>(
      `SELECT status, attempts FROM campaign_recipients WHERE campaign_id = $1`,
      { bind: [c.id], type: QueryTypes.SELECT },
    );
    expect(recipients).toEqual([0, 1, 2].map(() => ({ status: "PENDING", attempts: 0 })));

    simulator = await startTestApp({
      services: ["simulator"],
      db: tdb.db,
      config: { ...cluster(), simulatorProfile: "all-delivered", simulatorMaxDelayMs: 100 },
      broker: { namespace, nodeID: `${namespace}-simulator` },
    });
    const done = await untilStatus(a, c.id, "SENT");
    expect(done.progress).toEqual({ audience: 3, sent: 3, failed: 0, skipped: 0 });
    expect([...(await messagesPerDestination(core, c.id)).values()]).toEqual([1, 1, 1]);
  }, 60_000);
});
