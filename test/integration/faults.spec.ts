/**
 * Outages, survived for real: the product as OS processes (`npm start`'s script with SERVICES,
 * compiled as the image runs it: product-build.ts) over NATS and PostgreSQL, a gateway node
 * (gateway, auth) and a contacts node (then exports nodes and a second gateway), while the parts
 * they need fail: the only contacts node killed, NATS restarted, PostgreSQL stopped, an exports node
 * killed mid-export, a gateway killed under load. (A notifier killed mid-delivery:
 * notifier-kill.spec.ts; a campaigns node killed mid-send: campaigns-kill.spec.ts.) During an outage
 * a request fails fast and honestly (a 503 problem with Retry-After, never a 500, never a 404 "no
 * route", never a wait to the request time-out), readiness says so, and everything recovers by
 * itself when the part is back, with no process exiting.
 *
 * Each process is one Node process (not tsx's CLI, whose child would outlive a SIGKILL of its parent).
 *
 * The machine's NATS and PostgreSQL serve every other test file at the same time, so they are never
 * stopped here: this file runs a NATS server of its own (killed and started again on the same port
 * = "NATS restarted"), and reaches PostgreSQL through a TCP proxy of its own ("PostgreSQL stopped" =
 * every connection cut and new ones refused; "started" = accepted again).
 */
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { createPgDatabase, itWithPostgres, TEST_DATABASE_URL } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { freePort } from "../helpers/ports";
import { productScript } from "../helpers/product-build";

const ROOT = path.join(__dirname, "../..");
const NATS_SERVER = "/usr/sbin/nats-server";
const API = "/api/partner-gateway/v1";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A TCP proxy in front of PostgreSQL that can be cut (connections destroyed, new ones refused) and restored. */
class Proxy {
  private server: net.Server | null = null;
  private sockets = new Set<net.Socket>();
  constructor(
    readonly port: number,
    private readonly target: { host: string; port: number },
  ) {}

  async up(): Promise<void> {
    const server = net.createServer((client) => {
      const upstream = net.connect(this.target.port, this.target.host);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on("close", () => this.sockets.delete(s));
        s.on("error", () => undefined);
      }
      client.pipe(upstream).pipe(client);
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(this.port, "127.0.0.1", () => resolve());
    });
    this.server = server;
  }

  async cut(): Promise<void> {
    const server = this.server;
    this.server = null;
    for (const s of this.sockets) s.destroy();
    if (server) await new Promise((r) => server.close(r));
  }
}

/** A process of ours (its output kept for the failure message), killed at the end whatever happens. */
interface Proc {
  child: ChildProcess;
  output(): string;
  stdout?(): string;
  exited: boolean;
}
const procs: Proc[] = [];

