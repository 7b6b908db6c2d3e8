/** Finished imports are kept IMPORT_RETENTION_DAYS (30) after they ended; the heartbeat purges older ones. */
import { randomUUID } from "node:crypto";
import { QueryTypes } from "sequelize";
import { startTestApp, type TestApp } from "../helpers/app";

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ services: ["gateway", "auth", "contacts"] });
});
afterAll(() => t?.stop());

it("deletes COMPLETED and FAILED imports that ended more than 30 days ago, and keeps the rest", async () => {
  const a = await t.newAccount(["CONTACTS"]);
  const days = (n: number) => new Date(Date.now() - n * 86400_000).toISOString();
  const rows: Array<{ name: string; status: string; created: string; finished: string | null }> = [
    { name: "completed-old", status: "COMPLETED", created: days(40), finished: days(40) },
    { name: "failed-old", status: "FAILED", created: days(32), finished: days(31) },
    { name: "failed-old-no-end", status: "FAILED", created: days(31), finished: null },
    { name: "completed-recent", status: "COMPLETED", created: days(35), finished: days(29) },
    { name: "failed-recent", status: "FAILED", created: days(1), finished: days(1) },
  ];
  const ids = new Map<string, string>(rows.map((r) => [r.name, randomUUID()]));
  for (const r of rows) {
    await t.db.sequelize.query(
      `INSERT INTO contact_imports (id, company_id, kind, file_name, file_size, file_sha256, status, node_id, created_at, finished_at)
       VALUES ($1, $2, 'csv', 'contacts.csv', 10, 'x', $3, 'gone-node', $4, $5)`,
      { bind: [ids.get(r.name), a.companyId, r.status, r.created, r.finished] },
    );
  }
  const importer = (t.app.broker.getLocalService("contacts") as unknown as { importer: { purgeFinished(): Promise<number> } }).importer;
  expect(await importer.purgeFinished()).toBeGreaterThanOrEqual(3);
  const left = await t.db.sequelize.query<{ id: string }>("SELECT id FROM contact_imports WHERE company_id = $1", {
    bind: [a.companyId],
    type: QueryTypes.SELECT,
  });
  const byId = new Map([...ids].map(([name, id]) => [id, name]));
  expect(left.map((r) => byId.get(r.id)).sort()).toEqual(["completed-recent", "failed-recent"]);
  expect((await a.api.get(`/contacts/imports/${ids.get("completed-old")}`)).status).toBe(404);
  expect((await a.api.get(`/contacts/imports/${ids.get("completed-recent")}`)).status).toBe(200);
  expect(await importer.purgeFinished()).toBe(0);
});
