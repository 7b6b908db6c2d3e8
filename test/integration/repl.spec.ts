/**
 * `npm run repl` beside a running single-process `npm start`: the REPL joins it over the Unix socket
 * the service listens on inside DATA_DIR (lib/repl/repl-transporter.ts, lib/repl/repl-link.ts),
 * driven through stdin as a person would; every refusal is one line. Another user (a process that
 * shares the machine or its network, not DATA_DIR) cannot connect, and no TCP port is opened for it.
 * The transporter itself, in-process: test/integration/repl-transporter.spec.ts.
 */
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from "node:child_process";
import { createHash, randomUUID } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { replInfoOf, replSocketOf } from "../../lib/repl/repl-link";
import { startTestApp, uid, waitForRoutes, type TestApp } from "../helpers/app";
import { createTestDatabase, describeOverNats, TEST_NATS_URL, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { freePort } from "../helpers/ports";
import { seededDataDir } from "../helpers/template-db";
import { productScript } from "../helpers/product-build";

const ROOT = path.join(__dirname, "../..");
const TSX = path.join(ROOT, "node_modules/tsx/dist/cli.mjs");
const tmpDir = () => fs.mkdtempSync(path.join(os.tmpdir(), "pgw-repl-"));

/** The environment of a user's shell: nothing of the test run's own configuration. */
const cleanEnv = () =>
  Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|DATA_DIR|TRANSPORTER|SERVICES|PORT|TEST_|LOG_|NODE_ID)/.test(k)));

/** A process of ours whose output is kept, killed at the end whatever happens. */
interface Proc {
  child: ChildProcessWithoutNullStreams;
  out(): string;
  err(): string;
  exited: Promise<number | null>;
  /** The exit code, or a failure naming the output if it does not exit within `ms`. */
  exitCode(ms?: number): Promise<number | null>;
  /** Resolves with the output once it matches `re` (from the start of the output). */
  waitFor(re: RegExp, ms?: number): Promise<string>;
  kill(): Promise<void>;
}

const running = new Set<Proc>();

