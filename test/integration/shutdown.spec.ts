/**
 * Graceful stop, as Kubernetes stops a pod: `npm start`'s process gets SIGTERM while requests are
 * in flight. It takes no new connection, finishes what it is serving (bounded by
 * SHUTDOWN_TIMEOUT_MS), and exits 0; what it answered is committed. Readiness goes 503 as the stop
 * begins. Embedded defaults (PGlite under DATA_DIR), one process.
 */
import { spawn, type ChildProcess } from "node:child_process";
import http from "node:http";
import path from "node:path";
import { startTestApp, waitForRoutes } from "../helpers/app";
import { freePort } from "../helpers/ports";
import { seededDataDir } from "../helpers/template-db";
import { productScript } from "../helpers/product-build";

const ROOT = path.join(__dirname, "../..");
const API = "/api/partner-gateway/v1";

const clean = () =>
  Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|DATA_DIR|TRANSPORTER|SERVICES|PORT|INTERNAL_PORT|TEST_|LOG_|NODE_ID|SHUTDOWN_)/.test(k)),
  );

interface Service {
  child: ChildProcess;
  port: number;
  exited: Promise<number | null>;
}

async function start(dir: string, env: Record<string, string> = {}): Promise<Service> {
  const port = await freePort();
  const internalPort = await freePort();
  // As `npm start` runs it (node --import tsx): not through tsx's command line, which SIGKILLs a
  // child whose event loop does not acknowledge a relayed SIGTERM within 30 ms (exit 143 under load).
  const child = spawn(process.execPath, ["--experimental-async-context-frame", "--import", "tsx", path.join(ROOT, "scripts/start.ts")], {
    cwd: ROOT,
    env: { ...clean(), DATA_DIR: dir, PORT: String(port), INTERNAL_PORT: String(internalPort), LOG_LEVEL: "warn", RATE_LIMIT_RPS: "100000", ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  child.stderr!.resume();
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  await waitForRoutes(`http://127.0.0.1:${port}`, 90000);
  return { child, port, exited };
}

/** A key for the test (the admin command, compiled: product-build.ts; its own behaviour is running.spec's subject). */
function admin(dir: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...productScript("admin"), "keys:create", "--company", "acme", "--operations", "ALL"], {
      cwd: ROOT,
      env: { ...clean(), DATA_DIR: dir, LOG_LEVEL: "warn" },
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.resume();
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolve(JSON.parse(out).apiKey as string) : reject(new Error(`admin exited ${code}`))));
  });
}

interface Answer {
  status: number | null;
  error: string | null;
}

/**
 * A POST /contacts whose body arrives in two halves: the server has begun it (head read, waiting
 * for the body) until `finish()` sends the rest. Its own connection, closed after.
 */
function slowContact(port: number, key: string, phone: string) {
  const body = JSON.stringify({ firstName: "Slow", lastName: phone.slice(-2), phoneNumber: phone });
  const half = Math.floor(body.length / 2);
  let settle!: (a: Answer) => void;
  const answer = new Promise<Answer>((resolve) => (settle = resolve));
  const req = http.request({
    host: "127.0.0.1",
    port,
    method: "POST",
    path: `${API}/contacts`,
    agent: false,
    headers: { "x-api-key": key, "content-type": "application/json", "content-length": Buffer.byteLength(body) },
  });
  req.on("response", (res) => {
    res.resume();
    res.on("end", () => settle({ status: res.statusCode ?? null, error: null }));
  });
  req.on("error", (e: NodeJS.ErrnoException) => settle({ status: null, error: e.code ?? e.message }));
  req.flushHeaders();
  req.write(body.slice(0, half));
  return { answer, finish: () => req.end(body.slice(half)) };
}

