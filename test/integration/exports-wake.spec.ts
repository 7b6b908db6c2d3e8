/**
 * An idle exports node does not look for work every second: it is woken when a job is queued
 * (exports.jobQueued) and polls only as a safety net (EXPORT_POLL_MS, 5 s by default). Idle, it
 * claims at most once in 3 s; a job queued starts at once, never at the next poll.
 */
import type { ExportRunner } from "../../services/exports/exports.runner";
import { startTestApp, type TestApp } from "../helpers/app";

const runnerOf = (t: TestApp) => (t.app.broker.getLocalService("exports") as unknown as { runner: ExportRunner }).runner;

describe("the exports node's claim loop", () => {
  let t: TestApp;
  beforeAll(async () => {
    // The default safety poll (EXPORT_POLL_MS), as npm start runs it.
    t = await startTestApp({ services: ["gateway", "auth", "tracking", "exports"] });
  });
  afterAll(() => t?.stop());

  it("idle, claims at most once in 3 s; a queued job starts well before the next poll", async () => {
    const jobs = (runnerOf(t) as unknown as { jobs: { claim: (...a: unknown[]) => Promise<unknown[]> } }).jobs;
    const claim = jest.spyOn(jobs, "claim");
    await new Promise((r) => setTimeout(r, 3000));
    expect(claim.mock.calls.length).toBeLessThanOrEqual(1);

    const a = await t.newAccount(["EXPORTS"]);
    // Three in a row: with only the poll to start them, at least one would wait most of 5 s.
    for (let i = 0; i < 3; i++) {
      const started = Date.now();
      const created = await a.api.post("/messages/history/export", {});
      expect(created.status).toBe(202);
      const id = created.body.exportId as string;
      for (;;) {
        const res = await a.api.get(`/exports/${id}`);
        if (res.status === 200) break;
        // Each wait after a completion is a whole 5 s poll when only the poll starts exports.
        expect(Date.now() - started).toBeLessThan(3500);
        await new Promise((r) => setTimeout(r, 20));
      }
    }
  }, 30_000);
});