function run(args: string[], env: Record<string, string>, as: { uid?: number; gid?: number } = {}): Proc {
  const child = spawn(process.execPath, args, { cwd: ROOT, env: { ...cleanEnv(), ...env }, ...as });
  let out = "";
  let err = "";
  child.stdout.on("data", (d) => (out += String(d).replace(/\u001b\[[0-9;]*m/g, "")));
  child.stderr.on("data", (d) => (err += d));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  const proc: Proc = {
    child,
    out: () => out,
    err: () => err,
    exited,
    async exitCode(ms = 20000) {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`still running after ${ms} ms:\n${out}\nstderr:\n${err}`)), ms);
      });
      try {
        return await Promise.race([exited, late]);
      } finally {
        clearTimeout(timer);
      }
    },
    async waitFor(re, ms = 20000) {
      const deadline = Date.now() + ms;
      while (!re.test(out)) {
        if (Date.now() > deadline) throw new Error(`waited ${ms} ms for ${re} in:\n${out}\nstderr:\n${err}`);
        if (child.exitCode !== null) throw new Error(`exited ${child.exitCode} before ${re}:\n${out}\nstderr:\n${err}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      return out;
    },
    async kill() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM");
        const timer = setTimeout(() => child.kill("SIGKILL"), 10000);
        await exited;
        clearTimeout(timer);
      }
      running.delete(proc);
    },
  };
  running.add(proc);
  void exited.then(() => running.delete(proc));
  return proc;
}

afterAll(async () => {
  await Promise.all([...running].map((p) => p.kill()));
});

const repl = (env: Record<string, string>) => run([TSX, path.join(ROOT, "scripts/repl.ts")], { LOG_LEVEL: "warn", ...env });

/** Root may act as another user (nobody); the kernel's check is what these tests are about. */
const NOBODY = 65534;

/** The TCP ports process `pid` listens on (Linux: its socket inodes in /proc/net/tcp and tcp6). */
function listeningTcpPorts(pid: number): number[] {
  const inodes = new Set(
    fs
      .readdirSync(`/proc/${pid}/fd`)
      .map((fd) => /^socket:\[(\d+)\]$/.exec(fs.readlinkSync(`/proc/${pid}/fd/${fd}`))?.[1])
      .filter(Boolean),
  );
  return ["/proc/net/tcp", "/proc/net/tcp6"]
    .flatMap((f) => fs.readFileSync(f, "utf8").split("\n").slice(1))
    .map((l) => l.trim().split(/\s+/))
    .filter((c) => c[3] === "0A" && inodes.has(c[9]))
    .map((c) => parseInt(c[1]!.split(":")[1]!, 16))
    .sort((x, y) => x - y);
}

describe("npm run repl beside a running npm start", () => {
  let dir: string;
  let service: Proc;
  let ports: number[];
  const nodeId = `svc-${process.pid}`;
  let apiKey: string;

  beforeAll(async () => {
    dir = await seededDataDir("pgw-repl-");
    const port = await freePort();
    const internalPort = await freePort();
    ports = [port, internalPort];
    service = run(["--import", "tsx", path.join(ROOT, "scripts/start.ts")], {
      DATA_DIR: dir,
      PORT: String(port),
      INTERNAL_PORT: String(internalPort),
      NODE_ID: nodeId,
      LOG_LEVEL: "warn",
      HOME: dir,
    });
    await waitForRoutes(`http://127.0.0.1:${port}`, 150000);
    await eventually(() => expect(fs.existsSync(replInfoOf(dir))).toBe(true));
    // The key is the setup, not the subject: the admin command compiled (product-build.ts).
    const admin = run([...productScript("admin"), "keys:create", "--company", "repl-co", "--operations", "AUTHENTICATION"], { DATA_DIR: dir });
    expect(await admin.exitCode(60000)).toBe(0);
    apiKey = JSON.parse(admin.out()).apiKey;
  }, 240000);

  afterAll(async () => {
    await service?.kill();
  });

  it("listens on a socket of its own user in DATA_DIR, and on no TCP port for the REPL", () => {
    const socket = replSocketOf(dir);
    expect(fs.statSync(path.dirname(socket)).mode & 0o777).toBe(0o700);
    expect(fs.statSync(socket).isSocket()).toBe(true);
    expect(fs.statSync(socket).mode & 0o777).toBe(0o600);
    expect(fs.statSync(replInfoOf(dir)).mode & 0o777).toBe(0o600);
    expect(JSON.parse(fs.readFileSync(replInfoOf(dir), "utf8"))).toMatchObject({ pid: service.child.pid, nodeID: nodeId, socket });
    // The process listens on its two HTTP ports and the embedded database's loopback port, nothing else.
    const db = JSON.parse(fs.readFileSync(path.join(dir, "embedded-db.json"), "utf8"));
    expect(listeningTcpPorts(service.child.pid!)).toEqual([...ports, db.port].sort((x, y) => x - y));
  });

  it("joins it through stdin: nodes lists both, call answers from the live service, quit leaves", async () => {
    const r = repl({ DATA_DIR: dir, HOME: dir });
    await r.waitFor(/mol \$/);
    r.child.stdin.write("nodes\n");
    await r.waitFor(new RegExp(`${nodeId}[\\s\\S]*ONLINE|ONLINE[\\s\\S]*${nodeId}`));
    expect(r.out()).toMatch(/║ repl-\S+ \(\*\)/);
    const keyHash = createHash("sha256").update(apiKey).digest("hex");
    r.child.stdin.write(`call auth.verify --keyHash ${keyHash}\n`);
    await r.waitFor(/companyId: '?repl-co'?/);
    // dcall: the service's own $node.health, answered by its process.
    r.child.stdin.write(`dcall ${nodeId} $node.health\n`);
    await r.waitFor(new RegExp(`process: \\{\\s+pid: ${service.child.pid},`));
    r.child.stdin.write("services\n");
    await r.waitFor(/║ campaigns\s/);
    // `actions` shows each action's parameter names (its JSON schema's properties), not schema keywords.
    r.child.stdin.write("actions --filter tracking.status\n");
    await r.waitFor(/║ tracking\.status\s.*│ customerMessageId, channel +║/);
    expect(r.out()).not.toMatch(/║ tracking\.status\s.*additionalProperties/);
    // The operator's commands ask the live process too.
    r.child.stdin.write("cluster\n");
    await r.waitFor(new RegExp(`^${nodeId}\\s+auth, campaigns, contacts, exports, gateway, inbox, media, notifier, profiles, simulator, tracking$`, "m"));
    r.child.stdin.write("keys\n");
    await r.waitFor(new RegExp(`gateway node\\s+cached keys\\n${nodeId}\\s+\\d+$`, "m"));
    r.child.stdin.write("quit\n");
    expect(await r.exitCode()).toBe(0);
    expect(r.err()).not.toMatch(/\n\s+at /);
    // The service goes on serving.
    expect(service.child.exitCode).toBeNull();
  });

  it("refuses, in one line, a REPL whose DATA_DIR names the service but holds no socket of it", async () => {
    const other = tmpDir();
    fs.copyFileSync(replInfoOf(dir), replInfoOf(other));
    const r = repl({ DATA_DIR: other, HOME: other });
    expect(await r.exitCode()).toBe(1);
    const lines = r.err().trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/does not answer on .*repl\.sock: if it is stopping, start it again/);
    expect(r.out()).not.toMatch(/mol \$/);
  });

  it("lets no other user connect, even when DATA_DIR itself is open to all", async () => {
    // What the kernel checks on connect: the socket's folder is ours and 0700, the socket 0600.
    const socket = replSocketOf(dir);
    const run_ = fs.statSync(path.dirname(socket));
    expect({ uid: run_.uid, mode: run_.mode & 0o777 }).toEqual({ uid: process.getuid!(), mode: 0o700 });
    expect(fs.statSync(socket).mode & 0o777).toBe(0o600);
    // Only root can act as another user here (CI runs as root); others stop at the modes above.
    if (process.getuid?.() !== 0) return;
    fs.chmodSync(dir, 0o755);
    try {
      // A raw connect, as a sidecar or another local user would try: the kernel refuses it.
      const probe = `require("net").connect(${JSON.stringify(replSocketOf(dir))}).on("connect", () => { console.log("CONNECTED"); process.exit(0); }).on("error", (e) => { console.log(e.code); process.exit(0); });`;
      const raw = spawnSync(process.execPath, ["-e", probe], { uid: NOBODY, gid: NOBODY, cwd: "/", encoding: "utf8", env: {} });
      expect(raw.stdout.trim()).toBe("EACCES");
      // The REPL, run as that user: one line, nothing joined.
      const r = run([TSX, path.join(ROOT, "scripts/repl.ts")], { DATA_DIR: dir, HOME: os.tmpdir(), LOG_LEVEL: "warn" }, { uid: NOBODY, gid: NOBODY });
      expect(await r.exitCode(60000)).toBe(1);
      expect(r.err().trim().split("\n")).toEqual([expect.stringMatching(/permission denied\. Run the REPL as the user that runs the service/)]);
      expect(r.out()).not.toMatch(/mol \$/);
    } finally {
      fs.chmodSync(dir, 0o700);
    }
  }, 70000);

  it("takes the socket away when the service stops", async () => {
    service.child.kill("SIGTERM");
    expect(await service.exitCode(30000)).toBe(0);
    expect(fs.existsSync(replSocketOf(dir))).toBe(false);
    expect(fs.existsSync(replInfoOf(dir))).toBe(false);
  }, 40000);
});

