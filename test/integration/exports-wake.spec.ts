/**
 * An idle exports node does not look for work every second: it is woken when a job is queued
 * (exports.jobQueued) and polls only as a safety net (EXPORT_POLL_MS, 5 s by default). Idle, it
 * claims at most once in 3 s; a job queued starts at once, never at the next poll (set a minute
 * away here, so that only the wake can start the jobs within the test's time).
 */
import type { ExportRunner } from "../../services/exports/exports.runner";
import { startTestApp, type TestApp } from "../helpers/app";

const runnerOf = (t: TestApp) => (t.app.broker.getLocalService("exports") as unknown as { runner: ExportRunner }).runner;

describe("the exports node's claim loop", () => {
  it("idle, at the default safety poll, claims at most once in 3 s", async () => {
    const t = await startTestApp({ services: ["gateway", "auth", "tracking", "exports"] });
    try {
      const jobs = (runnerOf(t) as unknown as { jobs: { claim: (...a: unknown[]) => Promise<unknown[]> } }).jobs;
      const claim = jest.spyOn(jobs, "claim");
      await new Promise((r) => setTimeout(r, 3000));
      expect(claim.mock.calls.length).toBeLessThanOrEqual(1);
    } finally {
      await t.stop();
    }
  }, 30_000);

  it("starts a queued job when woken, not at the next poll (set a minute away)", async () => {
    const t = await startTestApp({ services: ["gateway", "auth", "tracking", "exports"], config: { exportPollMs: 60_000 } });
    try {
      const a = await t.newAccount(["EXPORTS"]);
      // Three in a row, each only by the wake: the poll would come after the test's 30 s.
      for (let i = 0; i < 3; i++) {
        const created = await a.api.post("/messages/history/export", {});
        expect(created.status).toBe(202);
        const id = created.body.exportId as string;
        for (;;) {
          const res = await a.api.get(`/exports/${id}`);
          if (res.status === 200) break;
          await new Promise((r) => setTimeout(r, 20));
        }
      }
    } finally {
      await t.stop();
    }
  }, 30_000);
});
