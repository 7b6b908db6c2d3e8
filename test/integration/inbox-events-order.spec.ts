/**
 * A reader of inbox events never passes an id whose transaction has not ended (inbox.contract.ts):
 * writers hold the account's event lock in shared mode from their insert to their commit (they never
 * wait for each other), and a reader's barrier takes it in exclusive mode for one statement and reads
 * no further than the id sequence stood then. Without it, a stream reading `id > Last-Event-ID`
 * could pass an id whose transaction commits later, and lose it.
 */
import { randomUUID } from "node:crypto";
import { QueryTypes } from "sequelize";
import { appendInboxEvents, type InboxEvent } from "../../services/inbox/inbox.events";
import { createTestDatabase, itWithPostgres, type TestDatabase } from "../helpers/db";
import { migrate } from "../../lib/db";
import { eventsSince } from "../../services/inbox/inbox.live.queries";

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase();
  await migrate(tdb.db);
});
afterAll(() => tdb?.drop());

const event = (companyId: string): InboxEvent => ({ companyId, conversationId: randomUUID(), type: "message.created", data: {} });
const ids = async (companyId: string) =>
  (
    await tdb.db.sequelize.query<{ id: string }>(`SELECT id FROM inbox_events WHERE company_id = $1 ORDER BY id`, {
      bind: [companyId],
      type: QueryTypes.SELECT,
    })
  ).map((r) => Number(r.id));

itWithPostgres("lets writers of one account run side by side, while a reader waits for the one in flight and never passes its id", async () => {
  const { sequelize } = tdb.db;
  const first = await sequelize.transaction();
  await appendInboxEvents(sequelize, first, [event("acc-a")]);
  // A second writer of the same account (and one of another) goes through at once.
  await sequelize.transaction((tx) => appendInboxEvents(sequelize, tx, [event("acc-a")]));
  await sequelize.transaction((tx) => appendInboxEvents(sequelize, tx, [event("acc-b")]));
  const [second] = await ids("acc-a");
  let read: Awaited<ReturnType<typeof eventsSince>> | null = null;
  const reading = eventsSince(sequelize, "acc-a", { after: 0, limit: 50 }).then((r) => (read = r));
  await new Promise((r) => setTimeout(r, 300));
  // The second writer's event is committed, but the first one's (a lower id) is not: the reader waits.
  expect(read).toBeNull();
  await first.commit();
  await reading;
  const all = await ids("acc-a");
  expect(all).toHaveLength(2);
  expect(all[1]).toBe(second);
  expect(read!.events.map((e) => e.id)).toEqual(all);
  expect(read!.next).toBeGreaterThanOrEqual(second!);
  // Another account's reader does not wait for acc-a's writers.
  const other = await sequelize.transaction();
  await appendInboxEvents(sequelize, other, [event("acc-a")]);
  const started = Date.now();
  expect((await eventsSince(sequelize, "acc-b", { after: 0, limit: 50 })).events).toHaveLength(1);
  expect(Date.now() - started).toBeLessThan(1000);
  await other.rollback();
});

itWithPostgres("lets a reader that follows `next` see every event while writers of the account commit concurrently", async () => {
  const { sequelize } = tdb.db;
  const company = `acc-${randomUUID()}`;
  const WRITERS = 4;
  const EACH = 150;
  let writing = true;
  const writers = Promise.all(
    Array.from({ length: WRITERS }, async () => {
      for (let i = 0; i < EACH; i++) await sequelize.transaction((tx) => appendInboxEvents(sequelize, tx, [event(company)]));
    }),
  ).finally(() => (writing = false));
  const seen: number[] = [];
  let after = 0;
  for (;;) {
    const done = !writing;
    const page = await eventsSince(sequelize, company, { after, limit: 50 });
    seen.push(...page.events.map((e) => e.id));
    after = page.next;
    if (done && !page.more) break;
  }
  await writers;
  expect(seen).toEqual(await ids(company));
  expect(seen).toHaveLength(WRITERS * EACH);
});