describeOverNats("the operator's commands, on a cluster over NATS", () => {
  let tdb: TestDatabase;
  let node: TestApp;
  const namespace = uid("repl");
  const nodeID = `${namespace}-all`;
  const company = uid("ops");
  let campaignId: string;
  let exportIds: { processing: string; queued: string };

  beforeAll(async () => {
    tdb = await createTestDatabase();
    // Campaigns polled once a minute: the SENDING row the test writes stays as written meanwhile.
    node = await startTestApp({
      services: ["gateway", "auth", "tracking", "notifier", "exports", "campaigns", "contacts"],
      db: tdb.db,
      config: { transporter: TEST_NATS_URL, databaseUrl: tdb.db.url, campaignPollMs: 60000 },
      broker: { namespace, nodeID },
    });
    // State to see. An event due in the outbox, of an account without a webhook (no notifier claims
    // it): written as tracking writes one, since tracking writes none for such an account.
    await tdb.db.sequelize.query(
      `INSERT INTO outbox_events (company_id, channel, event_type, message_id, num_part, payload, message_sent_at)
       VALUES ($1, 'SMS', 'DELIVERY', $2, 1, '{"eventType":"DELIVERY"}', now())`,
      { bind: [company, uid("m")] },
    );
    // An export running on a node elsewhere, so the account's next one waits QUEUED.
    const [processing, queued] = [randomUUID(), randomUUID()];
    exportIds = { processing, queued };
    await tdb.db.sequelize.query(
      `INSERT INTO export_jobs (id, company_id, type, filters, status, node_id, leased_until, created_at)
       VALUES ($1, $3, 'CONTACTS', '{}', 'PROCESSING', 'elsewhere', now() + interval '1 hour', now() - interval '90 seconds'),
              ($2, $3, 'CONTACTS', '{}', 'QUEUED', NULL, NULL, now() - interval '30 seconds')`,
      { bind: [processing, queued, company] },
    );
    // A campaign sending: 10 recipients, 4 sent, 1 failed.
    const [c] = (await tdb.db.sequelize.query(
      `INSERT INTO campaigns (id, company_id, name, channel, status, contact_list_ids, text, audience, sent, failed, confirmed_at, updated_at)
       VALUES (gen_random_uuid(), $1, 'ops', 'SMS', 'SENDING', '{}', 'hi', 10, 4, 1, now(), now() - interval '5 minutes') RETURNING id`,
      { bind: [company] },
    )) as unknown as [{ id: string }[]];
    campaignId = c[0]!.id;
    // One key used once: the gateway caches it.
    const a = await node.newAccount(["AUTHENTICATION"]);
    expect((await a.api.get("/authentication/me")).status).toBe(200);
  }, 90000);

  afterAll(async () => {
    await node?.stop();
    await tdb?.drop();
  });

  const join = async () => {
    const dir = tmpDir();
    const r = repl({ TRANSPORTER: TEST_NATS_URL!, NAMESPACE: namespace, HOME: dir });
    await r.waitFor(/mol \$/, 30000);
    return r;
  };

  /** Sends `command` until the output (from `from` on) matches `re`: the registry may still be filling. */
  async function ask(r: Proc, command: string, re: RegExp): Promise<string> {
    const from = r.out().length;
    // Without a terminal nothing echoes the typed command, so an answer begins on its prompt's line
    // ("mol $ channel  depth ..."): each prompt is read as a line break, so every answer's first
    // line starts a line, also when the command was sent again below.
    const seen = () => r.out().slice(from).replaceAll("mol $ ", "\n");
    r.child.stdin.write(`${command}\n`);
    let tries = 0;
    await eventually(
      () => {
        if (!re.test(seen()) && ++tries % 20 === 0) r.child.stdin.write(`${command}\n`);
        expect(seen()).toMatch(re);
      },
      { timeoutMs: 15000 },
    );
    return seen();
  }

  it("cluster, outbox, exports, campaigns and keys answer from the live nodes", async () => {
    const r = await join();
    try {
      const cluster = await ask(r, "cluster", new RegExp(`${nodeID}\\s+auth, campaigns, contacts, exports, gateway, notifier, tracking`));
      expect(cluster).toMatch(/^node\s+services$/m);
      expect(cluster).toMatch(/^repl-\S+ \(this REPL\)\s+-$/m);

      const outbox = await ask(r, "outbox", /^SMS\s+1\s+0\s+\d+\.\d s$/m);
      expect(outbox).toMatch(/^channel\s+depth\s+claimed\s+oldest due$/m);

      const exports = await ask(r, "exports", new RegExp(`${exportIds.queued}\\s+${company}\\s+CONTACTS\\s+QUEUED\\s+\\d+\\.\\d s\\s+-`));
      // Its age counts from its creation 90 s before the set-up: 90 s or more, however long the commands before took on a busy machine.
      expect(exports).toMatch(new RegExp(`^${exportIds.processing}\\s+${company}\\s+CONTACTS\\s+PROCESSING\\s+(9\\d|[1-9]\\d{2,})\\.\\d s\\s+elsewhere$`, "m"));
      // Oldest first.
      expect(exports.indexOf(exportIds.processing)).toBeLessThan(exports.indexOf(exportIds.queued));

      await ask(r, "campaigns", new RegExp(`^${campaignId}\\s+${company}\\s+SMS\\s+10\\s+4\\s+1\\s+50 %$`, "m"));
      await ask(r, "keys", new RegExp(`^${nodeID}\\s+1$`, "m"));
      r.child.stdin.write("quit\n");
      expect(await r.exitCode()).toBe(0);
      expect(r.err()).not.toMatch(/\n\s+at /);
    } finally {
      await r.kill();
    }
  }, 90000);

  it("shows the same state on /metrics, for the alerts: outbox, export queue, a campaign still for 5 minutes", async () => {
    const text = (await node.root.get("/metrics")).text;
    const value = (series: string) => Number(new RegExp(`^${series.replace(/[{}]/g, "\\$&")} (\\S+)$`, "m").exec(text)?.[1] ?? "NaN");
    expect(value("webhook_outbox_depth")).toBe(1);
    expect(value('export_jobs{status="QUEUED"}')).toBe(1);
    expect(value("export_queue_oldest_age_seconds")).toBeGreaterThanOrEqual(30);
    expect(value("campaigns_sending")).toBe(1);
    expect(value("campaign_sending_still_seconds")).toBeGreaterThanOrEqual(300);
    expect(value("campaign_sending_still_seconds")).toBeLessThan(400);
  });

  it("says in one line that no node runs a service, in a namespace where none runs", async () => {
    const dir = tmpDir();
    const r = repl({ TRANSPORTER: TEST_NATS_URL!, NAMESPACE: uid("empty"), HOME: dir });
    try {
      await r.waitFor(/mol \$/, 30000);
      for (const [command, service] of [
        ["outbox", "notifier"],
        ["exports", "exports"],
        ["campaigns", "campaigns"],
        ["keys", "gateway"],
      ]) {
        await ask(r, command!, new RegExp(`^no ${service} node is running$`, "m"));
      }
      r.child.stdin.write("quit\n");
      expect(await r.exitCode()).toBe(0);
    } finally {
      await r.kill();
    }
  }, 60000);
});

describe("npm run repl with nothing to join", () => {
  it("says in one line how to start the service", async () => {
    const dir = tmpDir();
    const r = repl({ DATA_DIR: dir, HOME: dir });
    expect(await r.exitCode()).toBe(1);
    const lines = r.err().trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/Nothing is running on DATA_DIR .*: start the service first \(`npm start`/);
  });

  it("treats a repl.json left by a process that died as nothing running", async () => {
    const dir = tmpDir();
    fs.writeFileSync(replInfoOf(dir), JSON.stringify({ pid: 2 ** 22 + 4321, nodeID: "gone", socket: replSocketOf(dir), startedAt: "x" }));
    const r = repl({ DATA_DIR: dir, HOME: dir });
    expect(await r.exitCode()).toBe(1);
    expect(r.err().trim().split("\n")).toEqual([expect.stringMatching(/^Nothing is running on DATA_DIR/)]);
  });
});
