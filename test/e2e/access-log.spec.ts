/**
 * The gateway's log names a signed download without its signature (a bearer credential for the
 * file): the access line of a download, served or refused, carries `.../download/{expires}/[redacted]`.
 */
import { loggedPath } from "../../services/gateway/gateway.answers";
import { loggerOptions } from "../../lib/observability/logger";
import { startTestApp, testConfig, type TestApp } from "../helpers/app";
import { eventually } from "../helpers/eventually";
import { capturedLogs } from "../helpers/logs";

const { lines: logLines, stream: logStream } = capturedLogs();

let t: TestApp;
beforeAll(async () => {
  const config = testConfig({ logLevel: "info" });
  t = await startTestApp({
    services: ["gateway", "auth", "contacts", "exports"],
    config: { logLevel: "info", exportWorkers: 1, publicBaseUrl: "https://api.example.test/" },
    broker: { logger: loggerOptions(config, logStream) },
  });
});
afterAll(() => t?.stop());

describe("loggedPath", () => {
  it("replaces a download's signature and drops the query", () => {
    expect(loggedPath("/api/partner-gateway/v1/exports/3f1c/download/1790000000/c2lnbmF0dXJl?x=1")).toBe(
      "/api/partner-gateway/v1/exports/3f1c/download/1790000000/[redacted]",
    );
    expect(loggedPath("/api/partner-gateway/v1/exports/3f1c/download/1790000000/c2ln/extra")).toBe(
      "/api/partner-gateway/v1/exports/3f1c/download/1790000000/[redacted]/extra",
    );
  });

  it("leaves every other path as it is", () => {
    for (const p of [
      "/api/partner-gateway/v1/exports/3f1c",
      "/api/partner-gateway/v1/exports/3f1c/download",
      "/api/partner-gateway/v1/contacts?limit=5",
      "/healthz",
    ]) {
      expect(loggedPath(p)).toBe(p.split("?")[0]);
    }
    expect(loggedPath(undefined)).toBe("");
  });
});

describe("the access log of a signed download", () => {
  it("names the download without its signature, whether served or refused", async () => {
    const a = await t.newAccount(["EXPORTS"]);
    const created = await a.api.post("/exports/contacts", {});
    expect(created.status).toBe(202);
    await eventually(
      async () => {
        const res = await a.api.get("/exports?limit=1000");
        expect(res.body.data.find((j: { exportId: string }) => j.exportId === created.body.exportId)?.status).toBe("COMPLETED");
      },
      { timeoutMs: 30_000, intervalMs: 25 },
    );
    const got = await a.api.get(`/exports/${created.body.exportId}`);
    expect(got.status).toBe(200);
    const link = got.body as { exportId: string; downloadUrl: string };
    const path = new URL(link.downloadUrl).pathname;
    const signature = path.split("/").pop()!;
    expect(signature.length).toBeGreaterThan(10);
    const served = await t.root.get(path);
    expect(served.status).toBe(200);
    const altered = `${path.slice(0, -signature.length)}${signature.slice(0, -2)}AA`;
    expect((await t.root.get(altered)).status).toBe(403);

    const lines = await eventually(
      () => {
        const found = logLines.filter((l) => l.msg === "request" && String(l.path).includes(`/exports/${link.exportId}/download/`));
        expect(found.map((l) => l.status).sort()).toEqual([200, 403]);
        return found;
      },
      { timeoutMs: 5_000, intervalMs: 25 },
    );
    for (const l of lines) expect(l.path).toBe(`${path.slice(0, -signature.length)}[redacted]`);
    const all = JSON.stringify(logLines);
    expect(all).not.toContain(signature);
    expect(all).not.toContain(signature.slice(0, -2));
  });
});
