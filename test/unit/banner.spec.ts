import { bannerMessage, bannerText, startupBanner } from "../../app/banner";
import { loadConfig } from "../../lib/config";

describe("the start-up banner", () => {
  it("names the API, docs, metrics and internal ingress URLs of a single process, the first-key command and the REPL", () => {
    const config = loadConfig({ DATA_DIR: "/srv/pgw", LOG_FORMAT: "json" });
    const banner = startupBanner({ config, port: 3100, internalPort: 3101, opsPort: null });
    expect(banner.urls).toEqual({
      api: "http://localhost:3100/api/partner-gateway/v1",
      docs: "http://localhost:3100/docs",
      metrics: "http://localhost:3100/metrics",
      ingress: "http://127.0.0.1:3101/internal/v1",
    });
    const text = bannerText(banner);
    expect(text.split("\n")[0]).toBe("Partner gateway running: all services in one process, PGlite in /srv/pgw");
    expect(text).toMatch(/^ {2}First key +npm run admin -- keys:create --company <companyId> --operations ALL$/m);
    expect(text).toMatch(/^ {2}REPL +npm run repl {2}\(in another terminal\)$/m);
    expect(text).not.toMatch(/\u001b/);
    expect(bannerMessage(banner)).not.toMatch(/\n/);
  });

  it("shows a cluster node only what it runs, and never the TRANSPORTER URL (it may carry credentials)", () => {
    const config = loadConfig(
      { TRANSPORTER: "nats://user:s3cret@nats:4222", DATABASE_URL: "postgres://db/pgw", SERVICES: "notifier", NODE_ID: "notifier-1", LOG_FORMAT: "json" },
      {},
      { runsServices: false },
    );
    const banner = startupBanner({ config, port: null, internalPort: null, opsPort: 3000 });
    expect(banner.urls).toEqual({ health: "http://localhost:3000/healthz/ready", metrics: "http://localhost:3000/metrics" });
    expect(banner.title).toBe("Partner gateway cluster node notifier-1 running notifier");
    expect(JSON.stringify(banner)).not.toMatch(/s3cret|nats:\/\//);
    expect(banner.repl).toBe("TRANSPORTER=<the same URL> npm run repl");
  });
});