function get(port: number, key: string, p: string): Promise<Answer & { body: string }> {
  return new Promise((resolve) => {
    const req = http.get({ host: "127.0.0.1", port, path: `${API}${p}`, agent: false, headers: { "x-api-key": key } }, (res) => {
      let body = "";
      res.on("data", (d) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode ?? null, error: null, body }));
    });
    req.on("error", (e: NodeJS.ErrnoException) => resolve({ status: null, error: e.code ?? e.message, body: "" }));
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("SIGTERM under load", () => {
  const children: ChildProcess[] = [];
  afterAll(() => {
    for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
  });

  it("finishes every request in flight, takes no new connection, exits 0, and keeps what it answered", async () => {
    const dir = await seededDataDir("pgw-shutdown-");
    const svc = await start(dir, { SHUTDOWN_TIMEOUT_MS: "15000" });
    children.push(svc.child);
    const key = await admin(dir);
    // Load: readers on their own connections, while ten writers are half-way through their bodies.
    let reading = true;
    const reads: Answer[] = [];
    const readers = Array.from({ length: 8 }, async () => {
      while (reading) reads.push(await get(svc.port, key, "/contacts?limit=10"));
    });
    const phones = Array.from({ length: 10 }, (_, i) => `+3519123456${String(10 + i)}`);
    const writers = phones.map((p) => slowContact(svc.port, key, p));
    await sleep(500); // every writer's head is read by now; the readers have had answers
    reading = false;
    await Promise.all(readers);
    const stoppedAt = Date.now();
    svc.child.kill("SIGTERM");
    await sleep(300);
    // Stopping: no new connection is taken (Kubernetes has already routed traffic away)...
    const late = await get(svc.port, key, "/contacts");
    expect(late.error).toBe("ECONNREFUSED");
    // ...and what was in flight is finished.
    for (const w of writers) w.finish();
    const answers = await Promise.all(writers.map((w) => w.answer));
    expect(answers).toEqual(phones.map(() => ({ status: 201, error: null })));
    expect(await svc.exited).toBe(0);
    expect(Date.now() - stoppedAt).toBeLessThan(15000);
    expect(reads.length).toBeGreaterThan(8);
    expect(reads.filter((r) => r.status !== 200)).toEqual([]);

    // Started again on the same data: the ten answered contacts are there.
    const again = await start(dir);
    children.push(again.child);
    try {
      const list = await get(again.port, key, "/contacts?limit=100");
      const numbers = (JSON.parse(list.body).data as { phoneNumber: string }[]).map((c) => c.phoneNumber).sort();
      expect(numbers).toEqual(phones);
    } finally {
      again.child.kill("SIGTERM");
      expect(await again.exited).toBe(0);
    }
  }, 240000);

  it("cuts a request still open after SHUTDOWN_TIMEOUT_MS and exits 0 all the same", async () => {
    const dir = await seededDataDir("pgw-shutdown-");
    const svc = await start(dir, { SHUTDOWN_TIMEOUT_MS: "1500" });
    children.push(svc.child);
    const key = await admin(dir);
    const stuck = slowContact(svc.port, key, "+351912345699"); // its body never ends
    await sleep(300);
    const stoppedAt = Date.now();
    svc.child.kill("SIGTERM");
    expect(await svc.exited).toBe(0);
    const took = Date.now() - stoppedAt;
    expect(took).toBeGreaterThanOrEqual(1400);
    expect(took).toBeLessThan(12000);
    expect((await stuck.answer).status).toBeNull(); // cut: no answer
  }, 180000);
});

describe("readiness while stopping", () => {
  it("answers 503 'stopping' from the moment the stop begins, while a request is still being served", async () => {
    const t = await startTestApp({ services: ["gateway", "auth", "contacts"], config: { shutdownTimeoutMs: 10000 } });
    const a = await t.newAccount(["CONTACTS"]);
    expect((await t.root.get("/healthz/ready")).status).toBe(200);
    const holder = slowContact(t.app.port!, a.key.apiKey, "+351912345698");
    await sleep(300);
    const stopping = t.app.stop();
    // The listener no longer takes connections, so the readiness the probe would read is asked in-process.
    const gw = t.app.broker.getLocalService("gateway") as unknown as { readiness(): Promise<Record<string, string>> };
    expect(await gw.readiness()).toMatchObject({ node: "stopping" });
    holder.finish();
    expect(await holder.answer).toEqual({ status: 201, error: null }); // served to the end
    await stopping;
    await t.stop();
  }, 60000);
});
