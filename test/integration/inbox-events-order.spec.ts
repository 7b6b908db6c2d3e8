/**
 * Ids of one account's inbox events become visible in id order (inbox.contract.ts): a writer holds
 * the account's event lock from its insert to its commit, so a concurrent writer of the same account
 * draws its id only after that commit, while other accounts' writers never wait. Without it, a stream
 * reading `id > Last-Event-ID` could pass an id whose transaction commits later, and lose it.
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

itWithPostgres("makes a second writer of the same account wait for the first one's commit, and never one of another account", async () => {
  const { sequelize } = tdb.db;
  const first = await sequelize.transaction();
  await appendInboxEvents(sequelize, first, [event("acc-a")]);
  // Another account's writer goes through at once.
  await sequelize.transaction((tx) => appendInboxEvents(sequelize, tx, [event("acc-b")]));
  let secondDone = false;
  const second = sequelize.transaction((tx) => appendInboxEvents(sequelize, tx, [event("acc-a")])).then(() => (secondDone = true));
  await new Promise((r) => setTimeout(r, 300));
  expect(secondDone).toBe(false);
  expect(await ids("acc-a")).toEqual([]); // nothing of acc-a is visible yet
  await first.commit();
  await second;
  const [a1, a2] = await ids("acc-a");
  const [b1] = await ids("acc-b");
  // acc-b drew its id while the first writer held acc-a's lock: between them. acc-a's second id came after the first commit.
  expect(a1).toBeLessThan(b1!);
  expect(b1).toBeLessThan(a2!);
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
