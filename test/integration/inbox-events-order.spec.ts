/**
 * A reader of inbox events never passes an id whose transaction has not ended (inbox.contract.ts):
 * each account counts its own event ids, and a writer holds the account's counter row from drawing
 * its ids to its commit, so the account's events commit in id order; a reader reads the counter and
 * the rows up to it in one statement and never waits. Without it, a stream reading
 * `id > Last-Event-ID` could pass an id whose transaction commits later, and lose it.
 */
import { randomUUID } from "node:crypto";
import { QueryTypes } from "sequelize";
import { appendInboxEvents, type InboxEvent } from "../../services/inbox/inbox.events";
import { createTestDatabase, itWithPostgres, type TestDatabase } from "../helpers/db";
import { migrate } from "../../lib/db/db";
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

itWithPostgres("numbers each account's events 1, 2, 3; its writers commit in turn; a reader never waits nor passes an open id", async () => {
  const { sequelize } = tdb.db;
  const a = `acc-${randomUUID()}`;
  const b = `acc-${randomUUID()}`;
  const first = await sequelize.transaction();
  await appendInboxEvents(sequelize, first, [event(a), event(a)]);
  // Another account's writer goes through at once, with ids of its own.
  await sequelize.transaction((tx) => appendInboxEvents(sequelize, tx, [event(b)]));
  expect(await ids(b)).toEqual([1]);
  // A second writer of the same account waits for the first one's commit (its ids come after).
  let secondDone = false;
  const second = sequelize.transaction((tx) => appendInboxEvents(sequelize, tx, [event(a)])).then(() => (secondDone = true));
  await new Promise((r) => setTimeout(r, 300));
  expect(secondDone).toBe(false);
  // Readers do not wait, and see nothing of the open transaction.
  const started = Date.now();
  expect(await eventsSince(sequelize, a, { after: 0, limit: 50, keptHours: 72 })).toEqual({ events: [], more: false, next: 0 });
  expect((await eventsSince(sequelize, b, { after: 0, limit: 50, keptHours: 72 })).events.map((e) => e.id)).toEqual([1]);
  expect(Date.now() - started).toBeLessThan(3000);
  await first.commit();
  await second;
  expect(await ids(a)).toEqual([1, 2, 3]);
  const read = await eventsSince(sequelize, a, { after: 0, limit: 50, keptHours: 72 });
  expect(read.events.map((e) => e.id)).toEqual([1, 2, 3]);
  expect(read.next).toBe(3);
  // A rolled-back writer's ids are not drawn: the next one goes on from 3.
  const gone = await sequelize.transaction();
  await appendInboxEvents(sequelize, gone, [event(a)]);
  await gone.rollback();
  await sequelize.transaction((tx) => appendInboxEvents(sequelize, tx, [event(a)]));
  expect(await ids(a)).toEqual([1, 2, 3, 4]);
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
    const page = await eventsSince(sequelize, company, { after, limit: 50, keptHours: 72 });
    seen.push(...page.events.map((e) => e.id));
    after = page.next;
    if (done && !page.more) break;
  }
  await writers;
  expect(seen).toEqual(await ids(company));
  expect(seen).toHaveLength(WRITERS * EACH);
});