function start(args: string[], env: Record<string, string>): Proc {
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|DATA_DIR|TRANSPORTER|SERVICES|PORT|INTERNAL_PORT|TEST_|LOG_|NODE_ID|NAMESPACE)/.test(k)),
  );
  const child = spawn(process.execPath, args, {
    cwd: ROOT,
    env: { ...clean, LOG_LEVEL: "warn", LOG_FORMAT: "json", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let stdout = "";
  child.stdout!.on("data", (d) => {
    out = (out + d).slice(-20000);
    stdout = (stdout + d).slice(-20000);
  });
  child.stderr!.on("data", (d) => (out = (out + d).slice(-20000)));
  const p: Proc = { child, output: () => out, stdout: () => stdout, exited: false };
  child.on("exit", () => (p.exited = true));
  procs.push(p);
  return p;
}

async function stop(p: Proc, signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
  if (p.exited) return;
  const gone = new Promise((r) => p.child.once("exit", r));
  p.child.kill(signal);
  const timer = setTimeout(() => p.child.kill("SIGKILL"), 30000);
  await gone;
  clearTimeout(timer);
}

interface Answer {
  status: number;
  ms: number;
  retryAfter: string | null;
  type: string | null;
}

async function get(port: number, p: string, key?: string): Promise<Answer> {
  const started = Date.now();
  const res = await fetch(`http://127.0.0.1:${port}${p}`, { headers: key ? { "x-api-key": key } : {}, signal: AbortSignal.timeout(60000) });
  const body = (await res.json().catch(() => ({}))) as { type?: string };
  return { status: res.status, ms: Date.now() - started, retryAfter: res.headers.get("retry-after"), type: body.type ?? null };
}

/** What a partner must see during an outage: 503 with Retry-After, a problem body, and at once. */
function expectFastOutage(a: Answer) {
  expect({ status: a.status, retryAfter: a.retryAfter !== null, type: a.type }).toEqual({
    status: 503,
    retryAfter: true,
    type: expect.stringMatching(/^\/docs#problem-/),
  });
  expect(a.ms).toBeLessThan(6000);
}

describe("outages answered fast and honestly, and survived", () => {
  let natsPort: number;
  let nats: Proc;
  let proxy: Proxy;
  let drop: (() => Promise<void>) | null = null;
  let gateway: Proc;
  let contacts: Proc;
  let gwPort: number;
  let contactsPort: number;
  let key: string;
  let env: Record<string, string>;
  let directUrl: string;
  const natsDir = fs.mkdtempSync(path.join(os.tmpdir(), "pgw-faults-nats-"));

  const startNats = async () => {
    const child = spawn(NATS_SERVER, ["-a", "127.0.0.1", "-p", String(natsPort), "-sd", natsDir], { stdio: "ignore" });
    nats = { child, output: () => "", exited: false };
    child.on("exit", () => (nats.exited = true));
    procs.push(nats);
    await eventually(
      () =>
        new Promise<void>((resolve, reject) => {
          const s = net.connect(natsPort, "127.0.0.1", () => {
            s.destroy();
            resolve();
          });
          s.on("error", reject);
        }),
      { timeoutMs: 10000 },
    );
  };

  const startContacts = async () => {
    contacts = start(productScript("start"), {
      ...env,
      SERVICES: "contacts",
      PORT: String(contactsPort),
      NODE_ID: "faults-contacts",
    });
    await eventually(async () => expect((await get(gwPort, `${API}/contacts`, key)).status).toBe(200), { timeoutMs: 60000, intervalMs: 250 });
  };

  beforeAll(async () => {
    if (!TEST_DATABASE_URL || !fs.existsSync(NATS_SERVER)) return;
    const pgdb = await createPgDatabase();
    drop = pgdb.drop;
    directUrl = pgdb.url;
    const target = new URL(TEST_DATABASE_URL);
    proxy = new Proxy(await freePort(), { host: target.hostname, port: Number(target.port || 5432) });
    await proxy.up();
    const viaProxy = new URL(pgdb.url);
    viaProxy.hostname = "127.0.0.1";
    viaProxy.port = String(proxy.port);
    natsPort = await freePort();
    await startNats();
    [gwPort, contactsPort] = [await freePort(), await freePort()];
    env = {
      DATABASE_URL: viaProxy.toString(),
      TRANSPORTER: `nats://127.0.0.1:${natsPort}`,
      NAMESPACE: `faults${process.pid}`,
      RATE_LIMIT_RPS: "100000",
      REQUEST_TIMEOUT_MS: "20000",
    };
    gateway = start(productScript("start"), {
      ...env,
      SERVICES: "gateway,auth",
      PORT: String(gwPort),
      NODE_ID: "faults-gateway",
    });
    const admin = start([...productScript("admin"), "keys:create", "--company", "faults", "--operations", "ALL"], {
      DATABASE_URL: env.DATABASE_URL!,
    });
    await new Promise((r) => admin.child.once("exit", r));
    key = JSON.parse(admin.stdout!().trim().split("\n").pop()!).apiKey;
    await eventually(async () => expect((await get(gwPort, "/healthz/ready")).status).toBe(200), { timeoutMs: 60000, intervalMs: 250 });
    await startContacts();
  }, 180000);

  afterAll(async () => {
    // FAULTS_DEBUG=1 keeps each process's output in /tmp/faults-proc-<n>.log, to see why a case failed.
    if (process.env.FAULTS_DEBUG) for (const [i, p] of procs.entries()) fs.writeFileSync(`/tmp/faults-proc-${i}.log`, p.output());
    await Promise.all(procs.map((p) => stop(p, "SIGKILL")));
    await proxy?.cut();
    await drop?.();
  });

  itWithPostgres(
    "the only contacts node killed: 503 at once, before and after the registry drops it; back when a node returns",
    async () => {
      await stop(contacts, "SIGKILL");
      // NATS notices the closed connection a moment later (under load, some milliseconds): a call
      // published before that is delivered to the dead subscription and waits for the node's
      // heartbeats to time out. From then on nobody listens on its subject.
      await sleep(1000);
      try {
        // Before the registry notices (heartbeats time out after 15 s): the call goes to a node that is gone.
        expectFastOutage(await get(gwPort, `${API}/contacts`, key));
        // After: no node serves the route, which stays the API's: 503, not 404.
        await sleep(17000);
        expectFastOutage(await get(gwPort, `${API}/contacts`, key));
        expect((await get(gwPort, `${API}/contacts/00000000-0000-4000-8000-000000000000`, key)).status).toBe(503);
      } finally {
        await startContacts(); // the cases after this one need it, whatever happened here
      }
      expect(gateway.exited).toBe(false);
    },
    120000,
  );

  itWithPostgres(
    "NATS restarted: 503 at once and readiness 503 while it is down; every node back by itself",
    async () => {
      await stop(nats, "SIGKILL");
      await sleep(1000);
      expectFastOutage(await get(gwPort, `${API}/contacts`, key));
      const ready = await get(gwPort, "/healthz/ready");
      expect(ready.status).toBe(503);
      await startNats();
      await eventually(async () => expect((await get(gwPort, "/healthz/ready")).status).toBe(200), { timeoutMs: 60000, intervalMs: 500 });
      await eventually(async () => expect((await get(gwPort, `${API}/contacts`, key)).status).toBe(200), { timeoutMs: 60000, intervalMs: 500 });
      expect({ gateway: gateway.exited, contacts: contacts.exited }).toEqual({ gateway: false, contacts: false });
    },
    120000,
  );

  itWithPostgres(
    "PostgreSQL stopped: 503 at once and readiness 503; served again once it is back, no process exits",
    async () => {
      await proxy.cut();
      expectFastOutage(await get(gwPort, `${API}/contacts`, key));
      expect((await get(gwPort, "/healthz/ready")).status).toBe(503);
      await proxy.up();
      await eventually(async () => expect((await get(gwPort, "/healthz/ready")).status).toBe(200), { timeoutMs: 60000, intervalMs: 500 });
      await eventually(async () => expect((await get(gwPort, `${API}/contacts`, key)).status).toBe(200), { timeoutMs: 60000, intervalMs: 500 });
      expect({ gateway: gateway.exited, contacts: contacts.exited }).toEqual({ gateway: false, contacts: false });
    },
    120000,
  );
  itWithPostgres(
    "an exports node SIGKILLed mid-export: another exports node completes the export after the lease, and the file downloads whole",
    async () => {
      const ROWS = 200_000;
      const db = new pg.Client({ connectionString: directUrl });
      await db.connect();
      const exportDir = fs.mkdtempSync(path.join(os.tmpdir(), "pgw-faults-exports-"));
      const exportsEnv = {
        ...env,
        SERVICES: "exports",
        EXPORT_DIR: exportDir,
        EXPORT_SIGNING_KEY: "faults-signing-key-0123456789abcdef0123",
        EXPORT_LEASE_MS: "3000",
      };
      // The history's statement is tracking's (tracking.exportStatement): a tracking node runs meanwhile.
      const tracking = start(productScript("start"), {
        ...env,
        SERVICES: "tracking",
        PORT: String(await freePort()),
        INTERNAL_PORT: String(await freePort()),
        NODE_ID: "faults-tracking",
        INTERNAL_TOKEN: "faults-internal-token-0123456789",
      });
      try {
        await db.query(
          `INSERT INTO messages (company_id, channel, customer_message_id, destination, sent_at, status_code, text)
           SELECT 'faults', 'SMS', 'x-' || g, '+3519' || lpad(g::text, 8, '0'), now() - g * interval '1 second', 3, repeat('x', 120)
             FROM generate_series(1, $1::int) g`,
          [ROWS],
        );
        const first = start(productScript("start"), {
          ...exportsEnv,
          PORT: String(await freePort()),
          NODE_ID: "faults-exports-a",
        });
        await eventually(async () => expect((await get(gwPort, `${API}/exports`, key)).status).toBe(200), { timeoutMs: 60000, intervalMs: 250 });
        const created = await fetch(`http://127.0.0.1:${gwPort}${API}/messages/history/export`, {
          method: "POST",
          headers: { "x-api-key": key, "content-type": "application/json" },
          body: JSON.stringify({ channel: "SMS" }),
        });
        expect(created.status).toBe(202);
        const exportId = ((await created.json()) as { exportId: string }).exportId;
        // Killed while it writes the file.
        await eventually(
          async () => {
            const { rows } = await db.query(`SELECT status, node_id FROM export_jobs WHERE id = $1`, [exportId]);
            expect(rows[0]).toEqual({ status: "PROCESSING", node_id: "faults-exports-a" });
          },
          { timeoutMs: 30000, intervalMs: 20 },
        );
        await stop(first, "SIGKILL");
        expect((await db.query(`SELECT status FROM export_jobs WHERE id = $1`, [exportId])).rows[0].status).toBe("PROCESSING");
        start(productScript("start"), { ...exportsEnv, PORT: String(await freePort()), NODE_ID: "faults-exports-b" });
        await eventually(
          async () => {
            const { rows } = await db.query(`SELECT status, node_id, row_count::int AS rows FROM export_jobs WHERE id = $1`, [exportId]);
            expect(rows[0]).toEqual({ status: "COMPLETED", node_id: "faults-exports-b", rows: ROWS });
          },
          { timeoutMs: 90000, intervalMs: 250 },
        );
        // The gateway may still hold the killed node in its registry: a call sent there fails at once
        // (503, NATS: no responders) and takes it out, so the next one reaches the live node.
        const job = await eventually(
          async () => {
            const answer = await fetch(`http://127.0.0.1:${gwPort}${API}/exports/${exportId}`, { headers: { "x-api-key": key } });
            const body = (await answer.json()) as { downloadUrl: string };
            expect({ status: answer.status, body }).toEqual({ status: 200, body: expect.objectContaining({ downloadUrl: expect.any(String) }) });
            return body;
          },
          { timeoutMs: 5000, intervalMs: 100 },
        );
        const download = new URL(job.downloadUrl, "http://localhost");
        const res = await fetch(`http://127.0.0.1:${gwPort}${download.pathname}`);
        expect(res.status).toBe(200);
        let lines = 0;
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) for (const b of chunk) if (b === 10) lines++;
        expect(lines).toBe(ROWS + 1); // the header, then every row
        expect(gateway.exited).toBe(false);
      } finally {
        await stop(tracking);
        await db.end();
      }
    },
    180000,
  );
  itWithPostgres(
    "a gateway SIGKILLed behind round-robin under load: the other serves on, no 5xx",
    async () => {
      const secondPort = await freePort();
      const second = start(productScript("start"), {
        ...env,
        SERVICES: "gateway",
        PORT: String(secondPort),
        NODE_ID: "faults-gateway-2",
      });
      await eventually(async () => expect((await get(secondPort, `${API}/contacts`, key)).status).toBe(200), { timeoutMs: 60000, intervalMs: 250 });
      // A balancer's view: round-robin over the gateways it believes up; a refused or reset
      // connection takes a gateway out and the request goes to the next (nothing was served).
      const up = new Set([gwPort, secondPort]);
      const statuses: number[] = [];
      let turn = 0;
      let running = true;
      const client = async () => {
        while (running) {
          const port = [...up][turn++ % up.size]!;
          try {
            statuses.push((await get(port, `${API}/contacts?limit=5`, key)).status);
          } catch {
            up.delete(port);
          }
        }
      };
      const clients = Array.from({ length: 4 }, client);
      await sleep(1000);
      await stop(second, "SIGKILL");
      const killedAt = statuses.length;
      await sleep(2000);
      running = false;
      await Promise.all(clients);
      expect(up).toEqual(new Set([gwPort]));
      expect(statuses.length - killedAt).toBeGreaterThan(10);
      expect(statuses.filter((s) => s !== 200)).toEqual([]);
      expect(gateway.exited).toBe(false);
    },
    120000,
  );
});
