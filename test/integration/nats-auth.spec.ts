/**
 * NATS that requires a login (issue: the bus is trusted blindly): a NATS server of the test's own,
 * started with a user and password on a free loopback port, carries a two-node cluster whose nodes
 * log in with NATS_USER/NATS_PASSWORD or the URL's credentials; a connection with no login or a
 * wrong one is refused by the server.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import net from "node:net";
import { connect } from "nats";
import { loadConfig, type Config } from "../../lib/config";
import { natsOptions } from "../../lib/bus/nats-transporter";
import { startTestApp, uid, type TestApp } from "../helpers/app";
import { eventually } from "../helpers/eventually";
import { createTestDatabase, REQUIRE_REAL, TEST_DATABASE_URL, type TestDatabase } from "../helpers/db";

const NATS_SERVER = "/usr/sbin/nats-server";
const USER = "pgw";
const PASSWORD = "a-long-enough-nats-password-123";

const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });

async function waitForPort(port: number, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const open = await new Promise<boolean>((resolve) => {
      const c = net.connect(port, "127.0.0.1", () => {
        c.end();
        resolve(true);
      });
      c.once("error", () => resolve(false));
    });
    if (open) return;
    if (Date.now() > deadline) throw new Error(`nats-server did not listen on ${port}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The node's NATS options as production builds them from these variables. */
const optionsOf = (env: NodeJS.ProcessEnv) => natsOptions(loadConfig(env, {}, { runsServices: false }) as Config);

const canRun = existsSync(NATS_SERVER) && !!TEST_DATABASE_URL;
const describeWithNatsServer = canRun
  ? describe
  : REQUIRE_REAL
    ? (name: string) =>
        it(`${name}: runs with ${NATS_SERVER} and PostgreSQL`, () => {
          throw new Error(`REQUIRE_REAL_SERVICES=1 but ${existsSync(NATS_SERVER) ? "TEST_DATABASE_URL is not set" : `${NATS_SERVER} is missing`}`);
        })
    : (name: string) => describe(name, () => it.todo(`needs ${NATS_SERVER} and TEST_DATABASE_URL`));

describeWithNatsServer("NATS with a login", () => {
  let server: ChildProcess;
  let port: number;
  let tdb: TestDatabase;
  const apps: TestApp[] = [];

  beforeAll(async () => {
    port = await freePort();
    server = spawn(NATS_SERVER, ["-a", "127.0.0.1", "-p", String(port), "--user", USER, "--pass", PASSWORD], { stdio: "ignore" });
    await waitForPort(port);
    tdb = await createTestDatabase();
  }, 30_000);

  afterAll(async () => {
    for (const a of apps) await a.stop().catch(() => undefined);
    server?.kill("SIGTERM");
    await tdb?.drop();
  });

  it("refuses a connection without the login, or with a wrong one", async () => {
    for (const env of [{}, { NATS_USER: USER, NATS_PASSWORD: "wrong-password-wrong-password" }] as NodeJS.ProcessEnv[]) {
      const opts = optionsOf({ TRANSPORTER: `nats://127.0.0.1:${port}`, ...env });
      await expect(connect({ ...opts, maxReconnectAttempts: 0, reconnect: false, timeout: 3000 } as never)).rejects.toThrow(/authorization/i);
    }
  });

  it("carries a cluster whose nodes log in with NATS_USER/NATS_PASSWORD or the URL's credentials", async () => {
    const namespace = uid("natsauth");
    const common = { databaseUrl: tdb.db.url, internalToken: "nats-auth-test-token-0123" };
    // The auth node logs in through the variables, the gateway node through the URL.
    const withVariables = { ...common, transporter: `nats://127.0.0.1:${port}`, natsUser: USER, natsPassword: PASSWORD };
    const withUrl = { ...common, transporter: `nats://${USER}:${encodeURIComponent(PASSWORD)}@127.0.0.1:${port}` };
    const backend = await startTestApp({ services: ["auth"], db: tdb.db, config: withVariables, broker: { namespace, nodeID: `${namespace}-auth` } });
    apps.push(backend);
    const gw = await startTestApp({ services: ["gateway"], db: tdb.db, config: withUrl, broker: { namespace, nodeID: `${namespace}-gw` } });
    apps.push(gw);
    const account = await gw.newAccount(["AUTHENTICATION"]);
    // GET /authentication/me is answered by the auth node: the call crossed the logged-in bus.
    const me = await eventually(async () => {
      const res = await account.api.get("/authentication/me");
      expect(res.status).toBe(200);
      return res;
    });
    expect(me.body.companyId).toBe(account.companyId);
    expect(gw.app.broker.registry.getNodeList({ onlyAvailable: true, withServices: false }).map((n: { id: string }) => n.id)).toContain(`${namespace}-auth`);
  }, 60_000);
});
